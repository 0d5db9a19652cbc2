"""The pure state machine: the table of DESIGN.md, nothing more and nothing less."""

from __future__ import annotations

import pytest

from scheduler_app.core.states import (
    FINAL_STATES,
    PENDING_SENTENCES,
    IllegalTransition,
    JobState,
    PendingReason,
    all_pairs,
    check_transition,
    is_allowed,
)

S = JobState

# Written out independently of states._ALLOWED so a change to the table fails here.
DESIGN_TABLE = {
    S.SUBMITTED: {S.QUEUED, S.FAILED, S.CANCELLED},
    S.QUEUED: {S.PLACING, S.FAILED, S.CANCELLED},
    S.PLACING: {S.RUNNING, S.QUEUED, S.FAILED, S.CANCELLED},
    S.RUNNING: {
        S.COMPLETED, S.FAILED, S.PREEMPT_REQUESTED, S.QUEUED, S.CANCELLED, S.RUNNING,
    },
    S.PREEMPT_REQUESTED: {
        S.CHECKPOINTING, S.PREEMPTED, S.COMPLETED, S.FAILED, S.QUEUED, S.CANCELLED,
        S.PREEMPT_REQUESTED,
    },
    S.CHECKPOINTING: {
        S.PREEMPTED, S.COMPLETED, S.FAILED, S.QUEUED, S.CANCELLED, S.CHECKPOINTING,
    },
    S.PREEMPTED: {S.QUEUED, S.CANCELLED},
    S.COMPLETED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
}


@pytest.mark.parametrize(("from_state", "to_state"), all_pairs())
def test_every_pair_of_states_follows_the_design_table(from_state, to_state):
    expected = to_state in DESIGN_TABLE[from_state]
    assert is_allowed(from_state, to_state) is expected
    if expected:
        check_transition("job-1", from_state, to_state)
    else:
        with pytest.raises(IllegalTransition) as err:
            check_transition("job-1", from_state, to_state)
        message = str(err.value)
        assert "job-1" in message
        assert from_state.value in message and to_state.value in message


def test_final_states_allow_no_move_at_all():
    assert {S.COMPLETED, S.FAILED, S.CANCELLED} == FINAL_STATES
    for final in FINAL_STATES:
        with pytest.raises(IllegalTransition, match="is final"):
            check_transition(7, final, S.QUEUED)


def test_every_non_final_state_can_be_cancelled():
    for state in JobState:
        assert is_allowed(state, S.CANCELLED) is (state not in FINAL_STATES)


def test_unknown_state_names_are_refused_not_crashed():
    assert not is_allowed("RUNNING", "EXPLODED")
    with pytest.raises(IllegalTransition, match="EXPLODED"):
        check_transition("job-9", "RUNNING", "EXPLODED")


def test_every_pending_reason_has_a_sentence():
    assert set(PENDING_SENTENCES) == set(PendingReason)
    assert all(sentence.endswith(".") for sentence in PENDING_SENTENCES.values())
