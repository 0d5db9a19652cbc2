"""Gates in front of the queues: dependencies and job arrays.

A queued job whose dependencies are not met yet, or an array task beyond its array's
``max_running``, stays *off* the fair-share heaps: the tick never sees it, so a sweep of
10,000 tasks or a pipeline of a thousand stages costs the tick nothing while it waits
(issue 19: "dependencies must not make the tick scan the queue"). Each waiting job is
indexed by what it waits for, and the event that ends the awaited job (or frees an array
slot) opens exactly the gates it concerns:

- ``awaiting[A]``: the (dependent, kind) pairs that wait for job A to end. When A ends,
  each pair is met (the end is one ``DEPENDENCY_KINDS[kind]`` accepts) or can never be
  met (the dependent is cancelled: DependencyNeverSatisfied). O(dependents of A).
- ``unmet[J]``: how many of J's pairs are still open. J is on no heap while it is > 0.
- an array's *active* tasks (queued past the gate, or holding GPUs) number at most its
  ``max_running``; the others wait in a heap by index and the lowest goes through when an
  active task ends. A task that is preempted and requeued stays active: it keeps its slot,
  so the array never runs more than ``max_running`` tasks at once.

Pure bookkeeping: the scheduler makes every state change (the one place states change is
``Scheduler._move``); these methods only say which jobs go through and which are doomed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from .states import FINAL_STATES, JobState, PendingReason
from .types import DEPENDENCY_KINDS, JobSpec


@dataclass(slots=True)
class ArrayGate:
    max_running: int | None  # None: no cap
    active: set[str] = field(default_factory=set)
    waiting: list[tuple[int, str]] = field(default_factory=list)  # heap of (index, job)

    def has_room(self) -> bool:
        return self.max_running is None or len(self.active) < self.max_running


@dataclass(frozen=True, slots=True)
class Doomed:
    """A job whose dependency on ``awaited`` (of kind ``when``) can never be met."""

    job_id: str
    awaited: str
    when: str
    ended: JobState

    def detail(self) -> dict[str, str]:
        return {"job": self.awaited, "when": self.when, "ended": str(self.ended)}


class Gates:
    def __init__(self) -> None:
        self.awaiting: dict[str, list[tuple[str, str]]] = {}
        self.unmet: dict[str, int] = {}
        self.arrays: dict[str, ArrayGate] = {}
        #: queued jobs off the heaps, with the reason they wait
        self.parked: dict[str, PendingReason] = {}

    # ------------------------------------------------------------------ registering
    def register(self, spec: JobSpec, state_of: Callable[[str], JobState | None]
                 ) -> Doomed | None:
        """Record ``spec``'s dependencies at submit (or restore). A dependency on a job that
        has ended already is met or doomed at once; one on a job not ended (or not known
        yet: the callers check that it exists) waits for it. Returns the first doomed
        dependency, if any (the job is then cancelled and nothing is recorded)."""
        open_pairs: list[tuple[str, str]] = []
        for awaited, when in spec.depends_on:
            state = state_of(awaited)
            if state in FINAL_STATES:
                assert state is not None
                if state not in DEPENDENCY_KINDS[when]:
                    return Doomed(spec.id, awaited, when, state)
                continue
            open_pairs.append((awaited, when))
        for awaited, when in open_pairs:
            self.awaiting.setdefault(awaited, []).append((spec.id, when))
        if open_pairs:
            self.unmet[spec.id] = len(open_pairs)
        if spec.array_id is not None and spec.array_id not in self.arrays:
            self.arrays[spec.array_id] = ArrayGate(spec.array_max_running)
        return None

    # ------------------------------------------------------------------ the gate
    def admit(self, spec: JobSpec) -> PendingReason | None:
        """A job enters QUEUED: None if it may go on its heap, else the reason it waits off
        the heaps (it is parked). O(log tasks)."""
        if spec.id in self.unmet:
            self.parked[spec.id] = PendingReason.DEPENDENCY
            return PendingReason.DEPENDENCY
        gate = self.arrays.get(spec.array_id) if spec.array_id is not None else None
        if gate is None or spec.id in gate.active:
            return None
        if gate.has_room():
            gate.active.add(spec.id)
            return None
        assert spec.array_index is not None
        heapq.heappush(gate.waiting, (spec.array_index, spec.id))
        self.parked[spec.id] = PendingReason.ARRAY_LIMIT
        return PendingReason.ARRAY_LIMIT

    def mark_active(self, spec: JobSpec) -> None:
        """A restored task that holds GPUs counts against its array's cap."""
        if spec.array_id is None:
            return
        gate = self.arrays.setdefault(spec.array_id, ArrayGate(spec.array_max_running))
        gate.active.add(spec.id)

    # ------------------------------------------------------------------ a job ended
    def ended(self, spec: JobSpec, state: JobState, specs: Callable[[str], JobSpec]
              ) -> tuple[list[str], list[Doomed], list[str]]:
        """``spec`` reached the final ``state``: the parked jobs that now go on their heaps
        (in this order), the jobs doomed by it, and the jobs whose dependencies are now
        met but that wait for their array's cap instead (ArrayLimit). The caller moves
        the doomed, and calls :meth:`ended` again for each once it is cancelled (a chain
        of dependents is cancelled link by link, without recursion)."""
        opened: list[str] = []
        doomed: list[Doomed] = []
        capped: list[str] = []
        self.parked.pop(spec.id, None)
        self.unmet.pop(spec.id, None)  # a parked job cancelled: its other pairs are moot
        if spec.array_id is not None:
            gate = self.arrays.get(spec.array_id)
            if gate is not None and spec.id in gate.active:
                gate.active.discard(spec.id)
                opened.extend(self._fill(gate))
        for dependent, when in self.awaiting.pop(spec.id, ()):
            if dependent not in self.unmet:
                continue  # it was cancelled, or doomed by another of its pairs
            if state not in DEPENDENCY_KINDS[when]:
                del self.unmet[dependent]
                doomed.append(Doomed(dependent, spec.id, when, state))
                continue
            self.unmet[dependent] -= 1
            if self.unmet[dependent]:
                continue
            del self.unmet[dependent]
            if self.parked.pop(dependent, None) is not None:
                # met: now through the array gate, if it is a task
                if self.admit(specs(dependent)) is None:
                    opened.append(dependent)
                else:
                    capped.append(dependent)
        return opened, doomed, capped

    def _fill(self, gate: ArrayGate) -> list[str]:
        opened: list[str] = []
        while gate.waiting and gate.has_room():
            _index, job_id = heapq.heappop(gate.waiting)
            if self.parked.get(job_id) is not PendingReason.ARRAY_LIMIT:
                continue  # cancelled while it waited (a lazy delete)
            del self.parked[job_id]
            gate.active.add(job_id)
            opened.append(job_id)
        return opened
