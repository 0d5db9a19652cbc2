"""Django choices built from the core's enums, so the database and the core share names."""

from __future__ import annotations

from enum import StrEnum

from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.core.types import Actor, NodeHealth


def choices_of(enum: type[StrEnum]) -> list[tuple[str, str]]:
    return [(member.value, member.value) for member in enum]


JOB_STATE_CHOICES = choices_of(JobState)
PENDING_REASON_CHOICES = choices_of(PendingReason)
REASON_CHOICES = choices_of(Reason)
ACTOR_CHOICES = choices_of(Actor)
NODE_HEALTH_CHOICES = choices_of(NodeHealth)
#: A log row's from/to: job states on job rows, node health on node rows.
LOG_STATE_CHOICES = JOB_STATE_CHOICES + NODE_HEALTH_CHOICES
