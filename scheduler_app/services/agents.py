"""Node agent services: what the agent on each node tells the scheduler.

An agent acts only on jobs that hold GPUs on its own node: asking about another node's
job raises Forbidden; a move the job's current state does not allow raises Conflict
(e.g. confirming a job that is no longer PLACING because the placing timeout requeued
it). Each legal call appends one row to the Transition log and updates the projection in
one durable transaction (through ``services.transitions``); the early tick follows.

A gang (a job on several nodes) is confirmed, acknowledged and reported by each of its
nodes' agents. The first report moves the job; the others find it moved already and get
the row that moved it back, with nothing written (``is_replayed(row)`` is True): a
confirmation of a job RUNNING (or further along in the preemption protocol) that holds
GPUs on the node, an acknowledgement of a job already CHECKPOINTING there, and an exit
report of a job whose run on this node an agent's exit report already ended. The same
answers make an agent's retry (its first answer lost) harmless.

The protocol (see docs/production.md): register at start (a down node that registers
again comes up), heartbeat every few seconds (a node silent past
``SCHEDULER_HEARTBEAT_TIMEOUT_S`` is marked down by the leader; it must register again to
come back), poll ``selectors.agents.agent_assignments``, and report: the start of each
job it was given, checkpoints, the acknowledgement of a preemption request, the exit.

``at`` (optional on every call) is the instant of the event; the simulator passes its
virtual time, production leaves it to the clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F

from scheduler_app.core.states import HOLDING_STATES, JobState, Reason
from scheduler_app.core.types import Actor, NodeHealth
from scheduler_app.models import Allocation, Job, Node, Pod, Transition

from .errors import Conflict, Forbidden, Invalid, NotFound
from .jobs import UNPRINTABLE_WORDS, unprintable
from .transitions import append_cluster_row, append_lock, apply_locked, now_s

S = JobState
STOPPING = (S.PREEMPT_REQUESTED, S.CHECKPOINTING)

#: outcome -> {state the job may be in: (state it goes to, reason)}
EXITS: dict[str, dict[JobState, tuple[JobState, Reason]]] = {
    "completed": {
        s: (S.COMPLETED, Reason.COMPLETED)
        for s in (S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING)
    },
    "failed": {
        s: (S.FAILED, Reason.EXIT_FAILED)
        for s in (S.PLACING, S.RUNNING, S.PREEMPT_REQUESTED, S.CHECKPOINTING)
    },
    # it stopped because it was asked to: after its checkpoint, or at once if it cannot
    "preempted": {
        S.CHECKPOINTING: (S.PREEMPTED, Reason.PREEMPTED),
        S.PREEMPT_REQUESTED: (S.PREEMPTED, Reason.NO_CHECKPOINT),
    },
}

#: The reasons of the rows an agent's exit report writes (the ones that end a gang's run
#: for all its nodes).
EXIT_REASONS = frozenset(reason for moves in EXITS.values() for _to, reason in moves.values())

MAX_NODE_GPUS = 1024  # Node.gpu_count is a small integer; no real node comes close

#: A new node's name: letters, digits, '.', '_' and '-', not starting with '.' or '-', at
#: most 64 characters. It is a path segment of the REST API (``/api/v1/nodes/<name>/``),
#: of the agent's default work directory (``./agent-<name>``) and of shell commands; a
#: name such as ``../../etc`` or ``pod x n1`` was registered, and the API could not then
#: address the node (found by a user session, 2026-12-07).
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
NODE_NAME_WORDS = ("A node name is 1 to 64 letters, digits, '.', '_' or '-', and does not "
                   "start with '.' or '-'")

#: How far ahead of the server's clock an agent's clock may run (checkpoint times).
CLOCK_SKEW = timedelta(seconds=60)


def agent_register(
    *,
    name: str,
    pod: str,
    gpus: int,
    gpu_type: str = "",
    rail: int = 0,
    at: datetime | None = None,
    operator: str | None = None,
) -> Node:
    """Create the node, or update a known one; an agent's registration counts as its
    heartbeat. ``operator``: the name of the operator registering it, who the log then
    names (default: the node's own agent). An operator's registration is not a heartbeat:
    it set one, and a node no agent ran was placed on and marked down 30 s later, its jobs
    requeued (an agent author's session, 2026-12-07); a node that never heartbeat is
    exempt from the timeout until its agent calls.

    A new node is logged (action ``register``, from null to healthy). A known node whose
    shape changes (pod, GPUs, GPU type, rail) is logged too, and refused (Conflict, naming
    the first field that changed) while jobs hold GPUs on it. A down node that registers
    again comes up (action ``up``), unless an operator marked it down: an agent does not
    fight the operator (it brought such a node up until 2026-12-07). A draining node stays
    draining: the drain is an operator's decision too.
    """
    _check_registration(name=name, pod=pod, gpus=gpus, gpu_type=gpu_type, rail=rail)
    _check_gpu_type_case(gpu_type)
    at = at or now_s()
    # the log's append lock before the node's row lock, as the leader takes them (a tick
    # updating the node's free GPUs would deadlock with the other order)
    with transaction.atomic(durable=True), append_lock():
        pod_row, _ = Pod.objects.get_or_create(name=pod)
        node = Node.objects.select_for_update().filter(name=name).first()
        shape = {"pod": pod, "gpus": gpus, "gpu_type": gpu_type, "rail": rail}
        if node is None:
            _check_new_node_name(name)
            node = Node.objects.create(
                name=name, pod=pod_row, rail=rail, gpu_type=gpu_type, gpu_count=gpus,
                free_gpus=gpus, health=NodeHealth.HEALTHY.value,
                last_heartbeat=at if operator is None else None,
            )
            _log_node(node, None, NodeHealth.HEALTHY.value, "register", at,
                      before={}, after={"health": node.health, **shape}, operator=operator)
            return node
        old_shape = {
            "pod": node.pod.name, "gpus": node.gpu_count,
            "gpu_type": node.gpu_type, "rail": node.rail,
        }
        old_health = node.health
        new_health = NodeHealth.HEALTHY.value if old_health == NodeHealth.DOWN else old_health
        if old_health == NodeHealth.DOWN and operator is None and _downed_by_operator(node):
            new_health = old_health
        if old_shape != shape:
            if Allocation.objects.filter(node=node, end__isnull=True).exists():
                changed = next(key for key in shape if shape[key] != old_shape[key])
                raise Conflict(
                    f"node {name} holds GPUs of running jobs: its shape cannot change "
                    f"({old_shape} -> {shape}); drain it and wait for them to finish",
                    field=changed, code="node_busy",
                )
            node.pod, node.rail, node.gpu_type = pod_row, rail, gpu_type
            node.gpu_count = node.free_gpus = gpus
            action = "register"
        elif new_health != old_health:
            action = "up"
        else:
            action = ""
        node.health = new_health
        if operator is None:
            node.last_heartbeat = at
        if action:
            _log_node(node, old_health, new_health, action, at,
                      before={"health": old_health, **old_shape},
                      after={"health": new_health, **shape}, operator=operator)
        node.save()
        return node


def _downed_by_operator(node: Node) -> bool:
    """Did an operator mark the (down) node down, rather than the heartbeat timeout?"""
    row = (Transition.objects.filter(kind=Transition.Kind.NODE, node=node,
                                     to_state=NodeHealth.DOWN.value)
           .order_by("-id").only("actor").first())
    return row is not None and row.actor == Actor.OPERATOR


def agent_heartbeat(*, node: Node, at: datetime | None = None) -> Node:
    """Record that the node's agent is alive. Not logged (it changes no state); a node that
    was marked down does not come back by heartbeating: its agent registers again."""
    at = at or now_s()
    with transaction.atomic(durable=True):
        updated = Node.objects.filter(pk=node.pk).update(last_heartbeat=at)
    if not updated:
        raise NotFound(f"node {node.pk} does not exist", field="node")
    node.last_heartbeat = at
    return node


def agent_confirm_start(*, node: Node, job: Job, at: datetime | None = None,
                        run: datetime | None = None) -> Transition:
    """The job's processes are up on this node: PLACING -> RUNNING (Started).

    Another node of the gang (or this one, retrying) confirming a job that is RUNNING
    already, or being preempted, gets the Started row of the run back: nothing written.
    ``run``: the placement the report is about (every report takes it: see
    :func:`_check_run`)."""
    return _agent_move(node, job, {S.PLACING: (S.RUNNING, Reason.STARTED)}, "confirm the start",
                       at=at, already=(frozenset({S.RUNNING, *STOPPING}), Reason.STARTED),
                       run=run)


def agent_report_checkpoint(
    *,
    node: Node,
    job: Job,
    resume_pointer: str,
    checkpoint_at: datetime | None = None,
    run: datetime | None = None,
) -> Transition:
    """A checkpoint was written at ``checkpoint_at`` (default now): the self-transition
    Checkpointed records its time and the resume pointer a restart will use.

    ``checkpoint_at`` may not be ahead of the server's clock by more than
    :data:`CLOCK_SKEW` (within it, it is taken as now), nor before the run that reports
    it started (a checkpoint belongs to the run that wrote it), nor before the run's
    latest checkpoint (code ``before_last``): ``Invalid`` (field ``checkpoint_at``),
    nothing written. A report with the run's latest resume pointer is that checkpoint
    again (its row is returned, whatever its time). The
    simulator's virtual times (seconds after the Unix epoch) are always in the past."""
    if not isinstance(resume_pointer, str) or not resume_pointer or len(resume_pointer) > 512:
        raise Invalid("A resume pointer of 1 to 512 characters is needed.",
                      field="resume_pointer")
    if unprintable(resume_pointer):
        # it is handed to the next run as SCHED_RESUME_POINTER and printed by gpuq and the
        # dashboard: "a\nb" was stored (an agent author's session, 2026-12-07)
        raise Invalid(f"A resume pointer is {UNPRINTABLE_WORDS}.", field="resume_pointer",
                      code="unprintable")
    now = now_s()
    if checkpoint_at is not None and checkpoint_at > now + CLOCK_SKEW:
        raise Invalid(
            f"In the future: at most {CLOCK_SKEW.seconds} s ahead of the server's clock "
            "(or leave it out: now).", field="checkpoint_at", code="in_future")
    if checkpoint_at is not None and checkpoint_at > now:
        # a node's clock a little ahead: the checkpoint was written by now, and a row
        # dated later would sit after the job's exit in its history
        checkpoint_at = now
    moves = {s: (s, Reason.CHECKPOINTED) for s in (S.RUNNING, S.PREEMPT_REQUESTED,
                                                    S.CHECKPOINTING)}
    return _agent_move(node, job, moves, "report a checkpoint", at=checkpoint_at,
                       detail={"resume_pointer": resume_pointer}, check=_check_checkpoint_time,
                       same=lambda locked: _same_checkpoint(locked, resume_pointer), run=run)


def _same_checkpoint(job: Job, resume_pointer: str) -> Transition | None:
    """The row of this run's latest checkpoint if it has ``resume_pointer``: each node of
    a gang reports the checkpoint the gang wrote (and an agent retries), and one
    checkpoint is one row in the log."""
    if job.resume_pointer != resume_pointer or _run_checkpoint_at(job) is None:
        return None
    return (Transition.objects.filter(job=job, reason=Reason.CHECKPOINTED.value)
            .order_by("-id").first())


def agent_ack_preempt(*, node: Node, job: Job, at: datetime | None = None,
                      run: datetime | None = None) -> Transition:
    """The job heard the preemption request and is writing its checkpoint:
    PREEMPT_REQUESTED -> CHECKPOINTING (CheckpointStarted).

    Another node of the gang acknowledging a job that is CHECKPOINTING already gets the
    CheckpointStarted row back: nothing written."""
    moves = {S.PREEMPT_REQUESTED: (S.CHECKPOINTING, Reason.CHECKPOINT_STARTED)}
    return _agent_move(node, job, moves, "acknowledge a preemption", at=at,
                       already=(frozenset({S.CHECKPOINTING}), Reason.CHECKPOINT_STARTED),
                       run=run)


def agent_report_exit(
    *,
    node: Node,
    job: Job,
    outcome: str,
    exit_code: int | None = None,
    at: datetime | None = None,
    run: datetime | None = None,
) -> Transition:
    """The job's processes exited. ``outcome``: ``completed`` (-> COMPLETED), ``failed``
    (-> FAILED ExitFailed), ``preempted`` (it stopped because it was asked to: after its
    checkpoint -> PREEMPTED Preempted, or at once from PREEMPT_REQUESTED -> NoCheckpoint;
    the leader requeues it).

    The first exit report of a gang ends the run on all its nodes (their GPUs go back at
    once). A report from another node of that run (or a retry) gets the row that ended it
    back, whatever its outcome: nothing written. A run the scheduler ended (a timeout, a
    node failure, a kill at the grace deadline) is a Conflict, as before."""
    if outcome not in EXITS:
        raise Invalid(f"outcome must be one of {', '.join(EXITS)}", field="outcome")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise Invalid("exit_code must be an integer", field="exit_code")
    if outcome == "completed" and exit_code not in (None, 0):
        # a job that exited non-zero did not complete: its afterok dependents would run on
        # its word (accepted, and the job COMPLETED with exit code 3, until 2026-12-07)
        raise Invalid(f"A completed job exits 0, not {exit_code}: report outcome failed "
                      "for a non-zero exit.", field="exit_code", code="exit_code_outcome")
    detail = {} if exit_code is None else {"exit_code": exit_code}
    return _agent_move(node, job, EXITS[outcome], f"report a {outcome} exit", at=at,
                       detail=detail, ended=True, run=run)


def _agent_move(
    node: Node,
    job: Job,
    moves: dict[JobState, tuple[JobState, Reason]],
    doing: str,
    *,
    at: datetime | None,
    detail: dict | None = None,
    already: tuple[frozenset[JobState], Reason] | None = None,
    ended: bool = False,
    check: Callable[[Job, datetime], None] | None = None,
    same: Callable[[Job], Transition | None] | None = None,
    run: datetime | None = None,
) -> Transition:
    """Apply the move ``moves`` allows from the job's state, as ``node``'s agent.

    ``already``: (states, reason): a job in one of these states holding GPUs on the node
    was moved by this report before (another node of the gang): return its latest row
    with that reason. ``ended``: an exit report, which the run's earlier exit report
    answers (see :func:`_gang_exit_row`). ``check(job, at)`` validates the report against
    the locked job. ``same(job)``: the row that already records this report (a repeat
    by another node of the gang, or a retry), returned as is."""
    at = at or now_s()
    # the log's append lock before the job's row lock, in the order the leader takes them
    # (the other order deadlocks with a tick moving the same job)
    with transaction.atomic(durable=True), append_lock():
        locked = Job.objects.select_for_update().filter(pk=job.pk).first()
        if locked is None:
            raise NotFound(f"job {job.pk} does not exist", field="job")
        holds_here = Allocation.objects.filter(job=locked, node=node, end__isnull=True).exists()
        if run is not None:
            _check_run(node, locked, run)  # before any replay: not the new run's row
        state = S(locked.state)
        if holds_here and already is not None and state in already[0]:
            done = _latest_row(locked, already[1])
            if done is not None:
                job.state = locked.state
                return _replayed(done)
        if holds_here and same is not None and state in moves:
            done = same(locked)
            if done is not None:
                job.state = locked.state
                return _replayed(done)
        if not holds_here and ended:
            done = _gang_exit_row(node, locked)
            if done is not None:
                job.state = locked.state
                return _replayed(done)
        _check_own(node, locked, holds_here=holds_here)
        if state not in moves:
            raise Conflict(
                f"job {locked.pk} is {state}: node {node.name} cannot {doing} "
                f"(only from {', '.join(sorted(moves))})",
                field="job", code=f"job_{state.lower()}",
            )
        if check is not None:
            check(locked, at)
        to_state, reason = moves[state]
        row = apply_locked(
            locked, to_state=to_state, reason=reason, actor=Actor.AGENT, at=at,
            detail=detail, actor_name=node.name,
        )
    job.state = locked.state
    return row


def _check_run(node: Node, job: Job, run: datetime) -> None:
    """A report names the placement it is about (``run``: the ``start`` item's key, the
    instant the run was placed). A report of an earlier run that arrives once the job is
    placed here again (an agent's queued exit, delivered after the node was marked down
    and the job put back on it) would otherwise move the new run: it failed a run before
    it started (an agent author's session, 2026-12-07). Conflict ``stale_run``, nothing
    written. A job never placed here is the caller's to refuse (``_check_own``)."""
    here = Allocation.objects.filter(job=job, node=node).order_by("-id").first()
    if here is None or here.start == run:
        return
    raise Conflict(
        f"job {job.pk}: this report is about its run placed at {run.isoformat()}; its "
        f"latest run on node {node.name} was placed at {here.start.isoformat()}: drop the "
        "report, and stop the earlier run's processes if they still run",
        field="run", code="stale_run")


def is_replayed(row: Transition) -> bool:
    """Is ``row`` the answer to a repeated report (an existing row, nothing written)?"""
    return bool(getattr(row, "replayed", False))


def _replayed(row: Transition) -> Transition:
    row.replayed = True  # type: ignore[attr-defined]  # read by is_replayed
    return row


def _latest_row(job: Job, reason: Reason) -> Transition | None:
    """The job's latest move (not a self-transition) with ``reason``."""
    return (
        Transition.objects.filter(job=job, reason=reason.value)
        .exclude(from_state=F("to_state"))
        .order_by("-id")
        .first()
    )


def _gang_exit_row(node: Node, job: Job) -> Transition | None:
    """The row of an agent's exit report that ended the job's latest run on ``node``, or
    None. The run's allocations all end at that row's instant (``_move_allocations``),
    and no later run of the job may have started on the node."""
    last_here = Allocation.objects.filter(job=job, node=node).order_by("-id").first()
    if last_here is None or last_here.end is None:
        return None
    holding = [s.value for s in HOLDING_STATES]
    left = (
        Transition.objects.filter(job=job, from_state__in=holding)
        .exclude(to_state__in=holding)
        .order_by("-id")
        .first()
    )
    if (
        left is None
        or left.at != last_here.end
        or left.actor != Actor.AGENT
        or left.reason not in EXIT_REASONS
        or Transition.objects.filter(job=job, pk__gt=left.pk, to_state=S.PLACING).exists()
    ):
        return None
    return left


def _check_checkpoint_time(job: Job, at: datetime) -> None:
    """A checkpoint belongs to the run that wrote it: not before that run started, nor
    before the run's latest checkpoint (the job's last checkpoint and its resume pointer
    would go back in time, and the log would date a row before an earlier one)."""
    if job.started_at is not None and at < job.started_at:
        raise Invalid(
            f"Before this run started ({job.started_at.isoformat()}): a checkpoint belongs "
            "to the run that wrote it.", field="checkpoint_at", code="before_start")
    last = _run_checkpoint_at(job)
    if last is not None and at < last:
        raise Invalid(
            f"Before this run's latest checkpoint ({last.isoformat()}): checkpoints are "
            "reported in the order they were written.", field="checkpoint_at",
            code="before_last")


def _run_checkpoint_at(job: Job) -> datetime | None:
    """When the current run last checkpointed; None if it has not (a checkpoint of an
    earlier run is not this run's)."""
    last = job.last_checkpoint_at
    if last is None or (job.started_at is not None and last < job.started_at):
        return None
    return last


def _check_own(node: Node, job: Job, *, holds_here: bool) -> None:
    """Forbidden unless the job holds GPUs on ``node`` now. A job that held GPUs there
    and has since left the holding states is the node's business still, but too late:
    Conflict, so the agent learns to stop it rather than that it is not its own."""
    if holds_here:
        return
    was_here = Allocation.objects.filter(job=job, node=node).exists()
    if was_here and S(job.state) not in HOLDING_STATES:
        raise Conflict(
            f"job {job.pk} is {job.state}: it no longer runs on node {node.name}",
            field="job", code=f"job_{job.state.lower()}",
        )
    raise Forbidden(f"job {job.pk} holds no GPUs on node {node.name}", field="job",
                    code="not_on_node")


def _check_registration(*, name: str, pod: str, gpus: int, gpu_type: str, rail: int) -> None:
    errors: dict[str, str] = {}
    if not isinstance(name, str) or not name or len(name) > 128:
        errors["name"] = "A node name of 1 to 128 characters is needed."
    if not isinstance(pod, str) or not pod or len(pod) > 64:
        errors["pod"] = "A pod name of 1 to 64 characters is needed."
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_NODE_GPUS:
        errors["gpus"] = f"A node has 1 to {MAX_NODE_GPUS} GPUs."
    if not isinstance(gpu_type, str) or len(gpu_type) > 32:
        errors["gpu_type"] = "At most 32 characters."
    if isinstance(rail, bool) or not isinstance(rail, int) or not 0 <= rail <= 32767:
        errors["rail"] = "A rail is a number from 0 to 32767."
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors)


def _check_new_node_name(name: str) -> None:
    """Refuse a new node whose name is outside :data:`NODE_NAME` (a node registered
    before the rule keeps its name: its agent still registers)."""
    if not NODE_NAME.fullmatch(name):
        raise Invalid(f"{NODE_NAME_WORDS}: {name!r} is not.", field="name",
                      code="bad_node_name")


def _check_gpu_type_case(gpu_type: str) -> None:
    """A GPU type that differs from one of the cluster's only in case (an operator's
    "h100" beside "H100") is a typo: types match exactly, so jobs asking for H100 would
    never use the node (found by running it as production does, 2026-12-07)."""
    if not gpu_type:
        return
    known = (Node.objects.filter(gpu_type__iexact=gpu_type).exclude(gpu_type=gpu_type)
             .values_list("gpu_type", flat=True).first())
    if known is not None:
        raise Invalid(f"{gpu_type!r} differs from the cluster's GPU type {known!r} only in "
                      f"case: GPU types match exactly; write {known!r}.", field="gpu_type",
                      code="gpu_type_case")


def _log_node(
    node: Node, from_state: str | None, to_state: str, action: str, at: datetime,
    *, before: dict, after: dict, operator: str | None = None,
) -> Transition:
    return append_cluster_row(
        node=node, from_state=from_state, to_state=to_state, reason=Reason.NODE_HEALTH,
        actor=Actor.AGENT if operator is None else Actor.OPERATOR, at=at,
        actor_name=node.name if operator is None else operator,
        detail={"action": action, "before": before, "after": after},
    )


__all__ = [
    "CLOCK_SKEW",
    "EXITS",
    "MAX_NODE_GPUS",
    "agent_ack_preempt",
    "agent_confirm_start",
    "agent_heartbeat",
    "agent_register",
    "agent_report_checkpoint",
    "agent_report_exit",
    "is_replayed",
]
