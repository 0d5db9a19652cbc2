"""The agent services (a node's agent acts on its own node's jobs only) and the batch
submit: each legal call writes one log row and its projection; anything else raises the
named error and writes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.forms.models import model_to_dict

from scheduler_app.core.states import IllegalTransition, JobState, Reason
from scheduler_app.core.types import Actor, NodeHealth
from scheduler_app.models import Allocation, Job, Node, Pod, Tenant, Transition
from scheduler_app.services import job_cancel
from scheduler_app.services.agents import (
    EXITS,
    agent_ack_preempt,
    agent_confirm_start,
    agent_heartbeat,
    agent_register,
    agent_report_checkpoint,
    agent_report_exit,
    is_replayed,
)
from scheduler_app.services.cluster import node_drain, node_mark_down, nodes_mark_silent_down
from scheduler_app.services.errors import Conflict, Forbidden, Invalid, NotFound
from scheduler_app.services.jobs import MAX_BATCH, jobs_submit_batch
from tests.foundation.factories import T0, NodeFactory, TenantFactory, UserFactory, job_in_state
from tests.foundation.test_replay import replay_verify

pytestmark = pytest.mark.django_db

S = JobState
LATER = T0 + timedelta(hours=1)


def snapshot() -> dict[str, object]:
    return {
        "log": list(Transition.objects.order_by("pk").values()),
        "jobs": [model_to_dict(j) for j in Job.objects.order_by("pk")],
        "allocations": list(Allocation.objects.order_by("pk").values()),
        "nodes": list(Node.objects.order_by("pk").values()),
        "tenants": [model_to_dict(t) for t in Tenant.objects.order_by("pk")],
    }


@pytest.fixture
def tenant():
    return TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)


# --------------------------------------------------------------------------- register
def test_a_new_node_registers_with_one_row_and_counts_as_a_heartbeat():
    node = agent_register(name="gpu-17", pod="pod-z", gpus=8, gpu_type="H100", rail=1, at=T0)
    assert (node.pod.name, node.gpu_count, node.free_gpus, node.gpu_type, node.rail) == (
        "pod-z", 8, 8, "H100", 1
    )
    assert (node.health, node.last_heartbeat) == (NodeHealth.HEALTHY, T0)
    row = Transition.objects.get()
    assert (row.kind, row.node_id, row.from_state, row.to_state) == ("node", node.pk, None,
                                                                      "healthy")
    assert (row.actor, row.actor_name, row.detail["action"]) == (Actor.AGENT, "gpu-17",
                                                                  "register")


def test_registering_again_unchanged_only_refreshes_the_heartbeat():
    agent_register(name="gpu-1", pod="pod-a", gpus=8, at=T0)
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=LATER)
    assert node.last_heartbeat == LATER and Transition.objects.count() == 1


def test_a_node_the_heartbeat_timeout_marked_down_comes_up_when_it_registers_again():
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=T0)
    assert [n.pk for n in nodes_mark_silent_down(now=LATER, timeout_s=30)] == [node.pk]
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=LATER)
    assert node.health == NodeHealth.HEALTHY
    row = Transition.objects.last()
    assert (row.from_state, row.to_state, row.detail["action"]) == ("down", "healthy", "up")
    ok, output = replay_verify()
    assert ok, output


def test_a_node_an_operator_marked_down_stays_down_when_its_agent_registers():
    """The agent does not fight the operator (agent-protocol.md); it did until
    2026-12-07. An operator's registration brings it up (the operator's own act)."""
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=T0)
    node_mark_down(node=node, actor_name="ops", why="reboot")
    rows = Transition.objects.count()
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=LATER)
    assert node.health == NodeHealth.DOWN and Transition.objects.count() == rows
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=LATER, operator="ops")
    assert node.health == NodeHealth.HEALTHY
    ok, output = replay_verify()
    assert ok, output


def test_a_draining_node_that_registers_again_stays_draining():
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=T0)
    node_drain(node=node, actor_name="ops")
    assert agent_register(name="gpu-1", pod="pod-a", gpus=8, at=LATER).health == "draining"


def test_a_shape_change_is_logged_and_refused_while_jobs_hold_gpus(tenant):
    node = agent_register(name="gpu-1", pod="pod-a", gpus=8, at=T0)
    node = agent_register(name="gpu-1", pod="pod-b", gpus=4, at=T0)
    assert (node.pod.name, node.gpu_count, node.free_gpus) == ("pod-b", 4, 4)
    assert Transition.objects.last().detail["after"]["gpus"] == 4
    job_in_state(S.RUNNING, tenant=tenant, node=node, gpus=2)
    before = snapshot()
    with pytest.raises(Conflict) as refused:
        agent_register(name="gpu-1", pod="pod-b", gpus=8, at=LATER)
    assert refused.value.code == "node_busy"
    assert snapshot() == before


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"name": ""}, "name"), ({"gpus": 0}, "gpus"), ({"gpus": "8"}, "gpus"),
     ({"pod": ""}, "pod"), ({"rail": -1}, "rail"), ({"gpu_type": "x" * 40}, "gpu_type")],
)
def test_an_invalid_registration_names_the_field_and_writes_nothing(kwargs, field):
    with pytest.raises(Invalid) as refused:
        agent_register(**{"name": "gpu-1", "pod": "pod-a", "gpus": 8, **kwargs})
    assert refused.value.field == field
    assert not Node.objects.exists() and not Pod.objects.exists()


def test_a_heartbeat_is_not_logged_and_an_unknown_node_is_not_found():
    node = NodeFactory()
    assert agent_heartbeat(node=node, at=LATER).last_heartbeat == LATER
    node.refresh_from_db()
    assert node.last_heartbeat == LATER and not Transition.objects.exists()
    ghost = Node(pk=9999, name="ghost")
    with pytest.raises(NotFound):
        agent_heartbeat(node=ghost)


# --------------------------------------------------------------------------- job moves
def _confirm(node, job):
    return agent_confirm_start(node=node, job=job, at=LATER)


def _checkpoint(node, job):
    return agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ck/1",
                                   checkpoint_at=LATER)


def _ack(node, job):
    return agent_ack_preempt(node=node, job=job, at=LATER)


def _exit(outcome):
    def call(node, job):
        return agent_report_exit(node=node, job=job, outcome=outcome, exit_code=0, at=LATER)
    return call


#: call -> {state it is legal from: (state after, reason)}
CALLS = {
    "confirm": (_confirm, {S.PLACING: (S.RUNNING, Reason.STARTED)}),
    "checkpoint": (_checkpoint, {s: (s, Reason.CHECKPOINTED)
                                 for s in (S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING)}),
    "ack": (_ack, {S.PREEMPT_REQUESTED: (S.CHECKPOINTING, Reason.CHECKPOINT_STARTED)}),
    **{f"exit-{o}": (_exit(o), moves) for o, moves in EXITS.items()},
}
#: call -> {state in which the call repeats a report already in the log (another node of
#: the gang, or a retry): reason of the row it answers with, writing nothing}. The
#: factory's COMPLETED run was ended by an agent's report; its FAILED and PREEMPTED runs
#: by the scheduler, so an exit report there stays a conflict.
REPEATS = {
    "confirm": {s: Reason.STARTED for s in (S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING)},
    "ack": {S.CHECKPOINTING: Reason.CHECKPOINT_STARTED},
    **{f"exit-{o}": {S.COMPLETED: Reason.COMPLETED} for o in EXITS},
}
#: states of a job that holds (or held) GPUs 0.. of the node (job_in_state's paths); a job
#: that never held any there is Forbidden (below)
STATES = [S.PLACING, S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING, S.PREEMPTED,
          S.COMPLETED, S.FAILED]


@pytest.mark.parametrize("state", STATES, ids=str)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_agent_call_from_every_state_is_one_row_or_a_conflict(tenant, call, state):
    node = NodeFactory()
    job = job_in_state(state, tenant=tenant, node=node, gpus=4)
    fn, moves = CALLS[call]
    before = snapshot()
    if state in REPEATS.get(call, {}):
        row = fn(node, job)
        assert is_replayed(row) and row.reason == REPEATS[call][state]
        assert row == Transition.objects.filter(job=job, reason=row.reason).last()
        assert snapshot() == before
        return
    if state not in moves:
        with pytest.raises(Conflict) as refused:
            fn(node, job)
        assert refused.value.code == f"job_{state.lower()}"
        assert snapshot() == before
        return
    row = fn(node, job)
    to_state, reason = moves[state]
    assert Transition.objects.count() == len(before["log"]) + 1
    assert (row.kind, row.from_state, row.to_state, row.reason) == ("job", state, to_state,
                                                                    reason)
    assert (row.actor, row.actor_name, row.at) == (Actor.AGENT, node.name, LATER)
    job.refresh_from_db()
    assert job.state == to_state
    ok, output = replay_verify()
    assert ok, output


def test_the_projection_follows_the_agents_reports(tenant):
    node = NodeFactory()
    job = job_in_state(S.RUNNING, tenant=tenant, node=node, gpus=4)
    agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ck/7", checkpoint_at=LATER)
    job.refresh_from_db()
    assert (job.resume_pointer, job.last_checkpoint_at) == ("s3://ck/7", LATER)
    agent_report_exit(node=node, job=job, outcome="failed", exit_code=137, at=LATER)
    job.refresh_from_db()
    node.refresh_from_db()
    assert (job.state, job.finished_at, node.free_gpus) == (S.FAILED, LATER, 8)
    assert Transition.objects.last().detail == {"exit_code": 137}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_agent_cannot_touch_another_nodes_job(tenant, call):
    mine, theirs = NodeFactory(), NodeFactory()
    fn, moves = CALLS[call]
    job = job_in_state(next(iter(moves)), tenant=tenant, node=theirs, gpus=4)
    before = snapshot()
    with pytest.raises(Forbidden) as refused:
        fn(mine, job)
    assert (refused.value.code, refused.value.field) == ("not_on_node", "job")
    assert snapshot() == before


def test_a_queued_job_that_never_ran_here_is_forbidden_too(tenant):
    node = NodeFactory()
    job = job_in_state(S.QUEUED, tenant=tenant, node=node)
    with pytest.raises(Forbidden):
        agent_confirm_start(node=node, job=job)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"outcome": "vanished"}, "outcome"), ({"outcome": "failed", "exit_code": "1"},
                                             "exit_code")],
)
def test_a_bad_exit_report_names_the_field(tenant, kwargs, field):
    node = NodeFactory()
    job = job_in_state(S.RUNNING, tenant=tenant, node=node)
    with pytest.raises(Invalid) as refused:
        agent_report_exit(node=node, job=job, **kwargs)
    assert refused.value.field == field


@pytest.mark.parametrize("pointer", ["", "x" * 513, None])
def test_a_checkpoint_needs_a_resume_pointer(tenant, pointer):
    node = NodeFactory()
    job = job_in_state(S.RUNNING, tenant=tenant, node=node)
    with pytest.raises(Invalid) as refused:
        agent_report_checkpoint(node=node, job=job, resume_pointer=pointer)
    assert refused.value.field == "resume_pointer"


def test_an_agent_asking_about_a_job_that_does_not_exist_gets_not_found(tenant):
    node = NodeFactory()
    with pytest.raises(NotFound):
        agent_confirm_start(node=node, job=Job(pk=424242))


def test_cancelling_a_finished_job_is_a_conflict_and_an_illegal_transition(tenant):
    job = job_in_state(S.COMPLETED, tenant=tenant, node=NodeFactory())
    with pytest.raises(Conflict) as refused:
        job_cancel(job_id=job.pk)
    assert isinstance(refused.value, IllegalTransition)
    assert refused.value.code == "illegal_transition"


# --------------------------------------------------------------------------- batch
def specs(n: int, **extra) -> list[dict]:
    return [{"name": f"sweep-{i}", "gpus": 2, **extra} for i in range(n)]


def test_a_batch_submits_every_job_in_order_in_one_transaction(tenant):
    NodeFactory.create_batch(2)
    owner = UserFactory(username="ada")
    jobs = jobs_submit_batch(tenant=tenant, owner=owner, specs=specs(3) + [{"name": "huge",
                             "gpus": 64}], at=T0)
    assert [j.name for j in jobs] == ["sweep-0", "sweep-1", "sweep-2", "huge"]
    assert [j.state for j in jobs] == [S.QUEUED, S.QUEUED, S.QUEUED, S.FAILED]
    assert Transition.objects.count() == 8
    assert set(Transition.objects.values_list("actor_name", flat=True)) == {"ada"}
    assert Transition.objects.last().reason == Reason.NEVER_FITS
    assert all(j.owner == owner for j in jobs)


def test_a_batch_with_bad_specs_names_each_and_writes_nothing(tenant):
    NodeFactory()
    bad = specs(4)
    bad[1]["gpus"] = 0
    bad[3] = {"name": "x", "gpus": 4, "gpus_per_node": 3, "colour": "blue"}
    bad[2]["priority"] = "high"
    with pytest.raises(Invalid) as refused:
        jobs_submit_batch(tenant=tenant, owner=None, specs=bad)
    assert refused.value.field == "jobs[1].gpus"
    assert set(refused.value.errors) == {"jobs[1].gpus", "jobs[2].priority", "jobs[3].colour"}
    assert not Job.objects.exists() and not Transition.objects.exists()


@pytest.mark.parametrize(("count", "code"), [(0, "empty"), (MAX_BATCH + 1, "too_many")])
def test_a_batch_must_hold_one_to_a_thousand_jobs(tenant, count, code):
    with pytest.raises(Invalid) as refused:
        jobs_submit_batch(tenant=tenant, owner=None, specs=specs(count))
    assert (refused.value.field, refused.value.code) == ("jobs", code)
    assert not Job.objects.exists()


def test_a_batch_of_a_thousand_is_accepted(tenant):
    NodeFactory()
    jobs = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(MAX_BATCH, gpus=1), at=T0)
    assert len(jobs) == MAX_BATCH == Job.objects.filter(state=S.QUEUED).count()


def test_the_same_batch_key_returns_the_first_batch_and_writes_nothing(tenant):
    NodeFactory()
    first = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(3), idempotency_key="k1")
    rows = Transition.objects.count()
    again = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(3), idempotency_key="k1")
    assert [j.pk for j in again] == [j.pk for j in first]
    assert [j.idempotency_key for j in first] == ["k1#0", "k1#1", "k1#2"]
    assert Transition.objects.count() == rows


def test_a_batch_retry_returns_only_its_own_jobs_when_another_key_extends_its_key(tenant):
    NodeFactory()
    first = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(2), idempotency_key="k")
    other = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(1), idempotency_key="k#1")
    assert [j.idempotency_key for j in other] == ["k#1#0"]
    again = jobs_submit_batch(tenant=tenant, owner=None, specs=specs(2), idempotency_key="k")
    assert [j.pk for j in again] == [j.pk for j in first]
    assert Job.objects.count() == 3


def test_a_failure_inside_a_batch_leaves_nothing(tenant, monkeypatch):
    NodeFactory()
    from scheduler_app.services import jobs as jobs_module

    real = jobs_module.admit_new_jobs

    def fails_after_writing(*args, **kwargs):
        real(*args, **kwargs)
        assert Job.objects.count() == 5  # written, inside the batch's transaction
        raise RuntimeError("database went away")

    monkeypatch.setattr(jobs_module, "admit_new_jobs", fails_after_writing)
    with pytest.raises(RuntimeError):
        jobs_submit_batch(tenant=tenant, owner=None, specs=specs(5))
    assert not Job.objects.exists() and not Transition.objects.exists()
