"""The ``Scheduler``: job records, event methods, timers, reads. The tick is in ``tick.py``.

Every event method applies its change to the in-memory state at once and returns the
``Decision``s it made, in order; the caller persists or records them. Every state change
goes through :meth:`Scheduler._move`, which checks the move against the state machine,
keeps the indexes (queues, capacity, per-node and per-tenant holders, releases, usage) in
step incrementally, and appends the Decision. Nothing in here reads a clock: ``now`` is
always an argument, in integer seconds.

Decisions the contract leaves to this module (docs/core.md):

- **Run start** is the placement instant (QUEUED -> PLACING), not the agent's
  confirmation: the time limit (run start + max_runtime_s -> FAILED TimeLimit) then holds
  the promise a backfill decision relied on even when the agent is slow to confirm.
- **Node failure**: an elastic job that keeps at least ``min_gpus`` on its other nodes
  shrinks (it loses no work), even when it is also checkpointable; otherwise a
  checkpointable job is requeued with its resume pointer; anything else restarts from
  scratch while ``retries < retry_budget`` and then fails (RetriesExhausted). A job still
  PLACING is requeued (there is no run to shrink), counting a retry unless checkpointable.
- **Interactive slice**: ``config.interactive_reserved_gpus`` GPUs as whole nodes, taken
  from the end of the node list sorted by name (the last pod's last nodes), so the first
  pods stay whole for gangs. Fixed at construction; a slice node that fails is not
  replaced. Interactive jobs try the slice first, then the rest of the cluster.
- **Preemption cap**: a job may be preempted for a borrowing head while fewer than
  ``max_preemptions_per_job_per_day`` preemptions happened in the last 86,400 s; a head
  whose team takes its guarantee back may preempt it past the cap when no set of other
  victims makes room (else a protected borrower would keep that guarantee until it
  completed). A preemption is counted when
  the job actually stops (PREEMPTED), graceful or killed.
- **Dependencies and arrays** (gates.py): a queued job whose dependencies are unmet, or an
  array task past its array's ``max_running``, waits off the heaps (pending reason
  Dependency or ArrayLimit) and goes on them when the job it waits for ends. A job that
  depends on a job the core does not know yet waits for it: callers refuse unknown jobs
  and cycles at submit. A dependency that can never be met cancels the job
  (DependencyNeverSatisfied) in the same call that ended the job it waited for.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .capacity import Capacity
from .fairshare import FairShare, ShareKey
from .gates import Doomed, Gates
from .layers import Layer, Lender
from .queues import JobQueues
from .records import JobRecord, ReclaimClaim, StartEstimate, TickResult
from .reservation import Release, Reservation
from .states import (
    FINAL_STATES,
    HOLDING_STATES,
    PENDING_SENTENCES,
    JobState,
    PendingReason,
    Reason,
    check_transition,
)
from .tick import ESTIMATE_REFRESH_S, RESERVATION_REFRESH_S, Tick
from .types import (
    TENANT_LIMITS,
    Allocation,
    Decision,
    JobSpec,
    NodeHealth,
    NodeSpec,
    SchedulerConfig,
    TenantSpec,
    alloc_gpus,
    may_borrow,
    may_not_borrow_words,
)

__all__ = ["JobRecord", "ReclaimClaim", "Scheduler", "StartEstimate", "TickResult"]

S = JobState
LEAVING_STATES = frozenset({S.PREEMPT_REQUESTED, S.CHECKPOINTING})
#: one job's timers due at one instant fire in this order (the order they are armed in)
_TIMER_RANK = {"placing": 0, "limit": 1, "grace": 2}
POLICIES = ("full", "fifo", "priority-kill")
#: checkpoints whose jobs the scheduler remembers (Scheduler.checkpointed): more between two
#: preemption searches and the tick builds its candidates again
CHECKPOINTS_REMEMBERED = 4096
#: moves noted for the next tick's picture (Scheduler.picture_moves): more between two
#: ticks and the tick builds a fresh picture
PICTURE_MOVES_KEPT = 4096


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    tenant: str
    state: JobState
    gpus: int
    alloc: Allocation | None
    pending_reason: PendingReason
    pending_sentence: str
    queue_position: int | None  # in its tenant's queue (1 = next)
    cluster_rank: int | None  # across the cluster, in the last tick's order
    start_estimate_s: int | None  # None: not planned yet (or not waiting)
    estimate_basis: str | None
    #: what the estimate is worth (records.StartEstimate.kind); None without an estimate
    estimate_kind: str | None
    run_start_s: int | None
    last_checkpoint_s: int | None
    resume_pointer: Any
    preemptions: int
    preemptions_last_day: int
    retries: int


@dataclass(frozen=True, slots=True)
class TenantView:
    name: str
    guaranteed_gpus: int
    borrow_limit_gpus: int
    running_gpus: int  # GPUs held (PLACING, RUNNING, being preempted)
    reclaiming_gpus: int  # GPUs being reclaimed for its waiting heads
    queued_jobs: int
    usage_gpu_s: float
    share: float  # usage / guarantee (inf: no guarantee and some usage)
    borrowing: bool


@dataclass(frozen=True, slots=True)
class ReservationView:
    job_id: str
    kind: str  # "reservation" (backfill plan) or "reclaim" (waiting for preempted victims)
    start_s: int | None
    nodes: tuple[str, ...]
    basis: str
    victims: tuple[str, ...] = ()
    gpus: int = 0  # GPUs held for it: the reservation's allocation, or the claim's
    #: "reservation" only: the plan, as :meth:`Scheduler.restore_reservations` takes it
    alloc: Allocation | None = None
    planned_at_s: int | None = None
    #: when it was last planned afresh and kept as it was (None: not since planned_at_s)
    checked_at_s: int | None = None
    #: Scheduler.plan_inputs() at its last look (None: never looked at since planned)
    looked_sig: int | None = None
    after_job: str | None = None
    #: "reclaim" only: when the claim was made (``ReclaimClaim.at_s``)
    at_s: int | None = None


#: the plan inputs' digest is a sum of 48-bit parts modulo this (fits a JSON number)
PICTURE_MOD = 1 << 48


def picture_part(*parts: object) -> int:
    """A 48-bit digest of ``parts`` (their repr), the same in every process (unlike
    ``hash`` of a str): the parts of what a reservation plan reads, summed so that the
    digest does not depend on the order in which the state was built."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=6).digest(),
                          "big")


def _claim_parts(claim: ReclaimClaim) -> tuple[object, ...]:
    return ("c", claim.head_id, claim.tenant, claim.gpus, tuple(sorted(claim.nodes)))


@dataclass(frozen=True, slots=True)
class ReleaseKey:
    end_s: int
    job_id: str


class ReleaseIndex:
    """Holding jobs with a known end (declared limit, or grace deadline), sorted by
    (end_s, job_id): what the reservation planner gives back, in order. Incremental.

    The Release objects live as long as their job's end and GPUs do not change, and so
    do their entries in ``masks`` (plan_reservation's per-release bitmasks): the planner
    reads the same releases tick after tick, so they are built once, not once per tick."""

    def __init__(self) -> None:
        self._keys: list[tuple[int, str]] = []
        self._by_job: dict[str, Release] = {}
        self._list: list[Release] | None = None
        #: plan_reservation's mask cache for these releases, pruned with them
        self.masks: dict[int, Any] = {}
        #: the sum of picture_part("r", job, end) over the releases (Scheduler.plan_inputs)
        self.digest = 0
        #: node -> the jobs whose releases give GPUs back there. The sets are replaced,
        #: never changed in place, so a copy of the dict is a picture of this instant
        #: (the tick's line takes one instead of rebuilding it from every release)
        self.on_node: dict[str, frozenset[str]] = {}
        #: the two maps lent to pictures (``lend``): told of each key before it changes
        self._by_job_lender = Lender(self._by_job)
        self._on_node_lender = Lender(self.on_node)

    def set(self, job_id: str, end_s: int | None, alloc: Allocation | None) -> None:
        old = self._by_job.get(job_id)
        if (old is not None and old.end_s == end_s
                and (old.alloc is alloc or old.alloc == alloc)):
            # unchanged (a checkpoint, a move within the holding states): the same Release
            # object and list stay, and with them the mask caches and pictures keyed on them
            return
        self.discard(job_id)
        if end_s is None or not alloc:
            return
        key = (end_s, job_id)
        i = bisect.bisect_left(self._keys, key)
        self._keys.insert(i, key)
        self._by_job_lender.before_change(job_id)
        release = self._by_job[job_id] = Release(end_s=end_s, job_id=job_id, alloc=alloc)
        if self._list is not None:  # a new list object: holders of the old one keep it
            self._list = self._list.copy()
            self._list.insert(i, release)
        on_node, lender = self.on_node, self._on_node_lender
        for n in alloc:
            lender.before_change(n)
            on_node[n] = on_node.get(n, frozenset()) | {job_id}
        self.digest = (self.digest + picture_part("r", job_id, end_s)) % PICTURE_MOD

    def discard(self, job_id: str) -> None:
        if job_id not in self._by_job:
            return
        self._by_job_lender.before_change(job_id)
        old = self._by_job.pop(job_id, None)
        if old is not None:
            i = bisect.bisect_left(self._keys, (old.end_s, job_id))
            del self._keys[i]
            self.masks.pop(id(old), None)
            if self._list is not None:  # the same index: the list follows the keys
                self._list = self._list.copy()
                del self._list[i]
            on_node, lender = self.on_node, self._on_node_lender
            for n in old.alloc:
                lender.before_change(n)
                left = on_node.get(n, frozenset()) - {job_id}
                if left:
                    on_node[n] = left
                else:
                    on_node.pop(n, None)
            self.digest = (self.digest - picture_part("r", job_id, old.end_s)) % PICTURE_MOD

    def end_of(self, job_id: str) -> int | None:
        found = self._by_job.get(job_id)
        return None if found is None else found.end_s

    def __len__(self) -> int:
        return len(self._keys)

    def items(self) -> Iterable[tuple[int, str, Allocation]]:
        for end_s, job_id in self._keys:
            yield end_s, job_id, self._by_job[job_id].alloc

    def by_job_map(self) -> Mapping[str, Release]:
        """job id -> its release: the index's own map, to read only."""
        return self._by_job

    def journals_alive(self) -> int:
        """The lent pictures' journals the index still writes to (by job and by node)."""
        return self._by_job_lender.alive() + self._on_node_lender.alive()

    def lend(self) -> tuple[Layer, Layer]:
        """The maps by job (job id -> Release) and by node (``on_node``) as at this
        instant, for a picture to change (``layers``): later changes of the index do not
        show through, and the picture's do not reach the index."""
        return self._by_job_lender.lend(), self._on_node_lender.lend()

    def releases(self) -> list[Release]:
        """The releases in (end_s, job_id) order: the same list object until one changes
        (callers must not modify it; copy it to). Kept in step with the keys once read: a
        change makes a new list (a C-level copy and one insert or delete) rather than
        rebuilding it from the index at the next read."""
        if self._list is None:
            by_job = self._by_job
            self._list = [by_job[j] for _e, j in self._keys]
        return self._list


def grace_window(spec: JobSpec, config: SchedulerConfig) -> int:
    """The grace window a victim gets: see :meth:`Scheduler.grace_window`."""
    return capped_grace(spec.checkpoint_time_s, config)


def capped_grace(checkpoint_time_s: int | None, config: SchedulerConfig) -> int:
    """A declared checkpoint time (None or 0: the default grace) as the grace window the
    scheduler grants: never more than ``max_grace_period_s``. The agents' kill deadline is
    this same number (selectors.agents)."""
    declared = checkpoint_time_s if checkpoint_time_s else config.grace_period_s
    return min(declared, config.max_grace_period_s)


def interactive_slice(nodes: Sequence[NodeSpec], gpus: int) -> frozenset[str]:
    """Whole nodes for the interactive tier: from the end of the name order (see module doc)."""
    chosen: list[str] = []
    total = 0
    for spec in sorted(nodes, key=lambda n: n.name, reverse=True):
        if total >= gpus:
            break
        chosen.append(spec.name)
        total += spec.gpus
    return frozenset(chosen)


#: Reasons a quota cut makes untrue for a job its team holds too much to start (the team's
#: quota, not the cluster or the jobs ahead, keeps it waiting now): ``_out_of_reach``.
_QUOTA_HIDES = frozenset({PendingReason.RESOURCES, PendingReason.TOPOLOGY,
                          PendingReason.GPU_TYPE, PendingReason.NODE_DOWN,
                          PendingReason.RESERVATION, PendingReason.PRIORITY,
                          PendingReason.INTERACTIVE_TIER_FULL})


class Scheduler:
    """The scheduling core's state and events. See docs/core.md for the contract."""

    def __init__(
        self,
        nodes: Iterable[NodeSpec],
        tenants: Iterable[TenantSpec],
        config: SchedulerConfig | None = None,
        now: int = 0,
    ) -> None:
        self.config = config or SchedulerConfig()
        if self.config.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.config.policy!r}")
        node_list = list(nodes)
        self.cap = Capacity(node_list)
        self.node_specs = {n.name: n for n in node_list}
        self.node_order = sorted(self.cap.nodes)  # fifo's first fit walks this
        self._node_sizes: dict[tuple[str | None, bool], list[int]] = {}  # NeverFits cache
        # nodes down or draining: few, so a pending reason may look at them all
        self.unhealthy: set[str] = {
            n for n, st in self.cap.nodes.items() if st.health != NodeHealth.HEALTHY
        }
        self.interactive_nodes = interactive_slice(node_list, self.config.interactive_reserved_gpus)
        #: a digest of what a reservation plan reads besides the releases: the GPUs held
        #: (by job), the nodes not healthy, the claims and the teams' limits (plan_inputs)
        self.picture = 0
        for n in sorted(self.unhealthy):
            self._picture(+1, "h", n, self.cap.nodes[n].health.value)
        self.fair = FairShare(self.config.usage_half_life_s)
        self.tenants: dict[str, TenantSpec] = {}
        self.running: dict[str, int] = {}  # GPUs held per tenant
        #: GPUs per tenant of its jobs being preempted (PREEMPT_REQUESTED, CHECKPOINTING):
        #: still held, already on their way out; a team's share leaves them out
        self.leaving: dict[str, int] = {}
        #: the jobs asked to stop that still hold their GPUs (LEAVING_STATES)
        self.leaving_jobs: set[str] = set()
        self.holders: dict[str, set[str]] = {}  # holding job ids per tenant
        #: a tenant's holders in submission order, while its holders stay the same (the
        #: preemption candidates are built from it at every tick that searches)
        self.holders_by_seq: dict[str, list[str]] = {}
        #: GPUs held per (tenant, owner), for jobs with an owner: the per-user cap reads
        #: this counter (updated as GPUs are taken and given back), never the queue
        self.user_held: dict[tuple[str, str], int] = {}
        for t in tenants:
            if t.name in self.tenants:
                raise ValueError(f"tenant {t.name}: listed twice")
            self.tenants[t.name] = TenantSpec(
                t.name, t.guaranteed_gpus, t.borrow_limit_gpus, t.usage_gpu_s, t.usage_at_s,
                t.max_gpus_per_user, t.default_runtime_s, t.max_runtime_s,
            )
            self._picture(+1, "q", t.name, t.guaranteed_gpus, t.borrow_limit_gpus)
            self.running[t.name] = 0
            self.leaving[t.name] = 0
            self.holders[t.name] = set()
            # usage is as of usage_at_s; the first advance decays it to now
            self.fair.add_tenant(t.name, t.usage_gpu_s, min(t.usage_at_s, now))
        self.tenant_names = sorted(self.tenants)
        self.queues = JobQueues(fifo=self.config.policy == "fifo",
                                stretch=self.config.queue_stretch)
        self.gates = Gates()
        #: pending reasons set outside a tick (a job parked by a gate, or let through
        #: one): the next tick publishes them with its own
        self.pending_news: dict[str, PendingReason] = {}
        #: start estimates withdrawn outside a tick (a quota cut left the job too large to
        #: start): the next tick publishes them with its own
        self.estimate_news: dict[str, StartEstimate | None] = {}
        #: QUEUED jobs restored but not yet put through the gates: an array's active tasks
        #: are known only once every job is restored (the next event or tick does it)
        self._unsettled: list[JobRecord] = []
        self._dooming: deque[Doomed] | None = None
        self.jobs: dict[str, JobRecord] = {}
        self.node_jobs: dict[str, set[str]] = {n: set() for n in self.cap.nodes}
        self.releases = ReleaseIndex()
        self.claims: dict[str, ReclaimClaim] = {}
        self._claimed_by: dict[str, int] = {}  # tenant -> GPUs of its claims
        self.claimed_nodes: dict[str, str] = {}  # node -> head id
        #: the last tick's reservations, in rank order (the highest-ranked jobs that wait
        #: for GPUs), and when each was last planned afresh (tick.Tick keeps them while
        #: they still hold)
        self.reserved: list[Reservation] = []
        #: the last tick's picture with those reservations booked (tick.KeptLine), while
        #: nothing has changed since but what it can follow (``picture_moves``): the next
        #: tick takes it over instead of re-booking
        self.kept_line: Any = None
        #: each move into, out of or between the holding states since the last tick
        #: handed its picture on, one per change of ``cluster_version`` (the tick checks
        #: the count): ("end", job, its GPUs) when a job let its GPUs go, ("same", job,
        #: None) when neither its GPUs nor its release changed, ("other", job, None) else
        self.picture_moves: list[tuple[str, str, Allocation | None]] = []
        #: the searches the last tick's budget denied, in its walk's order (tick.Tick.denied)
        self.denied_searches: list[tuple[str, int, frozenset[str]]] = []
        self.planned_at: dict[str, int] = {}
        #: when a kept reservation was last planned afresh and the fresh plan was not
        #: better (it was kept as it was): it is not due for another look until
        #: tick.RESERVATION_REFRESH_S later
        self.checked_at: dict[str, int] = {}
        #: plan_inputs() at a reservation's last look (planned afresh, bettered or not)
        self.looked_sig: dict[str, int] = {}
        #: per team, the highest-ranked job that waits for the team's own quota: it holds
        #: its place in that quota (tick.QuotaHold), not GPUs
        self.quota_holds: dict[str, Any] = {}
        self.share_keys: dict[str, ShareKey] = {}
        # a tick pass cut short by its budget resumes here (see tick.Tick.pop_heads)
        self.pass_seen: set[str] = set()
        self.pass_blocked: dict[tuple[str, int], int] = {}
        #: per heap, the last job the pass examined there and the heap's last push
        #: then: a resumed tick walks on from there (Tick.order_heaps)
        self.pass_cursor: dict[tuple[str, int], tuple[Any, int]] = {}
        # bumped by every change a plan depends on; the estimates phase skips when unchanged
        self.version = 0
        self.estimates_version = -1
        self.estimates_at = now
        self.planned: set[str] = set()
        self.estimate_round: Any = None  # tick.EstimateRound in progress, if any
        #: plan the look-ahead's start estimates (phase 4's rounds), and tell the jobs
        #: behind where the walk left a heap that they wait behind higher-ranked ones
        #: (Tick._behind), and write into a preemption's detail every candidate the search
        #: weighed ("weighed", the dashboard's). None is a decision: a simulation that
        #: records no view (the benchmarks, what-if) turns this off, and the reserved jobs'
        #: and quota holders' estimates, and the examined jobs' reasons, are still published
        self.look_ahead = True
        self.claims_version = 0
        #: (picture_sig(), team -> at or above its guarantee): the walk's first key
        #: (Tick.order_heaps), read from what only picture_sig() tracks changes of
        self.borrows_memo: tuple[tuple[int, int], dict[str, bool]] | None = None
        #: bumped by every change of what a preemption search reads: the jobs holding GPUs
        #: (started, stopping, gone), the nodes' health, the teams' quotas. A job that
        #: arrives, waits or leaves the queue changes ``version`` only.
        self.cluster_version = 0
        #: head -> (cluster_version, claims_version, the nodes it avoided) when its
        #: preemption search found nothing (tick.Tick._searched_in_vain)
        self.vain_searches: dict[str, tuple[int, int, frozenset[str]]] = {}
        #: the last preemption search's candidates by job id (tick.Tick.candidates)
        self.candidates: dict[str, Any] = {}
        #: (cluster_version, valid until, the list) of the last candidates built: the
        #: same list while none of what they are made of changed (the checkpoints
        #: reported since ``kept_checkpoints`` are patched in: Tick._checkpointed_since)
        self.candidates_memo: tuple[int, int, list[Any]] | None = None
        #: per team, the changes of cluster_version its own jobs made (one started,
        #: stopped, shrank or was asked to stop), and their sum: a team whose count holds
        #: has the same candidates as long as nothing else changed the cluster
        #: (tick.Tick.candidates keeps each team's slice of the list)
        self.team_touched: dict[str, int] = {}
        self.touched_total = 0
        #: the candidates kept by team: team -> (team_touched then, valid until, job ids
        #: in the list's order), built when cluster_version - touched_total was
        #: ``slices_layout``; ``candidates`` holds their Candidates, up to date with the
        #: checkpoints up to ``kept_checkpoints``
        self.candidate_slices: dict[str, tuple[int, int, list[str]]] | None = {}
        self.slices_layout = -1
        self.kept_checkpoints = 0
        #: checkpoints reported (a checkpoint changes a candidate, not cluster_version)
        self.checkpoints = 0
        #: the jobs of the last checkpoints reported, oldest first: a tick brings the last
        #: candidates up to date with these instead of building them all again
        self.checkpointed: deque[str] = deque(maxlen=CHECKPOINTS_REMEMBERED)
        # the fixed-point detection of tick() (see _note_quiet): the signature of the last
        # quiet tick, the fixed point found, and when the state last changed
        self._quiet: tuple[Any, ...] | None = None
        #: (state version, claims version, order signature, looks due at, a round or a
        #: search going on, a whole tick due at): see _note_quiet
        self._fixed: tuple[int, int, tuple[Any, ...], int | None, bool, int | None] | None = None
        self._seen_version = -1
        self._order_memo: tuple[int, dict[int, tuple[Any, ...]]] = (-1, {})
        self._share_memo: tuple[int, int, dict[str, ShareKey]] | None = None
        self._changed_at = now
        self.now = now
        #: (at, (job seq, kind rank), kind, job, token): see _arm
        self._timers: list[tuple[int, tuple[int, int], str, str, int]] = []
        self._out: list[Decision] = []
        self.tick_count = 0

    # ---------------------------------------------------------------- event methods
    def submit(self, spec: JobSpec, now: int) -> list[Decision]:
        if spec.id in self.jobs:
            raise ValueError(f"job {spec.id}: already submitted")
        if spec.tenant not in self.tenants:
            raise ValueError(f"job {spec.id}: unknown tenant {spec.tenant!r}")
        if spec.gpus <= 0:
            raise ValueError(f"job {spec.id}: gpus must be positive")
        self._clock(now)
        spec = self.with_team_default(spec)
        rec = JobRecord(spec=spec)
        self.jobs[spec.id] = rec
        self._move(rec, S.SUBMITTED, Reason.SUBMITTED, now)
        why = self._never_fits(spec)
        if why:
            self._move(rec, S.FAILED, Reason.NEVER_FITS, now, detail={"why": why})
            return self._flush()
        doomed = self.gates.register(spec, self._state_of)
        self._move(rec, S.QUEUED, Reason.ADMITTED, now)
        if doomed is not None:
            self._doom([doomed], now)
        return self._flush()

    def cancel(self, job_id: str, now: int) -> list[Decision]:
        rec = self._rec(job_id)
        self._clock(now)
        if rec.state in FINAL_STATES:
            return []
        self._move(rec, S.CANCELLED, Reason.CANCELLED, now)
        return self._flush()

    def confirm_start(self, job_id: str, now: int) -> list[Decision]:
        rec = self._rec(job_id)
        self._clock(now)
        self._move(rec, S.RUNNING, Reason.STARTED, now)
        rec.confirmed_s = now
        return self._flush()

    def report_checkpoint(self, job_id: str, now: int, resume_pointer: Any) -> list[Decision]:
        rec = self._rec(job_id)
        self._clock(now)
        rec.last_checkpoint_s = now
        rec.resume_pointer = resume_pointer
        self.checkpoints += 1
        self.checkpointed.append(job_id)
        assert rec.state is not None
        self._move(rec, rec.state, Reason.CHECKPOINTED, now,
                   detail={"resume_pointer": resume_pointer})
        return self._flush()

    def ack_preempt(self, job_id: str, now: int) -> list[Decision]:
        rec = self._rec(job_id)
        self._clock(now)
        self._move(rec, S.CHECKPOINTING, Reason.CHECKPOINT_STARTED, now)
        return self._flush()

    def job_exited(self, job_id: str, now: int, outcome: str) -> list[Decision]:
        rec = self._rec(job_id)
        self._clock(now)
        if outcome == "completed":
            self._move(rec, S.COMPLETED, Reason.COMPLETED, now)
        elif outcome == "failed":
            self._move(rec, S.FAILED, Reason.EXIT_FAILED, now)
        elif outcome == "preempted":
            reason = Reason.PREEMPTED if rec.state == S.CHECKPOINTING else Reason.NO_CHECKPOINT
            self._preempted(rec, reason, now)
        else:
            raise ValueError(f"job {job_id}: outcome must be completed|failed|preempted")
        return self._flush()

    def node_down(self, name: str, now: int) -> list[Decision]:
        self._node(name)
        self._clock(now)
        self._set_health(name, NodeHealth.DOWN)
        self._drop_claims_on(name)
        for job_id in sorted(self.node_jobs[name], key=lambda j: self.jobs[j].spec.seq):
            self._node_failed(self.jobs[job_id], name, now)
        return self._flush()

    def node_up(self, name: str, now: int) -> list[Decision]:
        self._node(name)
        self._clock(now)
        self._set_health(name, NodeHealth.HEALTHY)
        return []

    def node_drain(self, name: str, now: int) -> list[Decision]:
        self._node(name)
        self._clock(now)
        if self.cap.nodes[name].health == NodeHealth.HEALTHY:
            self._set_health(name, NodeHealth.DRAINING)
        return []

    def node_undrain(self, name: str, now: int) -> list[Decision]:
        self._node(name)
        self._clock(now)
        if self.cap.nodes[name].health == NodeHealth.DRAINING:
            self._set_health(name, NodeHealth.HEALTHY)
        return []

    def set_quota(
        self, tenant: str, guaranteed_gpus: int, borrow_limit_gpus: int | None, now: int,
        *, limits: Mapping[str, int | None] | None = None,
    ) -> list[Decision]:
        """Change a tenant's limits. The next tick sees them: a tenant that becomes
        entitled may then reclaim borrowed GPUs. ``limits``: any of ``max_gpus_per_user``,
        ``default_runtime_s``, ``max_runtime_s`` to set (None clears one); the others keep
        their values. A new default or cap applies to jobs submitted from now on."""
        t = self._tenant(tenant)
        self._clock(now)
        self.fair.advance(tenant, now, self.running[tenant])
        old_limit, old_cap = self.limit_of(tenant), t.max_gpus_per_user
        self._picture(-1, "q", t.name, t.guaranteed_gpus, t.borrow_limit_gpus)
        t.guaranteed_gpus = guaranteed_gpus
        self.version += 1
        self.cluster_version += 1
        if borrow_limit_gpus is not None:
            t.borrow_limit_gpus = borrow_limit_gpus
        self._picture(+1, "q", t.name, t.guaranteed_gpus, t.borrow_limit_gpus)
        for key, value in (limits or {}).items():
            if key not in TENANT_LIMITS:
                raise ValueError(f"tenant {tenant}: unknown limit {key!r}")
            setattr(t, key, value)
        self._limits_loosened(t, old_limit, old_cap)
        self._out_of_reach(t)
        return []

    def _out_of_reach(self, t: TenantSpec) -> None:
        """The team's queued jobs that need more than it (or their owner) may now hold lose
        their start estimate at once and wait for the quota: the look-ahead replans them
        only when its round reaches them, and until then a job that cannot start while
        the limit stays showed a start half an hour away for up to 2.5 minutes after a
        cut (a pipeline author's session, 2026-12-07). A job told it waits for GPUs, a
        placement or the jobs ahead (:data:`_QUOTA_HIDES`) that the team now holds too much
        to start is told QuotaLimit at once too; its estimate stands, the look-ahead's
        quota estimate. Only views read estimates and reasons."""
        if not self.look_ahead:
            return
        held = self.running[t.name]
        for _ek, job_id in self.queues.iter_tenant(t.name):
            rec = self.jobs[job_id]
            spec = rec.spec
            if rec.state != S.QUEUED:
                continue
            beyond = self.beyond_limits(spec)
            if beyond is not None:
                reason = beyond
                if rec.estimate is not None:
                    rec.estimate = self.estimate_news[job_id] = None
                    rec.pending_reason = self.pending_news[job_id] = reason
                    continue
            elif held + spec.least_gpus > self.limit_for(spec):
                # the team holds too much to start it now: its old reason ("not enough free
                # GPUs") stood for minutes after a cut, until a walk reached it (an
                # operator's session, 2026-12-07); the look-ahead gives its quota estimate
                reason = PendingReason.QUOTA_LIMIT
            else:
                continue
            if rec.pending_reason in _QUOTA_HIDES:
                rec.pending_reason = self.pending_news[job_id] = reason

    def _limits_loosened(self, t: TenantSpec, old_limit: int, old_cap: int | None) -> None:
        """The team's queued jobs told to wait for a limit that was just raised or lifted
        wait, as far as anyone knows, behind the jobs ahead of them (Priority) until a walk
        reaches them: a walk stops early in a deep queue, and their old reason ("holds 89
        of the 4 GPUs one person may hold", with the cap gone) would stand for good. The
        next tick publishes the change; jobs it reaches get their reason from it. Only
        views read reasons: a run without them (benchmarks, what-if) skips this."""
        if not self.look_ahead:
            return
        stale: set[PendingReason] = set()
        if self.limit_of(t.name) > old_limit:
            stale |= {PendingReason.QUOTA_LIMIT, PendingReason.QUOTA_RESERVED}
        cap = t.max_gpus_per_user
        if old_cap is not None and (cap is None or cap > old_cap):
            stale.add(PendingReason.USER_LIMIT)
        if not stale:
            return
        for _ek, job_id in self.queues.iter_tenant(t.name):
            rec = self.jobs[job_id]
            if rec.pending_reason in stale:
                rec.pending_reason = self.pending_news[job_id] = PendingReason.PRIORITY

    def with_team_default(self, spec: JobSpec) -> JobSpec:
        """``spec`` with its team's ``default_runtime_s`` as its limit when it declares
        none: a job with a limit can backfill and be planned."""
        default = self._tenant(spec.tenant).default_runtime_s
        if spec.max_runtime_s is None and default is not None:
            return replace(spec, max_runtime_s=default)
        return spec

    def user_room(self, spec: JobSpec) -> int | None:
        """GPUs the job's owner may still take under its team's ``max_gpus_per_user``
        (None: no cap applies, the team has none or the job no owner). O(1)."""
        cap = self.tenants[spec.tenant].max_gpus_per_user
        if cap is None or spec.owner is None:
            return None
        return cap - self.user_held.get((spec.tenant, spec.owner), 0)

    def tick(self, now: int, clock: Callable[[], float] | None = None) -> TickResult:
        """One tick (tick.py). At a *fixed point* (see :meth:`quiet_until`) the tick would
        decide nothing and change nothing: it returns at once with no decisions."""
        self._clock(now)
        self.tick_count += 1
        if self.version != self._seen_version:
            self._seen_version, self._changed_at = self.version, now
        if (not self.pending_news and not self.estimate_news
                and self.quiet_until(now, now) is not None):
            self.share_keys = {} if self.config.policy == "fifo" else self.share_keys_at(now)
            return TickResult([], {"quiet": True, "examined": 0, "placed": 0, "backfilled": 0,
                                   "preemption_searches": 0, "preempt_requests": 0,
                                   "search_denied": False, "budget_exhausted": False,
                                   "tick_ms": 0.0}, {}, {})
        looks = not self.pending_news and not self.estimate_news and self.looks_alone_due(now)
        result = Tick(self, now, clock, looks_alone=looks).run()
        self._note_quiet(result, now)
        return result

    # A tick that decided nothing (no timer due, nothing placed, nobody asked to stop, a
    # whole pass from the heads: not one resumed after the work budget, since the next
    # tick's pass starts from the heads again and may spend its budget before reaching
    # the jobs this one reached; no head the rule lets preempt left without a search by the tick's
    # search budget) and left the reservations, quota holds and claims as the tick before
    # it had them, with the same heap order and no state change in between, is a fixed
    # point: the next tick would compute the same again. An estimate round going on, or
    # heads the search budget left without a search, make it a fixed point but for that
    # (the last item of ``_fixed``): the next ticks plan more of the round or make those
    # searches, and walk no queue (``looks_alone_due``, ``Tick._searches_alone``); none
    # is skipped until then (``quiet_until``).
    # What makes a later tick differ without any event is time alone: the fair-share
    # order (decayed usage; linear in 2^-t/H for each tenant, so an order seen at two
    # instants held between them) and a kept reservation's refresh
    # (RESERVATION_REFRESH_S after its last look, if the state changed since). Every
    # other input of a tick changes only with an event, and an event changes ``version``.
    def _note_quiet(self, result: TickResult, now: int) -> None:
        quiet = (not result.decisions and not result.stats.get("budget_exhausted")
                 and not self.pass_seen and not result.stats.get("resumed_pass"))
        searching = bool(result.stats.get("search_denied"))
        if searching and not self.denied_searches:
            # its walk planned a reservation or resumed a pass: the next walk may search
            # for other heads (Tick.walk_unlike_next), so the next tick walks
            quiet = False
        if not quiet:
            self._quiet = None
            self._fixed = None
            return
        # (a reservation's alloc as the dict itself: allocations are never changed once
        # made, and two dicts are equal exactly when their sorted items are, without
        # sorting a gang's nodes at every quiet tick)
        sig = (self.version, self.claims_version, self._order_sig(now),
               tuple((r.job_id, r.start_s, r.alloc) for r in self.reserved),
               tuple(sorted((t, h.job_id, h.start_s) for t, h in self.quota_holds.items())))
        # One quiet tick is enough when its plan budget did not run out: the next tick
        # would keep every reservation it made (they hold, on the same state) and plan
        # the same for the jobs it left unreserved. Otherwise the next one may plan more,
        # and a fixed point needs two ticks that leave the same.
        planned_all = (result.stats.get("reservations_planned", 0)
                       < self.config.reservation_plans_per_tick)
        but_for = self.estimate_round is not None or searching
        if result.stats.get("plan_denied"):
            # its walk met a job with no plan left: the next tick's budget may reach it,
            # even if this tick left the same as the last one (both may have spent their
            # plans on looks that are not due at the next; found by tests/sim/
            # test_shortcuts_properties.py, 2026-12-06: the same two reservations left by
            # two ticks, the third job reserved at the next one)
            self._fixed = None
            self._quiet = None
            return
        # Time reaching a reservation's (or a quota hold's) start changes what a whole
        # tick does (its job may start there, backfill around it ends): the fixed point
        # holds until the earliest, and not at all once it is past; then the next tick
        # runs whole, not after the looks alone (found by tests/sim/
        # test_shortcuts_properties.py, 2026-12-06: a look moved a reservation's start to
        # that very tick, and a whole tick three seconds later dropped it)
        starts = [r.start_s for r in self.reserved]
        starts += [h.start_s for h in self.quota_holds.values() if h.start_s is not None]
        walk_at = min(starts) if starts else None
        if (planned_all or sig == self._quiet) and but_for:
            # each tick plans more of the round, or makes one more search, whatever else
            # is due: nothing to time
            self._fixed = (self.version, self.claims_version, sig[2], None, True, walk_at)
        elif planned_all or sig == self._quiet:
            inputs = self.plan_inputs()
            stale = [self.looked_at(r.job_id, now) for r in self.reserved
                     if self.looked_sig.get(r.job_id) != inputs]
            due = min(stale) + RESERVATION_REFRESH_S if stale else None
            # a round of estimates due ends it too (a tick then runs phase 4 as well)
            round_at = self.round_due(now, {r.job_id for r in self.reserved})
            if round_at is not None:
                due = round_at if due is None else min(due, round_at)
            self._fixed = (self.version, self.claims_version, sig[2], due, False, walk_at)
        else:
            self._fixed = None
        # a tick that was a fixed point but for a round or a search does not count as the
        # first of two quiet ticks: it may have planned no reservation (it walked no
        # queue, or its plan budget went to a look), so an equal sig proves nothing
        self._quiet = None if but_for else sig

    def round_due(self, now: int, reserved: Container[str]) -> int | None:
        """When a tick starts a round of start estimates (``Tick._new_round``), with the
        jobs ``reserved`` holding reservations: once the state changed since the last
        round, at once if a job entered the look-ahead, else when that round is
        ESTIMATE_REFRESH_S old; None: not before the state changes. A fixed point holds
        only until then: a round finished on an older state (a round spans ticks, and
        jobs arrive meanwhile) would otherwise leave a newcomer's estimate unplanned
        until the next change of state or of the order."""
        if (not self.look_ahead or not len(self.queues)
                or self.version == self.estimates_version):
            return None
        if any(job_id not in self.planned for _t, _ek, job_id in self.look_ahead_jobs(reserved)):
            return now
        return self.estimates_at + ESTIMATE_REFRESH_S

    def look_ahead_jobs(self, reserved: Container[str]) -> Iterator[tuple[str, Any, str]]:
        """(tenant, entry key, job id) of the jobs a round of estimates plans: the first
        ``estimate_lookahead`` jobs of each tenant's queue, but those in ``reserved``."""
        n = self.config.estimate_lookahead
        for name in self.tenant_names:
            for i, (ek, job_id) in enumerate(self.queues.iter_tenant(name)):
                if i >= n:
                    break
                if job_id not in reserved:
                    yield name, ek, job_id

    def _order_sig(self, now: int) -> tuple[Any, ...]:
        """The order the walk would take the heaps in at ``now`` (its first keys). The
        same for every instant of one share period on one state: remembered per period
        until the state changes (the fixed-point search asks for it many times)."""
        at = now - now % self.config.share_period_s
        memo = self._order_memo
        if memo[0] != self.version:
            memo = self._order_memo = (self.version, {})
        found = memo[1].get(at)
        if found is None:
            keys = self.share_keys_at(now) if self.config.policy != "fifo" else {}
            zero = (0, 0.0)
            found = tuple(sorted((keys.get(k[0], zero), head[0], k)
                                 for k in self.queues.heap_keys()
                                 if (head := self.queues.head(k))))
            if len(memo[1]) > 64:
                memo[1].clear()
            memo[1][at] = found
        return found

    def _picture(self, sign: int, *parts: object) -> None:
        self.picture = (self.picture + sign * picture_part(*parts)) % PICTURE_MOD

    def picture_sig(self) -> tuple[int, int]:
        """What a tick's picture of the cluster (tick.KeptLine) and the checks of the
        reservations booked on it read, but for time and the reserved jobs' own states:
        the jobs holding GPUs, the nodes' health, the teams' quotas (``cluster_version``)
        and the claims. A job joining or leaving the queue changes neither."""
        return (self.cluster_version, self.claims_version)

    def plan_inputs(self) -> int:
        """A digest of the cluster a reservation plan reads: the GPUs held and released
        (by job, with their declared ends), the nodes not healthy, the claims and the
        teams' limits. A function of the state alone (the same for a leader rebuilt from
        the log): a kept reservation is looked at again only once it differs from the
        digest at its last look. (The other reservations are left out: they move only
        when the cluster does, or when a job ahead leaves the queue, which the next
        change of the cluster then catches.)"""
        return (self.picture + self.releases.digest) % PICTURE_MOD

    def looked_at(self, job_id: str, default: int) -> int:
        """When the reservation of ``job_id`` was last planned, or planned afresh and kept
        as it was: a reservation is due for another look RESERVATION_REFRESH_S later."""
        planned = self.planned_at.get(job_id, default)
        checked = self.checked_at.get(job_id)
        return planned if checked is None or checked < planned else checked

    def quiet_until(self, now: int, upto: int) -> int | None:
        """At a fixed point (see above), the last instant in [now, upto] until which ticks
        would decide and change nothing (the simulator skips them), else None. ``upto``
        is the next instant something happens anyway (an event, a timer)."""
        fixed = self._fixed_now(now)
        if fixed is None or fixed[4]:
            return None  # a round going on, or searches denied: each tick does more
        version, claims, order, due, _but_for, walk_at = fixed
        if due is not None:
            if due <= now:
                return None
            upto = min(upto, due - 1)
        if walk_at is not None:  # (past it there is no fixed point: _fixed_now)
            upto = min(upto, walk_at - 1)
        if self._order_sig(now) != order:
            return None
        if upto <= now or self._order_sig(upto) == order:
            return max(upto, now)
        lo, hi = now, upto  # the order holds at lo, not at hi: find where it changes
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._order_sig(mid) == order:
                lo = mid
            else:
                hi = mid
        return lo

    def looks_alone_due(self, now: int) -> bool:
        """At a fixed point but for kept reservations due for their fresh look
        (``RESERVATION_REFRESH_S``), a round of estimates due (``round_due``) or one going
        on (phase 4 plans ``estimate_plans_per_tick`` more of it at each tick): nothing
        happened since the last tick (the same state and claims, no timer due) and the
        walk's order is the same. Such a tick would replan those reservations and, if no
        fresh plan replaces one, walk the queues to the very answers of the last tick
        (``Tick(looks_alone=True)`` skips that walk; phase 4 still runs). On a loaded
        cluster these are many of the ticks that run (a quarter on the anchor window): a
        change of the cluster makes every reservation stale, and the looks come due two
        at a time. A round of estimates spans many ticks (two plans each, by default) and
        no walk reads what it plans: on the anchor window, a round was going on at two
        ticks in three. Heads left without a search by the last tick's budget are
        searched for alone, too (``Tick._searches_alone``)."""
        fixed = self._fixed_now(now)
        return (fixed is not None
                and (fixed[4] or (fixed[3] is not None and fixed[3] <= now))
                and self._order_sig(now) == fixed[2])

    def _fixed_now(self, now: int
                   ) -> tuple[int, int, tuple[Any, ...], int | None, bool, int | None] | None:
        """The fixed point the last tick found, if the state and the claims are still as
        it saw them, no timer is due at ``now`` and time has not reached a reservation's
        start (else None)."""
        fixed = self._fixed
        if fixed is None or fixed[0] != self.version or fixed[1] != self.claims_version:
            return None
        if fixed[5] is not None and fixed[5] <= now:
            return None
        deadline = self.next_deadline() if self._timers else None
        return None if deadline is not None and deadline <= now else fixed

    def next_deadline(self) -> int | None:
        while self._timers and not self._timer_live(self._timers[0]):
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    # ---------------------------------------------------------------- restore
    def restore_job(
        self,
        spec: JobSpec,
        state: JobState,
        *,
        alloc: Allocation | None = None,
        run_start_s: int | None = None,
        confirmed_s: int | None = None,
        last_checkpoint_s: int | None = None,
        resume_pointer: Any = None,
        preemption_times: Iterable[int] = (),
        retries: int = 0,
        preempt_requested_s: int | None = None,
        preempted_for: str | None = None,
    ) -> None:
        """Put a job into the state as it was persisted, making no decision (a production
        leader rebuilding from its database: the moves that led here are in its log).

        A QUEUED job joins its queue; a holding job (PLACING, RUNNING, PREEMPT_REQUESTED,
        CHECKPOINTING) takes exactly ``alloc`` and gets the timers its state needs: the
        placing timeout and time limit from ``run_start_s`` (default: now), the grace
        deadline from ``preempt_requested_s``. Other states only record the job (a
        PREEMPTED job waits for :meth:`requeue_preempted`).
        """
        if spec.id in self.jobs:
            raise ValueError(f"job {spec.id}: already known")
        self._tenant(spec.tenant)
        state = JobState(state)
        rec = JobRecord(
            spec=spec,
            last_checkpoint_s=last_checkpoint_s,
            resume_pointer=resume_pointer,
            preemption_times=list(preemption_times),
            retries=retries,
        )
        if state in HOLDING_STATES and not alloc:
            raise ValueError(f"job {spec.id}: {state} needs the allocation it holds")
        self.jobs[spec.id] = rec
        rec.state = state
        self.version += 1
        if state in HOLDING_STATES:
            self._touch(spec.tenant)
        if state == S.QUEUED:
            self._unsettled.append(rec)
            return
        if state not in HOLDING_STATES:
            if state in FINAL_STATES:
                rec.end_s = self.now
                self._ended(rec, self.now)
            elif state == S.PREEMPTED:
                self.gates.mark_active(spec)  # it ran: it keeps its array slot
            return
        self.gates.mark_active(spec)
        assert alloc is not None
        now = self.now
        # The usage stays as of the tenant's usage_at_s, with these GPUs held since then:
        # timers due before now (a placing timeout, a grace expiry) then accrue up to
        # their own instants, as the leader that wrote the log would have.
        self._hold(rec, alloc, now, accrue=False)
        rec.run_id = 1
        rec.run_start_s = run_start_s if run_start_s is not None else now
        rec.confirmed_s = confirmed_s
        if state == S.PLACING:
            self._arm(rec.run_start_s + self.config.placing_timeout_s, "placing", spec.id, 1)
        if spec.max_runtime_s is not None:
            self._arm(rec.run_start_s + spec.max_runtime_s, "limit", spec.id, 1)
        if state in LEAVING_STATES:
            self.leaving[spec.tenant] += alloc_gpus(alloc)
            self.leaving_jobs.add(spec.id)
            rec.preempt_id = 1
            asked = preempt_requested_s if preempt_requested_s is not None else now
            rec.grace_deadline_s = asked + self.grace_window(spec)
            self._arm(rec.grace_deadline_s, "grace", spec.id, 1)
            rec.preempted_for = preempted_for
        self._refresh_release(rec)

    def restore_reservations(self, views: Iterable[ReservationView]) -> None:
        """The reservations a previous leader published, in its order (after every job
        is restored): the next tick keeps those that still hold, as that leader's next
        tick would have. A plan for a job no longer queued, or on a node this state does
        not have, is left out."""
        kept: list[Reservation] = []
        for v in views:
            rec = self.jobs.get(v.job_id)
            if (v.kind != "reservation" or v.alloc is None or v.start_s is None
                    or rec is None or rec.state != S.QUEUED
                    or any(n not in self.cap.nodes for n in v.alloc)):
                continue
            kept.append(Reservation(v.job_id, v.start_s,
                                    {n: tuple(ix) for n, ix in v.alloc.items()},
                                    v.basis, v.after_job))
            if v.planned_at_s is not None:
                self.planned_at[v.job_id] = v.planned_at_s
            if v.checked_at_s is not None:
                self.checked_at[v.job_id] = v.checked_at_s
            if v.looked_sig is not None:
                self.looked_sig[v.job_id] = v.looked_sig
        self.reserved = kept

    def requeue_preempted(self, job_id: str, now: int) -> list[Decision]:
        """PREEMPTED -> QUEUED (Requeued) for a restored job whose requeue was cut off
        (the event methods always requeue a preempted job at once)."""
        rec = self._rec(job_id)
        self._clock(now)
        self._move(rec, S.QUEUED, Reason.REQUEUED, now,
                   detail={"resume_pointer": rec.resume_pointer})
        return self._flush()

    # ---------------------------------------------------------------- reads
    def job(self, job_id: str) -> JobView:
        rec = self._rec(job_id)
        spec = rec.spec
        assert rec.state is not None
        waiting = rec.state == S.QUEUED
        est = rec.estimate if waiting else None
        position = self.queues.position_in_tenant(job_id)
        reason = rec.pending_reason if waiting else PendingReason.NONE
        if reason == PendingReason.NONE and waiting and position is not None and position > 1:
            # The tick leaves a heap after a few blocked jobs and never scans the rest; a
            # job it has not reached waits, by construction, behind higher-ranked ones.
            reason = PendingReason.PRIORITY
        return JobView(
            id=spec.id,
            tenant=spec.tenant,
            state=rec.state,
            gpus=spec.gpus,
            alloc=dict(rec.alloc) if rec.alloc else None,
            pending_reason=reason,
            pending_sentence=PENDING_SENTENCES[reason] if waiting else "",
            queue_position=position,
            cluster_rank=self.queues.cluster_rank(
                job_id, self.share_keys, lambda: self.tenant_names
            ),
            start_estimate_s=None if est is None else est.start_s,
            estimate_basis=None if est is None else est.basis,
            estimate_kind=None if est is None else est.kind,
            run_start_s=rec.run_start_s,
            last_checkpoint_s=rec.last_checkpoint_s,
            resume_pointer=rec.resume_pointer,
            preemptions=len(rec.preemption_times),
            preemptions_last_day=rec.preemptions_last_day(self.now),
            retries=rec.retries,
        )

    def tenants_view(self) -> list[TenantView]:
        out = []
        for name in self.tenant_names:
            t = self.tenants[name]
            usage = self.fair.usage_at(name, self.now, self.running[name])
            key = self.fair.share_at(name, self.now, self.running[name], t.guaranteed_gpus)
            out.append(TenantView(
                name=name,
                guaranteed_gpus=t.guaranteed_gpus,
                borrow_limit_gpus=t.borrow_limit_gpus,
                running_gpus=self.running[name],
                reclaiming_gpus=self.claimed_gpus(name),
                queued_jobs=self.queues.tenant_count(name),
                usage_gpu_s=usage,
                share=key[1] if key[0] == 0 else float("inf"),
                borrowing=self.running[name] > t.guaranteed_gpus,
            ))
        return out

    def reservations(self) -> list[ReservationView]:
        out = []
        for res in self.reserved:
            if res.job_id in self.jobs and self.jobs[res.job_id].state == S.QUEUED:
                out.append(ReservationView(res.job_id, "reservation", res.start_s,
                                           tuple(sorted(res.alloc)), res.basis,
                                           gpus=res.gpus, alloc=dict(res.alloc),
                                           planned_at_s=self.planned_at.get(res.job_id),
                                           checked_at_s=self.checked_at.get(res.job_id),
                                           looked_sig=self.looked_sig.get(res.job_id),
                                           after_job=res.after_job))
        for head_id in sorted(self.claims, key=lambda j: self.jobs[j].spec.seq):
            c = self.claims[head_id]
            ends = [self.releases.end_of(v) for v in sorted(c.victims)]
            known = [e for e in ends if e is not None]
            out.append(ReservationView(head_id, "reclaim", max(known) if known else None,
                                       tuple(sorted(c.nodes)), c.why, tuple(sorted(c.victims)),
                                       gpus=c.gpus, at_s=c.at_s))
        return out

    # ---------------------------------------------------------------- helpers for tick.py
    def share_keys_at(self, now: int) -> dict[str, ShareKey]:
        """Every tenant's fair-share key for a tick at ``now``: its usage at the last
        multiple of ``share_period_s`` (or at its last change, if later)."""
        period = self.config.share_period_s
        at = now - now % period
        memo = self._share_memo  # (period start, version, keys): one state, one period
        if memo is not None and memo[0] == at and memo[1] == self.version:
            return memo[2]
        keys = {n: self.fair.share_at(n, at, self.running[n], self.tenants[n].guaranteed_gpus)
                for n in self.tenant_names}
        self._share_memo = (at, self.version, keys)
        return keys

    def claimed_gpus(self, tenant: str, *, besides: str | None = None) -> int:
        """GPUs being reclaimed for the team's heads (but ``besides``): a counter kept as
        claims come and go, since every examined job asks."""
        total = self._claimed_by.get(tenant, 0)
        if besides is not None:
            mine = self.claims.get(besides)
            if mine is not None and mine.tenant == tenant:
                total -= mine.gpus
        return total

    def limit_of(self, tenant: str) -> int:
        t = self.tenants[tenant]
        return t.guaranteed_gpus + t.borrow_limit_gpus

    def may_borrow(self, spec: JobSpec) -> bool:
        """May the job run on GPUs past its team's guarantee? Not if nothing could take
        them back in time: a job that cannot be preempted (neither checkpointable nor
        preemptible) borrows only with a declared limit of at most
        ``config.protected_borrow_max_s``. A default flag (checkpointable is off unless
        asked for) had let 30 such jobs hold another team's guarantee for good (found by
        a user session, 2026-12-07)."""
        return may_borrow(spec.checkpointable, spec.preemptible, spec.max_runtime_s,
                          self.config)

    def limit_for(self, spec: JobSpec) -> int:
        """The GPUs the job's team may hold while it runs: its guarantee plus its borrow
        limit, or its guarantee alone for a job that may not borrow (:meth:`may_borrow`)."""
        if self.may_borrow(spec):
            return self.limit_of(spec.tenant)
        return self.tenants[spec.tenant].guaranteed_gpus

    def grace_window(self, spec: JobSpec) -> int:
        """The victim's declared checkpoint time (else ``grace_period_s``), never longer than
        ``max_grace_period_s``: a job cannot hold an entitled team off by declaring a year."""
        return grace_window(spec, self.config)

    def in_slice(self, alloc: Allocation | None) -> bool:
        """The allocation lies entirely inside the interactive slice."""
        if not alloc:
            return False
        return all(n in self.interactive_nodes for n in alloc)

    def start(self, rec: JobRecord, alloc: Allocation, reason: Reason, now: int,
              detail: dict[str, Any] | None = None) -> Decision:
        """QUEUED -> PLACING with ``alloc``; arms the placing timeout and the time limit."""
        self.drop_claim(rec.spec.id)
        rec.run_id += 1
        rec.run_start_s = now
        rec.confirmed_s = None
        d = self._move(rec, S.PLACING, reason, now, alloc=alloc, detail=detail)
        self._arm(now + self.config.placing_timeout_s, "placing", rec.spec.id, rec.run_id)
        if rec.spec.max_runtime_s is not None:
            self._arm(now + rec.spec.max_runtime_s, "limit", rec.spec.id, rec.run_id)
        rec.pending_reason = PendingReason.NONE
        rec.estimate = StartEstimate(now, "started")
        return d

    def request_preempt(self, rec: JobRecord, head_id: str, now: int,
                        detail: dict[str, Any]) -> Decision:
        """RUNNING -> PREEMPT_REQUESTED; arms the grace timer (checkpoint time or default)."""
        rec.preempt_id += 1
        rec.grace_deadline_s = now + self.grace_window(rec.spec)
        rec.preempted_for = head_id
        d = self._move(rec, S.PREEMPT_REQUESTED, Reason.PREEMPT_REQUESTED, now, detail=detail)
        self._arm(rec.grace_deadline_s, "grace", rec.spec.id, rec.preempt_id)
        self._refresh_release(rec)
        return d

    def kill_now(self, rec: JobRecord, now: int, detail: dict[str, Any]) -> None:
        """``priority-kill``: PREEMPT_REQUESTED -> PREEMPTED -> QUEUED at once, no grace."""
        self._preempted(rec, Reason.PREEMPTED, now, detail=detail)

    def add_claim(self, claim: ReclaimClaim) -> None:
        self.drop_claim(claim.head_id)
        self.claims[claim.head_id] = claim
        self.claims_version += 1
        self._claimed_by[claim.tenant] = self._claimed_by.get(claim.tenant, 0) + claim.gpus
        self._picture(+1, *_claim_parts(claim))
        for n in claim.nodes:
            self.claimed_nodes[n] = claim.head_id

    def drop_claim(self, head_id: str) -> None:
        claim = self.claims.pop(head_id, None)
        if claim is not None:
            self.claims_version += 1
            self._claimed_by[claim.tenant] -= claim.gpus
            self._picture(-1, *_claim_parts(claim))
            for n in claim.nodes:
                if self.claimed_nodes.get(n) == head_id:
                    del self.claimed_nodes[n]

    def fire_timers(self, now: int) -> None:
        """Phase 0 of the tick: every timer due at or before ``now``, in (instant, arm) order."""
        while self._timers and self._timers[0][0] <= now:
            entry = heapq.heappop(self._timers)
            if not self._timer_live(entry):
                continue
            at, _seq, kind, job_id, _token = entry
            rec = self.jobs[job_id]
            if kind == "grace":
                self._preempted(rec, Reason.GRACE_EXPIRED, at,
                                detail={"killed": True, "grace_s": self.grace_window(rec.spec)})
            elif kind == "limit":
                self._move(rec, S.FAILED, Reason.TIME_LIMIT, at,
                           detail={"max_runtime_s": rec.spec.max_runtime_s})
            else:
                self._move(rec, S.QUEUED, Reason.PLACING_TIMEOUT, at)

    def flush(self) -> list[Decision]:
        return self._flush()

    def quota_free_at(self, tenant: str, need: int, now: int, *, besides: str | None = None
                      ) -> int | None:
        """When the tenant's own declared limits leave room for ``need`` more GPUs (now if
        they already do; None if it waits on a job without a declared limit)."""
        held = self.running[tenant] + self.claimed_gpus(tenant, besides=besides)
        over = held + need - self.limit_of(tenant)
        if over <= 0:
            return now
        ends = []
        for job_id in self.holders[tenant]:
            end = self.releases.end_of(job_id)
            ends.append((end if end is not None else -1, job_id))
        ends = sorted(e for e in ends if e[0] >= 0)
        for end, job_id in ends:
            over -= alloc_gpus(self.jobs[job_id].alloc)
            if over <= 0:
                return max(end, now)
        return None

    # ---------------------------------------------------------------- the one place states change
    def _move(
        self,
        rec: JobRecord,
        to: JobState,
        reason: Reason,
        now: int,
        *,
        alloc: Allocation | None = None,
        detail: dict[str, Any] | None = None,
    ) -> Decision:
        job_id = rec.spec.id
        frm = rec.state
        touched = False
        if not (reason == Reason.CHECKPOINTED and frm == to):
            # A reported checkpoint changes what a victim would lose, never whether a job
            # fits, may be reserved or may be preempted: what ``version`` tells the tick's
            # memos and fixed point has not changed. (A search that found victims is not a
            # fixed point anyway; one that found none finds none with a newer checkpoint.)
            self.version += 1
            if frm in HOLDING_STATES or to in HOLDING_STATES:
                self._touch(rec.spec.tenant)
                touched = True
                # what the move changes in a picture (_note_picture_move, below)
                held_before = rec.alloc
                release_before = self.releases.by_job_map().get(job_id)
        if frm is None:
            if to != S.SUBMITTED:
                raise ValueError(f"job {job_id}: the first transition must be to SUBMITTED")
        else:
            check_transition(job_id, frm, to)
        was_holding = frm in HOLDING_STATES
        holds = to in HOLDING_STATES
        left = alloc_gpus(rec.alloc) if frm in LEAVING_STATES else 0
        if holds and not was_holding and alloc is None:
            raise ValueError(f"job {job_id}: {to} needs an allocation")
        if frm == S.QUEUED and to != S.QUEUED:
            self.queues.remove(job_id)
        if was_holding and (not holds or alloc is not None):
            self._let_go(rec, now)
        if holds and alloc is not None:
            self._hold(rec, alloc, now)
        rec.state = to
        if to not in (S.PREEMPT_REQUESTED, S.CHECKPOINTING):
            rec.grace_deadline_s = None
        if to == S.QUEUED and frm != S.QUEUED:
            rec.pending_reason = PendingReason.NONE
            rec.estimate = None
            self._queue_or_park(rec)
        if not holds:
            rec.run_start_s = None
        if to in FINAL_STATES:
            self.drop_claim(job_id)
            rec.end_s = now
            rec.estimate = None
            ended_job = True
        else:
            ended_job = False
        if holds:
            self._refresh_release(rec)
        self.leaving[rec.spec.tenant] += (
            alloc_gpus(rec.alloc) if to in LEAVING_STATES else 0) - left
        if to in LEAVING_STATES:
            self.leaving_jobs.add(job_id)
        elif frm in LEAVING_STATES:
            self.leaving_jobs.discard(job_id)
        decision = Decision(
            job_id=job_id,
            from_state=frm,
            to_state=to,
            reason=reason,
            at_s=now,
            alloc=dict(alloc) if alloc is not None else None,
            detail=detail or {},
        )
        self._out.append(decision)
        if touched:
            self._note_picture_move(rec, frm, held_before, release_before)
        if ended_job:
            self._ended(rec, now)
        return decision

    def _note_picture_move(self, rec: JobRecord, frm: JobState | None,
                           held_before: Allocation | None, release_before: Any) -> None:
        """What a move did to the cluster a picture shows (``picture_moves``). Past
        ``PICTURE_MOVES_KEPT`` moves none is noted: the count then tells the tick that it
        lost track, and it builds a fresh picture."""
        moves = self.picture_moves
        if len(moves) >= PICTURE_MOVES_KEPT:
            return
        job_id = rec.spec.id
        if frm in HOLDING_STATES and rec.state not in HOLDING_STATES:
            moves.append(("end", job_id, held_before))
        elif (frm in HOLDING_STATES and rec.alloc is held_before
              and self.releases.by_job_map().get(job_id) is release_before):
            moves.append(("same", job_id, None))
        else:
            moves.append(("other", job_id, None))

    def _ended(self, rec: JobRecord, now: int) -> None:
        """A job reached a final state: the gates it held shut open (the jobs that waited
        for it go on their heaps) or doom their jobs (cancelled, and so on down a chain:
        a worklist, not recursion, so a pipeline of any length is safe)."""
        assert rec.state is not None
        opened, doomed, capped = self.gates.ended(rec.spec, rec.state, self._spec_of)
        self._let_through(opened)
        for job_id in capped:
            self.jobs[job_id].pending_reason = self.pending_news[job_id] = (
                PendingReason.ARRAY_LIMIT)
        if doomed:
            self._doom(doomed, now)

    def _doom(self, doomed: list[Doomed], now: int) -> None:
        if self._dooming is not None:  # inside the loop below: _move ended a doomed job
            self._dooming.extend(doomed)
            return
        self._dooming = deque(doomed)
        try:
            while self._dooming:
                d = self._dooming.popleft()
                rec = self.jobs.get(d.job_id)
                if rec is None or rec.state in FINAL_STATES:
                    continue
                self._move(rec, S.CANCELLED, Reason.DEPENDENCY_NEVER_SATISFIED, now,
                           detail=d.detail())
        finally:
            self._dooming = None

    def _let_through(self, opened: list[str]) -> None:
        for job_id in opened:
            rec = self.jobs.get(job_id)
            if rec is None or rec.state != S.QUEUED:
                continue  # not submitted yet, or restored but not settled: settles later
            self.queues.push(rec.spec)
            rec.pending_reason = self.pending_news[job_id] = PendingReason.NONE
            self.version += 1

    def _state_of(self, job_id: str) -> JobState | None:
        rec = self.jobs.get(job_id)
        return None if rec is None else rec.state

    def _spec_of(self, job_id: str) -> JobSpec:
        return self.jobs[job_id].spec

    def _settle(self) -> None:
        """Put the restored QUEUED jobs through the gates, in submit order, once every
        job is restored (see restore_job)."""
        pending, self._unsettled = self._unsettled, []
        doomed: list[Doomed] = []
        for rec in sorted(pending, key=lambda r: r.spec.seq):
            if rec.state != S.QUEUED:
                continue
            d = self.gates.register(rec.spec, self._state_of)
            if d is not None:
                doomed.append(d)
                continue
            self._queue_or_park(rec)
        if doomed:
            self._doom(doomed, self.now)

    def _queue_or_park(self, rec: JobRecord) -> None:
        """A job entering QUEUED goes on its heap, or waits off the heaps if a gate says
        so (its reason published by the next tick)."""
        parked = self.gates.admit(rec.spec)
        if parked is None:
            self.queues.push(rec.spec)
        else:
            rec.pending_reason = self.pending_news[rec.spec.id] = parked

    def _touch(self, tenant: str) -> None:
        """One of the team's jobs changed what a preemption search reads."""
        self.cluster_version += 1
        self.team_touched[tenant] = self.team_touched.get(tenant, 0) + 1
        self.touched_total += 1

    def _hold(self, rec: JobRecord, alloc: Allocation, now: int, *,
              accrue: bool = True) -> None:
        alloc = {n: tuple(ix) for n, ix in sorted(alloc.items()) if ix}
        self.cap.take(alloc)
        tenant = rec.spec.tenant
        if accrue:
            self.fair.advance(tenant, now, self.running[tenant])
        self.running[tenant] += alloc_gpus(alloc)
        if rec.spec.owner is not None:
            key = (tenant, rec.spec.owner)
            self.user_held[key] = self.user_held.get(key, 0) + alloc_gpus(alloc)
        self.holders[tenant].add(rec.spec.id)
        self.holders_by_seq.pop(tenant, None)
        for n in alloc:
            self.node_jobs[n].add(rec.spec.id)
        rec.alloc = alloc
        self._picture(+1, "a", rec.spec.id, alloc)

    def _let_go(self, rec: JobRecord, now: int) -> None:
        alloc = rec.alloc or {}
        self.cap.give_back(alloc)
        tenant = rec.spec.tenant
        self.fair.advance(tenant, now, self.running[tenant])
        self.running[tenant] -= alloc_gpus(alloc)
        if rec.spec.owner is not None:
            key = (tenant, rec.spec.owner)
            left = self.user_held[key] - alloc_gpus(alloc)
            if left:
                self.user_held[key] = left
            else:  # an owner holding nothing takes no room (owners come and go)
                del self.user_held[key]
        self.holders[tenant].discard(rec.spec.id)
        self.holders_by_seq.pop(tenant, None)
        for n in alloc:
            self.node_jobs[n].discard(rec.spec.id)
        self.releases.discard(rec.spec.id)
        if rec.alloc:
            self._picture(-1, "a", rec.spec.id, rec.alloc)
        rec.alloc = None

    def _refresh_release(self, rec: JobRecord) -> None:
        ends = []
        if rec.run_start_s is not None and rec.spec.max_runtime_s is not None:
            ends.append(rec.run_start_s + rec.spec.max_runtime_s)
        if rec.grace_deadline_s is not None:
            ends.append(rec.grace_deadline_s)
        self.releases.set(rec.spec.id, min(ends) if ends else None, rec.alloc)

    # ---------------------------------------------------------------- paths
    def _preempted(self, rec: JobRecord, reason: Reason, now: int,
                   detail: dict[str, Any] | None = None) -> None:
        """The job stopped after a preemption request: count it against the cap, requeue
        with its resume pointer (the last checkpoint stands)."""
        rec.preemption_times.append(now)
        self._move(rec, S.PREEMPTED, reason, now, detail=detail)
        self._move(rec, S.QUEUED, Reason.REQUEUED, now,
                   detail={"resume_pointer": rec.resume_pointer})

    def _node_failed(self, rec: JobRecord, name: str, now: int) -> None:
        spec = rec.spec
        alloc = rec.alloc or {}
        rest = {n: ix for n, ix in alloc.items() if n != name}
        down = {"node": name}
        if (
            spec.elastic
            and rec.state != S.PLACING
            and alloc_gpus(rest) >= (spec.min_gpus or spec.gpus)
        ):
            assert rec.state is not None
            self._move(rec, rec.state, Reason.SHRUNK, now, alloc=rest,
                       detail={**down, "gpus": alloc_gpus(rest)})
            return
        if spec.checkpointable:
            self._move(rec, S.QUEUED, Reason.NODE_FAILED, now,
                       detail={**down, "resume_pointer": rec.resume_pointer})
            return
        if rec.retries < self.config.retry_budget:
            rec.retries += 1
            rec.resume_pointer = None
            rec.last_checkpoint_s = None
            self._move(rec, S.QUEUED, Reason.NODE_FAILED, now,
                       detail={**down, "retry": rec.retries, "resume_pointer": None})
            return
        self._move(rec, S.FAILED, Reason.RETRIES_EXHAUSTED, now,
                   detail={**down, "retries": rec.retries})

    def _set_health(self, name: str, health: NodeHealth) -> None:
        old = self.cap.nodes[name].health
        if old != NodeHealth.HEALTHY:
            self._picture(-1, "h", name, old.value)
        if health != NodeHealth.HEALTHY:
            self._picture(+1, "h", name, health.value)
        self.cap.set_health(name, health)
        if health == NodeHealth.HEALTHY:
            self.unhealthy.discard(name)
        else:
            self.unhealthy.add(name)
        self.version += 1
        self.cluster_version += 1

    def _drop_claims_on(self, name: str) -> None:
        head = self.claimed_nodes.get(name)
        if head is not None:
            self.drop_claim(head)

    def _never_fits(self, spec: JobSpec) -> str | None:
        """Why the job can never run (a sentence), or None. Batch jobs never use the
        interactive slice; an interactive job runs inside it or, as an ordinary job,
        outside it (never across both), so it never fits if it fits neither."""
        why = self._never_fits_in(spec, in_slice=False)
        if (why and spec.interactive and self.interactive_nodes
                and self._never_fits_in(spec, in_slice=True) is None):
            why = None
        if why is not None:
            return why
        beyond = self.beyond_limits(spec)
        if beyond is None:
            return None
        need = spec.least_gpus
        if beyond is PendingReason.QUOTA_LIMIT:
            limit = self.limit_for(spec)
            if limit < self.limit_of(spec.tenant):
                return may_not_borrow_words(need, spec.tenant, limit, self.config)
            return f"needs {need} GPUs; team {spec.tenant} may hold at most {limit}"
        return (f"needs {need} GPUs; one owner of team {spec.tenant} may hold at most "
                f"{self.tenants[spec.tenant].max_gpus_per_user} (max_gpus_per_user)")

    def beyond_limits(self, spec: JobSpec) -> PendingReason | None:
        """QuotaLimit (UserLimit) for a job larger than its team (its owner) may hold at
        all, whatever the jobs ahead of it do; None otherwise. One rule for admission
        (``_never_fits``), a cut of the quota (``_out_of_reach``) and the walk
        (``Tick._behind``)."""
        need = spec.least_gpus
        if need > self.limit_for(spec):
            return PendingReason.QUOTA_LIMIT
        cap = self.tenants[spec.tenant].max_gpus_per_user
        if cap is not None and spec.owner is not None and need > cap:
            return PendingReason.USER_LIMIT
        return None

    def _never_fits_in(self, spec: JobSpec, *, in_slice: bool) -> str | None:
        need = spec.least_gpus
        gpu_type = spec.gpu_type
        total = sum(n.gpus for name, n in self.cap.nodes.items()
                    if (name in self.interactive_nodes) == in_slice
                    and (gpu_type is None or n.gpu_type == gpu_type)) if (
            in_slice or self.interactive_nodes) else self.cap.total_gpus(gpu_type)
        kind = f" of type {gpu_type}" if gpu_type else ""
        if self.interactive_nodes:
            kind += " in the interactive slice" if in_slice else " outside the interactive slice"
        if need > total:
            return f"needs {need} GPUs; the cluster has {total}{kind}"
        if spec.gpus_per_node is not None:
            g = spec.gpus_per_node
            if g > self.cap.max_gpus_per_node(gpu_type):
                return f"needs {g} GPUs on one node; no node{kind} has that many"
            if spec.gpus % g:
                return f"{spec.gpus} GPUs is not a multiple of gpus_per_node={g}"
            nodes_needed = -(-need // g)
            wide = self._nodes_with_at_least(g, gpu_type, in_slice)
            if nodes_needed > wide:
                return (f"needs {nodes_needed} nodes with {g} GPUs each; "
                        f"the cluster has {wide}{kind}")
        return None

    def _nodes_with_at_least(self, gpus: int, gpu_type: str | None, in_slice: bool) -> int:
        """Nodes of the type inside the interactive slice (``in_slice``) or outside it with
        at least ``gpus`` GPUs: a shaped job uses exactly its shape on each node."""
        key = (gpu_type, in_slice)
        sizes = self._node_sizes.get(key)
        if sizes is None:
            sizes = sorted(
                n.gpus for n in self.cap.nodes.values()
                if (gpu_type is None or n.gpu_type == gpu_type)
                and (n.name in self.interactive_nodes) == in_slice
            )
            self._node_sizes[key] = sizes
        return len(sizes) - bisect.bisect_left(sizes, gpus)

    # ---------------------------------------------------------------- timers
    def _arm(self, at: int, kind: str, job_id: str, token: int) -> None:
        # Timers due at one instant fire in the order of their jobs' seq (then placing,
        # limit, grace for one job), not in the order they were armed: a leader rebuilt
        # from the log arms them in its restore order, and must decide the same.
        order = (self.jobs[job_id].spec.seq, _TIMER_RANK[kind])
        heapq.heappush(self._timers, (at, order, kind, job_id, token))

    def _timer_live(self, entry: tuple[int, tuple[int, int], str, str, int]) -> bool:
        _at, _seq, kind, job_id, token = entry
        rec = self.jobs[job_id]
        if kind == "grace":
            return rec.preempt_id == token and rec.state in (S.PREEMPT_REQUESTED, S.CHECKPOINTING)
        if kind == "limit":
            return rec.run_id == token and rec.state in HOLDING_STATES
        return rec.run_id == token and rec.state == S.PLACING

    # ---------------------------------------------------------------- small things
    def _flush(self) -> list[Decision]:
        out, self._out = self._out, []
        return out

    def _clock(self, now: int) -> None:
        if now < self.now:
            raise ValueError(f"time went backwards: {now} < {self.now}")
        self.now = now
        if self._unsettled:
            self._settle()

    def _rec(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id!r}") from None

    def _node(self, name: str) -> None:
        if name not in self.cap.nodes:
            raise KeyError(f"unknown node {name!r}")

    def _tenant(self, name: str) -> TenantSpec:
        try:
            return self.tenants[name]
        except KeyError:
            raise KeyError(f"unknown tenant {name!r}") from None

    # ---------------------------------------------------------------- checks (tests, debug)
    def check_invariants(self) -> None:
        """Recount everything from the job records: O(jobs + nodes), never on a hot path."""
        self.cap.check_invariants()
        per_node: dict[str, int] = {}
        running = dict.fromkeys(self.tenants, 0)
        user_held: dict[tuple[str, str], int] = {}
        queued = 0
        unsettled = {r.spec.id for r in self._unsettled}
        for rec in self.jobs.values():
            if rec.state in HOLDING_STATES:
                assert rec.alloc, rec
                n = alloc_gpus(rec.alloc)
                low = rec.spec.least_gpus
                assert low <= n <= rec.spec.gpus, (rec.spec.id, n)
                running[rec.spec.tenant] += n
                if rec.spec.owner is not None:
                    key = (rec.spec.tenant, rec.spec.owner)
                    user_held[key] = user_held.get(key, 0) + n
                for node, ix in rec.alloc.items():
                    per_node[node] = per_node.get(node, 0) + len(ix)
                    assert rec.spec.id in self.node_jobs[node]
            else:
                assert rec.alloc is None, rec
            if rec.state == S.QUEUED and (rec.spec.id in self.gates.parked
                                          or rec.spec.id in unsettled):
                assert rec.spec.id not in self.queues, rec.spec.id
            elif rec.state == S.QUEUED:
                queued += 1
                assert rec.spec.id in self.queues, rec.spec.id
            else:
                assert rec.spec.id not in self.queues, rec.spec.id
        assert queued == len(self.queues)
        assert running == self.running, (running, self.running)
        for tenant, by_seq in self.holders_by_seq.items():
            assert by_seq == sorted(self.holders[tenant],
                                    key=lambda j: self.jobs[j].spec.seq), tenant
        assert user_held == self.user_held, (user_held, self.user_held)
        assert self.leaving_jobs == {j for j, r in self.jobs.items()
                                     if r.state in LEAVING_STATES}, self.leaving_jobs
        claimed: dict[str, int] = {}
        for c in self.claims.values():
            claimed[c.tenant] = claimed.get(c.tenant, 0) + c.gpus
        counted = {t: g for t, g in self._claimed_by.items() if g}
        assert counted == claimed, (counted, claimed)
        for node, used in per_node.items():
            st = self.cap.nodes[node]
            assert used == st.gpus - st.free, (node, used, st.free)
        on_node: dict[str, set[str]] = {}
        for _end, job_id, alloc in self.releases.items():
            for node in alloc:
                on_node.setdefault(node, set()).add(job_id)
        assert self.releases.on_node == {n: frozenset(j) for n, j in on_node.items()}
