"""Why a queued job waits, in one place: the dominant reason, its evidence, a next step.

The scheduler writes one pending reason per job at each tick (``Job.pending_reason``,
squeue's REASON) and, when it can plan one, a start estimate with its basis. A person
asks more: *which* numbers keep it waiting, and what would start it sooner. This reads
the cluster as it is now (the nodes, the team's quota, the queue ahead, the jobs being
preempted for it) and says so, for example::

    reason     Resources
    headline   It needs 64 GPUs (8 per node); 40 are free on healthy nodes.
    evidence   free now: pod-a 16, pod-b 24, pod-c 0
               planned start at the latest 14:20 UTC: reserved 8 nodes (64 GPUs) in
               pod-b from 14:20 UTC, when job 117 reaches its declared limit
    next step  Asking for 40 GPUs (8 per node) would fit now.

The job page, the API's job detail (``why_pending``) and ``gpuq why`` show the same
answer. Job ids are written "job 117" (the dashboard links them, the redaction rewrites
the ones the viewer may not see, as it does for every core sentence); instants are
clock times in UTC. A fixed number of queries (at most seven), whatever the cluster.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler_app.core.states import (
    FINAL_STATES,
    HOLDING_STATES,
    PENDING_SENTENCES,
    JobState,
    PendingReason,
    Reason,
)
from scheduler_app.core.types import join_words, may_borrow
from scheduler_app.models import Allocation, Job, Node, Reservation, Tenant, Transition
from scheduler_app.scheduler_config import scheduler_config

from .jobs import in_line, queue_order
from .redaction import OtherJobs

P = PendingReason
_EPOCH = re.compile(r"\bt=(\d{9,11})\b")
_UPPER_BOUND = {"reserved": "at the latest", "reclaim": "at the latest"}


@dataclass(frozen=True, slots=True)
class WhyPending:
    reason: str  # the scheduler's pending reason (Resources, QuotaLimit, ...)
    headline: str  # the one thing that keeps it waiting, in numbers
    evidence: list[str] = field(default_factory=list)
    next_step: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clock(at: datetime, now: datetime) -> str:
    """``13:06 UTC``, with the day when it is not ``now``'s ("planned start expected 13:06
    UTC" read as past at 13:12, for 13:06 the next day: a researcher's session,
    2026-12-07)."""
    at = at.astimezone(UTC)
    when = f"{at:%H:%M} UTC"
    days = (at.date() - now.astimezone(UTC).date()).days
    if days == 0:
        return when
    return f"{when} tomorrow" if days == 1 else f"{when} on {at:%Y-%m-%d}"


def _plain(text: str, now: datetime | None = None) -> str:
    """A core sentence with its instants (``t=<epoch>``) as clock times (``now``: the
    reader's instant, which says whether a day is named; default the clock's)."""
    now = now or datetime.now(tz=UTC)
    return _EPOCH.sub(
        lambda m: _clock(datetime.fromtimestamp(int(m.group(1)), tz=UTC), now), text or "")


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _jobs(n: int) -> str:
    return "job" if n == 1 else f"{n} jobs"


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _are_free(n: int, kind: str = "") -> str:
    """"1 GPU is free", "no H100 GPU is free", "3 GPUs are free"."""
    gpu = f"{kind} GPU" if kind else "GPU"
    if n == 0:
        return f"no {gpu} is free"
    return f"1 {gpu} is free" if n == 1 else f"{n} {gpu}s are free"


@dataclass(slots=True)
class _Cluster:
    """The nodes a job could use now: healthy ones of its GPU type (one query)."""

    free: int = 0  # free GPUs on healthy nodes of the type
    per_pod: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    node_free: list[int] = field(default_factory=list)
    unhealthy: list[tuple[str, str, int]] = field(default_factory=list)  # name, health, idle
    nodes: int = 0

    def largest(self, per_node: int | None) -> int:
        """The biggest gang of this shape that fits on the free GPUs now."""
        if per_node:
            return per_node * sum(1 for f in self.node_free if f >= per_node)
        return self.free


def _cluster(gpu_type: str) -> _Cluster:
    c = _Cluster()
    for name, pod, health, free, kind in Node.objects.order_by("name").values_list(
            "name", "pod__name", "health", "free_gpus", "gpu_type"):
        if gpu_type and kind != gpu_type:
            continue
        c.nodes += 1
        if health != "healthy":
            c.unhealthy.append((name, health, free))
            continue
        c.free += free
        c.per_pod[pod] += free
        c.node_free.append(free)
    return c


def _shape(job: Job) -> str:
    parts = []
    if job.gpus_per_node:
        parts.append(f"{job.gpus_per_node} per node")
    if job.gpu_type:
        parts.append(job.gpu_type)
    return f" ({', '.join(parts)})" if parts else ""


def _smaller(job: Job, fits: int, now: datetime) -> str:
    """"Asking for 32 GPUs would fit now", when a smaller gang of its shape fits within
    ``fits`` (what its team's quota, or its owner's cap, leaves) and on the GPUs free now
    that no other job's reservation or claim holds (:func:`_spare_largest`): whole nodes'
    worth for a shaped gang (it said "3 GPUs" to a job of 8 per node, which the submit
    then refused: 2026-12-07). It fits; whether it starts first is the queue's say (a job
    of its team ahead of it may take those GPUs), so no more is promised."""
    fits = _whole_nodes(job, fits)
    if fits <= 0 or fits >= job.gpus:
        return ""  # (asked first: the free GPUs cost two queries)
    fits = _whole_nodes(job, min(fits, _spare_largest(job, now)))
    if fits <= 0:
        return ""
    if job.min_gpus and job.min_gpus <= fits:
        return ""  # elastic: the scheduler shrinks it on its own at the next tick
    return f"Asking for {_gpus(fits)}{_shape(job)} would fit now."


def _spare_largest(job: Job, now: datetime) -> int:
    """The biggest gang of the job's shape that fits now on healthy nodes of its type
    without the GPUs another job's reservation or reclaim claim holds there, unless it
    would end (by its own time limit) by that reservation's start, as the backfill rule
    lets it. "Asking for 8 GPUs would fit now" was said to six jobs while the only node
    with 8 free was reserved, and four jobs of that shape waited for it with reason
    Reservation (a check of the estimates on the demo, 2026-12-07). A reservation's GPUs
    busy now are taken from the free ones too: this may offer less than would fit, never
    more."""
    nodes = Node.objects.filter(health="healthy")
    if job.gpu_type:
        nodes = nodes.filter(gpu_type=job.gpu_type)
    free = dict(nodes.values_list("name", "free_gpus"))
    ends = None if not job.max_runtime_s else now + timedelta(seconds=job.max_runtime_s)
    for kind, start_at, names, plan in (Reservation.objects.exclude(job_id=job.pk)
                                        .values_list("kind", "start_at", "nodes", "plan")):
        if kind == Reservation.Kind.RECLAIM:
            held = {n: free.get(n, 0) for n in names}  # the claimed nodes are the head's
        elif ends is not None and start_at is not None and ends <= start_at:
            continue  # it would end before the reserved start: it may use them
        else:
            held = {n: len(ix) for n, ix in ((plan or {}).get("alloc") or {}).items()}
        for n, count in held.items():
            if n in free:
                free[n] = max(0, free[n] - count)
    per = job.gpus_per_node
    if per:
        return per * sum(1 for f in free.values() if f >= per)
    return sum(free.values())


def _whole_nodes(job: Job, gpus: int) -> int:
    """The most of ``gpus`` a gang of the job's shape can ask for: whole nodes' worth of
    its ``gpus_per_node`` (a job of 8 per node cannot ask for 3)."""
    return gpus - gpus % (job.gpus_per_node or 1)


def why_pending(*, job: Job, others: OtherJobs | None = None,
                now: datetime | None = None) -> WhyPending | None:
    """Why ``job`` waits (None when it is not QUEUED). ``others`` rewrites the jobs the
    viewer may not see ("a job of team X"); it must have learnt the job's estimate basis."""
    if job.state != JobState.QUEUED:
        return None
    others = others or OtherJobs(None)
    now = now or datetime.now(tz=UTC)
    try:
        reason = PendingReason(job.pending_reason)
    except ValueError:
        reason = P.NONE
    tenant: Tenant = job.tenant
    evidence: list[str] = []
    if job.estimate_start_at is not None:
        lead = _UPPER_BOUND.get(job.estimate_kind or "", "expected")
        basis = _plain(others.text(job.estimate_basis or ""), now)
        evidence.append(f"planned start {lead} {_clock(job.estimate_start_at, now)}"
                        + (f": {basis}" if basis else ""))
    need = job.gpus
    if reason == P.USER_LIMIT and tenant.max_gpus_per_user is None:
        reason = P.PRIORITY  # the cap was lifted since: the next tick says more
    if reason == P.NONE:
        return _not_looked_at(job, evidence, now)

    if reason in (P.RESOURCES, P.TOPOLOGY, P.GPU_TYPE, P.NODE_DOWN, P.INTERACTIVE_TIER_FULL):
        c = _cluster(job.gpu_type)
        fits = min(c.largest(job.gpus_per_node), max(0, _quota_room(tenant)))
        pods = ", ".join(f"{pod} {free}" for pod, free in sorted(c.per_pod.items()))
        if pods:
            evidence.insert(0, f"free now on healthy nodes: {pods}")
        if reason == P.TOPOLOGY:
            per = job.gpus_per_node or 0
            whole = sum(1 for f in c.node_free if per and f >= per)
            headline = (f"It needs {_gpus(need)}{_shape(job)}: {_are_free(c.free)}, but "
                        + (f"only {_nodes(whole)} {'has' if whole == 1 else 'have'} "
                           f"{per} free." if whole else f"no node has {per} free.")
                        if per else
                        f"It needs {_gpus(need)}{_shape(job)}: enough GPUs are free, not in "
                        "the shape it asked for.")
        elif reason == P.NODE_DOWN:
            idle = sum(free for _n, _h, free in c.unhealthy)
            # the nodes the idle GPUs are on: "32 GPUs sit idle on 6 of 48 nodes" counted
            # two draining nodes with none free (an operator's session, 2026-12-07)
            idle_on = sum(1 for _n, _h, free in c.unhealthy if free)
            names = ", ".join(f"{n} ({h})" for n, h, _f in c.unhealthy[:4])
            more = f" and {len(c.unhealthy) - 4} more" if len(c.unhealthy) > 4 else ""
            headline = (f"It needs {_gpus(need)}{_shape(job)}; {_are_free(c.free)} on "
                        f"healthy nodes, and {_gpus(idle)} "
                        f"{'sits' if idle == 1 else 'sit'} idle on "
                        f"{idle_on} of {c.nodes} nodes that are down or draining.")
            if names:
                evidence.append(f"not taking jobs: {names}{more}")
        elif reason == P.INTERACTIVE_TIER_FULL:
            headline = "The interactive slice is fully used by other notebooks."
        else:
            kind = job.gpu_type if reason == P.GPU_TYPE and job.gpu_type else ""
            headline = (f"It needs {_gpus(need)}{_shape(job)}; {_are_free(c.free, kind)} on "
                        "healthy nodes.")
        step = _smaller(job, fits, now)
        if not step and reason == P.INTERACTIVE_TIER_FULL:
            step = "Submitted as a batch job (not interactive), it could use the whole cluster."
        if not step and job.gpu_type and reason == P.GPU_TYPE:
            step = f"Without the {job.gpu_type} requirement it could use any free GPU."
        if not step:
            step = ("It starts when running jobs free the GPUs; the planned start above says "
                    "when." if job.estimate_start_at else
                    "It starts when running jobs free the GPUs. A time limit on it lets the "
                    "scheduler plan its start and fit it into gaps." if not job.max_runtime_s
                    else "It starts when running jobs free the GPUs; no start can be planned "
                    "yet because the jobs ahead of it have no time limit.")
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.QUOTA_LIMIT:
        barred = _may_not_borrow(job) if tenant.borrow_limit_gpus else ""
        if barred:
            return _within_guarantee(job, tenant, need, evidence, barred, now)
        limit = tenant.guaranteed_gpus + tenant.borrow_limit_gpus
        if (job.min_gpus or need) > limit:
            return _over_the_limit(job, evidence, (
                f"It needs {_gpus(job.min_gpus or need)}, more than team {tenant.name} may "
                f"hold at once now ({limit}: {tenant.guaranteed_gpus} guaranteed + "
                f"{tenant.borrow_limit_gpus} borrow limit): it cannot start while the "
                "team's limits stay as they are."), limit, "the team's guarantee or borrow "
                "limit")
        room = _quota_room(tenant)
        # the team's jobs ahead of it in the team's queue take the quota first: the 3rd of
        # four was told "free 1 GPU" while the two ahead needed 24 (an operator's session,
        # 2026-12-07)
        first, first_gpus = _team_ahead(job)
        take = "takes" if first == 1 else "take"
        headline = (f"Team {tenant.name} holds {_gpus(tenant.held_gpus)} of its {limit} "
                    f"({tenant.guaranteed_gpus} guaranteed + {tenant.borrow_limit_gpus} "
                    f"borrow limit); this job's {need} would take it to "
                    f"{tenant.held_gpus + need}.")
        if first and tenant.held_gpus + need <= limit:
            # "would take it to 88" of 92 read as room: the jobs ahead are what it waits for
            headline = (f"Team {tenant.name} holds {_gpus(tenant.held_gpus)} of its {limit} "
                        f"({tenant.guaranteed_gpus} guaranteed + {tenant.borrow_limit_gpus} "
                        f"borrow limit), and the {_jobs(first)} of the team ahead of it in "
                        f"its queue {take} {_gpus(first_gpus)} of the rest first; this "
                        f"job's {need} would take it to "
                        f"{tenant.held_gpus + first_gpus + need}.")
        _say_first_end(tenant, evidence, now)
        # it must fit the free GPUs as well as the quota: "would fit now" was said of a
        # size no node set could hold (2026-12-07)
        short = tenant.held_gpus + first_gpus + need - limit
        # (a smaller size would wait for them too: no offer then)
        step = (None if first else _smaller(job, room, now)) or (
            f"It starts when the team's running jobs free {_gpus(short)}"
            + (f": the {_jobs(first)} of the team ahead of it in its queue {take} "
               f"{_gpus(first_gpus)} of the team's quota first" if first else "")
            + "; an operator can also raise the team's borrow limit.")
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.USER_LIMIT:
        cap = tenant.max_gpus_per_user or 0
        owner = job.owner.get_username() if job.owner is not None else "its owner"
        if (job.min_gpus or need) > cap:
            return _over_the_limit(job, evidence, (
                f"It needs {_gpus(job.min_gpus or need)}, more than the {cap} one person of "
                f"team {tenant.name} may hold at once now: it cannot start while that cap "
                "stays as it is."), cap, "the team's GPUs per user")
        held = _owner_held(job)
        headline = (f"{owner} holds {_gpus(held)} of the {cap} one person of team "
                    f"{tenant.name} may hold at once; this job's {need} would take it to "
                    f"{held + need}.")
        step = _smaller(job, cap - held, now) or (
            f"It starts when {owner}'s running jobs free {_gpus(held + need - cap)}; the "
            "other members' jobs are not held up by it.")
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.PRIORITY:
        ahead, ahead_gpus, in_team = _ahead(job)
        headline = (f"{ahead} {'job ranks' if ahead == 1 else 'jobs rank'} ahead of it in the "
                    f"cluster's order ({_gpus(ahead_gpus)} between them).")
        if tenant.share_rank:
            evidence.append(f"team {tenant.name} is {tenant.share_rank} in the fair-share "
                            "order (1 is served first)")
        step = (f"{in_team} of them {'is' if in_team == 1 else 'are'} your team's: a higher "
                "priority puts it before them." if in_team else
                "Its team's turn comes as the teams ahead use their share; nothing to change "
                "on the job.")
        limit = tenant.guaranteed_gpus + tenant.borrow_limit_gpus
        short = (job.min_gpus or need) - _quota_room(tenant)
        if short > 0:
            # the team's quota holds it too: a higher priority would not start it sooner
            # (a user session was told it would, its team at 96 of its 96: 2026-12-07)
            step = (f"Team {tenant.name} also holds {_gpus(tenant.held_gpus)} of the {limit} it "
                    f"may hold ({tenant.guaranteed_gpus} guaranteed + "
                    f"{tenant.borrow_limit_gpus} borrow limit): it starts when the team's "
                    f"running jobs free {_gpus(short)}, whatever its priority.")
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.RESERVATION:
        # the job whose reservation the leader found in its way; failing that (a row
        # published before the leader named it), the cluster's earliest reservation
        queued = Job.objects.filter(state=JobState.QUEUED).exclude(pk=job.pk)
        held = (queued.filter(pk=job.pending_blocker).first()
                if job.pending_blocker is not None else None)
        if held is None:
            held = (queued.filter(estimate_kind__in=("reserved", "borrowed"))
                    .order_by("estimate_start_at").first())
        if held is not None and held.estimate_start_at is not None:
            name = others.learn(texts=[f"job {held.pk}"]).text(f"job {held.pk}")
            # (not "which ranks higher": a reservation is kept once made, as a promise,
            # and a job ranked higher since waits for it too: 2026-12-07)
            bound = held.estimate_kind in _UPPER_BOUND
            # a borrower's plan is not a bound: its team may be preempted first
            headline = (f"GPUs are reserved for {name}, which starts at the latest "
                        f"{_clock(held.estimate_start_at, now)} (a reservation is kept once "
                        "made); this job would delay it." if bound else
                        f"GPUs are reserved for {name}, planned to start "
                        f"{_clock(held.estimate_start_at, now)} on borrowed quota (a plan, not a "
                        "bound; the reservation is kept once made); this job would delay it.")
            free_for = int((held.estimate_start_at - now).total_seconds())
            step = (f"With a time limit under {max(1, free_for // 60)} min it could run in "
                    "the gap before that start (backfill)." if free_for > 60 else
                    "It starts after that job has started.")
        else:
            headline = PENDING_SENTENCES[reason]
            step = "A shorter time limit lets it run in the gap before that start (backfill)."
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.QUOTA_RESERVED:
        return WhyPending(reason.value, PENDING_SENTENCES[reason], evidence,
                          "A time limit short enough to end before that job's planned start "
                          "lets it run now.")

    if reason == P.PREEMPTING:
        stopping = _victims(job, now)
        if stopping:
            gpus = sum(g for g, _ in stopping)
            grace = max(s for _, s in stopping)
            are = "job is" if len(stopping) == 1 else "jobs are"
            # (of a 64-GPU job whose victims free 32, "to give it 32 GPUs" read as its size)
            rest = (f" of the {need} it needs (the rest is free already)" if gpus < need
                    else "")
            headline = (f"{len(stopping)} borrowing {are} being stopped to give it "
                        f"{_gpus(gpus)}{rest}.")
            step = (f"Nothing to do: they write their checkpoints and exit within "
                    f"{max(1, grace // 60)} min, then it starts.")
        else:
            headline = PENDING_SENTENCES[reason]
            step = "Nothing to do: it starts when the borrowed GPUs are back."
        return WhyPending(reason.value, headline, evidence, step)

    if reason == P.DEPENDENCY:
        return _why_dependency(job, others, evidence)

    if reason == P.ARRAY_LIMIT:
        cap = job.array_max_running or 0
        tasks = Job.objects.filter(array_id=job.array_id)
        running = tasks.filter(state__in=[s.value for s in HOLDING_STATES]).count()
        # a task let past the cap holds its slot while it waits in the queue: "runs 0 of
        # its 5 tasks, the most it allows" read as a contradiction (2026-12-07)
        waiting = in_line(tasks).count()
        active = min(cap, running + waiting) if cap else running + waiting
        if active == running:
            headline = (f"Array {job.array_id} runs {running} of its {job.array_count} "
                        f"tasks, the most it allows at once (max_running {cap}).")
        else:
            headline = (f"Array {job.array_id} has {active} of its {job.array_count} tasks "
                        f"running or in the queue ahead of this one ({running} running), "
                        f"the most it allows at once (max_running {cap}).")
        return WhyPending(reason.value, headline, evidence,
                          "Nothing to do: it starts when one of the array's running tasks "
                          "ends (cancelling one makes room too).")

    return WhyPending(reason.value, PENDING_SENTENCES.get(reason, reason.value), evidence, "")


def _not_looked_at(job: Job, evidence: list[str], now: datetime) -> WhyPending:
    """No reason yet. Right after the submit, the next tick gives one; but each tick
    looks only at the front of each team's queue (a bounded tick), so a job behind
    many others of its team may go without one until they start. With no scheduler
    running (its lease expired), no tick comes at all: said so, not "at the next tick"
    (found by running it as production does, 2026-12-07)."""
    from .leader import scheduler_status

    status = scheduler_status(now=now)
    if not status.running:
        since = status.expires_in_s
        ago = (f" (its lease expired {_ago(-since)} ago)" if since is not None and since < 0
               else "")
        return WhyPending(P.NONE.value, "No scheduler is running" + ago + ": nothing is "
                          "placed or explained until one is back.", evidence,
                          "Nothing to do on the job: it keeps its place. An operator starts "
                          "the scheduler (docs/operations.md).")
    ahead, ahead_gpus, in_team = _ahead(job)
    if not in_team:
        return WhyPending(P.NONE.value, "The scheduler has not looked at it yet.", evidence,
                          "Nothing to do: it is placed or explained at the next tick "
                          "(every few seconds).")
    mine = ("job of its team is" if in_team == 1 else "jobs of its team are")
    headline = (f"The scheduler has not looked at it yet: {in_team} {mine} ahead of it "
                f"({ahead} in the cluster's order, {_gpus(ahead_gpus)} between them).")
    return WhyPending(P.NONE.value, headline, evidence,
                      "Nothing to do: each tick looks at the front of each team's queue, and "
                      "it is explained and given a start estimate as the jobs ahead of it "
                      "start. A higher priority puts it before its team's other jobs.")


def _ago(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h"


def _over_the_limit(job: Job, evidence: list[str], headline: str, limit: int,
                    what: str) -> WhyPending:
    """A job bigger than a limit lowered after it was submitted: it stays queued (the
    limit may come back, as Slurm and Kueue keep such jobs pending), and says so."""
    most = _whole_nodes(job, limit) if not job.min_gpus else 0
    smaller = f" with at most {_gpus(most)}" if most > 0 else ""
    return WhyPending(job.pending_reason, headline, evidence,
                      f"Cancel it and submit it again{smaller}, or ask an operator to raise "
                      f"{what}.")


#: what each dependency kind waits for, in words ("waits for job 12 to complete")
_AWAITS = {"ok": "to complete", "any": "to end", "notok": "to fail or be cancelled"}


def _why_dependency(job: Job, others: OtherJobs, evidence: list[str]) -> WhyPending:
    """The dependencies not met yet, in words (one query): "It waits for job 12 to
    complete." Ids the viewer may not see read "a job of team X"."""
    deps = [(int(pk), when) for pk, when in job.depends_on or ()]
    states = dict(Job.objects.filter(pk__in=[pk for pk, _w in deps])
                  .values_list("pk", "state"))
    words = others.learn(texts=[f"job {pk}" for pk, _w in deps])
    waiting, met = [], []
    for pk, when in deps:
        state = states.get(pk)
        name = words.text(f"job {pk}")
        if state in _FINAL:
            met.append(f"{name} ended {state}")
        else:
            waiting.append(f"{name} {_AWAITS.get(when, 'to end')}")
    if waiting:
        headline = "It waits for " + join_words(waiting) + "."
    else:
        headline = "The jobs it waits for have ended; the scheduler releases it at its next tick."
    if met:
        evidence.append("already met: " + ", ".join(met))
    pending = [f"{words.text(f'job {pk}')} is {states[pk]}" for pk, _w in deps
               if states.get(pk) and states[pk] not in _FINAL]
    if pending:
        evidence.append("now: " + ", ".join(pending))
    return WhyPending(P.DEPENDENCY.value, headline, evidence,
                      "Nothing to do: it holds and reserves no GPUs until then. If a job it "
                      "waits for ends so that the dependency can never be met, it is "
                      "cancelled (DependencyNeverSatisfied).")


_FINAL = frozenset(s.value for s in FINAL_STATES)


def _may_not_borrow(job: Job) -> str:
    """Why the job may use only its team's guarantee (the core's ``may_borrow``), or ""."""
    config = scheduler_config()
    if may_borrow(job.checkpointable, job.preemptible, job.max_runtime_s, config):
        return ""
    most = _ago(config.protected_borrow_max_s) if config.protected_borrow_max_s else ""
    declared = ("no time limit" if job.max_runtime_s is None
                else f"a time limit of {_ago(job.max_runtime_s)}")
    if not most:
        return ("it cannot be preempted (neither checkpointable nor preemptible), and such "
                "a job never borrows here")
    return (f"it cannot be preempted (neither checkpointable nor preemptible) and declares "
            f"{declared}: such a job borrows past its team's guarantee only with a time limit "
            f"of at most {most}, so that the team it borrows from can take its GPUs back")


def _within_guarantee(job: Job, tenant: Tenant, need: int, evidence: list[str],
                      barred: str, now: datetime) -> WhyPending:
    """QuotaLimit for a job that may not borrow: its team's guarantee is its limit."""
    limit = tenant.guaranteed_gpus
    most = scheduler_config().protected_borrow_max_s
    fix = ("Mark it checkpointable (or preemptible)"
           + (f", or give it a time limit of at most {_ago(most)}" if most else "")
           + ", and it may borrow idle GPUs")
    if (job.min_gpus or need) > limit:
        return _over_the_limit(job, evidence, (
            f"It needs {_gpus(job.min_gpus or need)}, more than team {tenant.name}'s "
            f"guarantee of {limit}, and {barred}."), limit, "the team's guarantee")
    headline = (f"Team {tenant.name} holds {_gpus(tenant.held_gpus)} of its {limit} "
                f"guaranteed; this job's {need} would take it to {tenant.held_gpus + need}, "
                f"and {barred}.")
    _say_first_end(tenant, evidence, now)
    step = _smaller(job, limit - tenant.held_gpus, now) or (
        f"{fix}; otherwise it starts when the team's running jobs free "
        f"{_gpus(tenant.held_gpus + need - limit)}.")
    return WhyPending(P.QUOTA_LIMIT.value, headline, evidence, step)


def _say_first_end(tenant: Tenant, evidence: list[str], now: datetime) -> None:
    """Evidence: when the team's first running job reaches its time limit, if one does."""
    first_end = _first_end(tenant)
    if first_end is not None:
        evidence.append(f"the team's first running job to reach its time limit does so at "
                        f"{_clock(first_end, now)}")


def _quota_room(tenant: Tenant) -> int:
    return tenant.guaranteed_gpus + tenant.borrow_limit_gpus - tenant.held_gpus


def _owner_held(job: Job) -> int:
    """GPUs the job's owner holds in its team now (one query): what its cap counts."""
    if job.owner_id is None:
        return 0
    # its open allocations, not its jobs' sizes: an elastic job may hold fewer
    return sum(len(ix) for ix in Allocation.objects.filter(
        job__tenant_id=job.tenant_id, job__owner_id=job.owner_id, end__isnull=True,
    ).values_list("gpu_indices", flat=True))


def _first_end(tenant: Tenant) -> datetime | None:
    """When the team's first running job reaches its declared limit (one query)."""
    ends = [started + timedelta(seconds=limit) for started, limit in
            Job.objects.filter(tenant=tenant, state=JobState.RUNNING, started_at__isnull=False,
                               max_runtime_s__isnull=False)
            .values_list("started_at", "max_runtime_s")]
    return min(ends) if ends else None


def _before(job: Job) -> list[tuple[int, int]]:
    """(job id, tenant id) of the jobs ahead of ``job`` in the cluster's order (none when
    it is not in line)."""
    order = queue_order()
    ids = [pk for pk, _t in order]
    return order[:ids.index(job.pk)] if job.pk in ids else []


def _ahead(job: Job) -> tuple[int, int, int]:
    """(jobs ahead in the cluster's order, their GPUs, how many are the job's team's)."""
    before = _before(job)
    gpus = dict(Job.objects.filter(pk__in=[pk for pk, _t in before]).values_list("pk", "gpus"))
    return (len(before), sum(gpus.values()),
            sum(1 for _pk, t in before if t == job.tenant_id))


def _team_ahead(job: Job) -> tuple[int, int]:
    """(the team's jobs ahead of ``job`` in line, their GPUs): those that take the team's
    quota before it."""
    mine = [pk for pk, t in _before(job) if t == job.tenant_id]
    return len(mine), sum(Job.objects.filter(pk__in=mine).values_list("gpus", flat=True))


def _victims(job: Job, now: datetime) -> list[tuple[int, int]]:
    """(GPUs, grace seconds) of the jobs being stopped to make room for ``job`` now."""
    rows = Transition.objects.filter(
        reason=Reason.PREEMPT_REQUESTED.value, at__gte=now - timedelta(hours=1),
        job__state__in=[JobState.PREEMPT_REQUESTED.value, JobState.CHECKPOINTING.value],
    ).values_list("job_id", "job__gpus", "detail")
    latest: dict[int, tuple[int, int]] = {}
    for job_id, gpus, detail in rows:
        if str((detail or {}).get("for", "")) == str(job.pk):
            latest[job_id] = (gpus, int((detail or {}).get("grace_s") or 0))
    return list(latest.values())


__all__ = ["WhyPending", "why_pending"]
