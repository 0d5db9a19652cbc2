"""How a simulated job behaves on its GPUs (SCENARIOS.md, "Simulated job behaviour").

Pure arithmetic on integer seconds, no scheduler: the engine asks a :class:`SimJob` when
its next checkpoint or its completion falls, what its progress is at an instant, and how
much a finished run lost. Kept apart from the event loop so it can be tested on its own.

Model:
- a run starts when the agent confirms it (RUNNING); a job's second and later runs first
  spend ``restart_s`` reloading, then progress at wall speed from the resume pointer;
- checkpoints fall every ``checkpoint_interval_s`` of progress counted from where the run
  resumed; each moves the resume pointer (a job that is not checkpointable has none and
  always restarts from zero);
- asked to stop, a checkpointable job freezes its progress at once and saves it; the
  checkpoint is written ``checkpoint_time_s`` later (or half the default grace when it
  declares none), then the job exits;
- completion when progress reaches ``runtime_s``.

Loss accounting (``gpu_s_lost``): GPU-seconds spent reloading after an interruption, plus,
for a run interrupted by a preemption or a node failure, the GPU-seconds after the reload
that did not end up in the resume pointer (work to redo and the time spent writing the
preemption checkpoint). Each part is charged to the cause of its interruption, so the
metric ``gpu_hours_lost_to_preemption`` counts only what preemptions cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scenario import JobDef

PREEMPTION = "preemption"
FAILURE = "failure"


@dataclass(slots=True)
class SimJob:
    job: JobDef
    pointer: int = 0  # resume pointer: seconds of useful work saved in the last checkpoint
    runs_started: int = 0
    # the current run (segment), valid while ``active``
    active: bool = False
    token: int = 0  # bumped whenever a run ends: events of older runs are stale
    run_start: int = 0  # when this segment started progressing or reloading
    reload: int = 0  # reload seconds still ahead of progress at run_start
    base: int = 0  # progress at run_start (after the reload)
    gpus: int = 0
    frozen_at: int | None = None  # asked to stop and checkpointing: progress stops here
    reload_cause: str | None = None  # what the reload of this run is charged to
    next_cause: str | None = None  # the cause charged for the next run's reload
    lost_preemption: int = 0
    lost_failure: int = 0

    # --- timeline of a run -------------------------------------------------------------

    def start_run(self, now: int, gpus: int) -> None:
        self.active = True
        self.run_start = now
        self.reload = self.job.spec.restart_s if self.runs_started > 0 else 0
        self.reload_cause = self.next_cause if self.reload else None
        self.base = self.pointer
        self.gpus = gpus
        self.frozen_at = None
        self.runs_started += 1

    def progress(self, now: int) -> int:
        if not self.active:
            return self.pointer
        t = now if self.frozen_at is None else min(now, self.frozen_at)
        return min(self.job.runtime_s, self.base + max(0, t - self.run_start - self.reload))

    def completion_s(self) -> int:
        return self.run_start + self.reload + (self.job.runtime_s - self.base)

    def next_checkpoint_s(self, now: int) -> int | None:
        """The first periodic checkpoint strictly after ``now`` that precedes completion."""
        spec = self.job.spec
        interval = spec.checkpoint_interval_s
        if not spec.checkpointable or not interval:
            return None
        done = max(0, now - self.run_start - self.reload)  # progress made in this segment
        k = done // interval + 1
        at_progress = self.base + k * interval
        if at_progress >= self.job.runtime_s:
            return None
        return self.run_start + self.reload + k * interval

    def checkpoint_write_s(self, default_grace_s: int) -> int:
        declared = self.job.spec.checkpoint_time_s
        return declared if declared is not None else default_grace_s // 2

    # --- changes -------------------------------------------------------------------------

    def checkpoint(self, now: int) -> int:
        """A checkpoint finished at ``now``: the resume pointer moves to the progress."""
        if self.job.spec.checkpointable:
            self.pointer = max(self.pointer, self.progress(now))
        return self.pointer

    def freeze(self, now: int) -> None:
        if self.frozen_at is None:
            self.frozen_at = now

    def shrink(self, now: int, gpus: int) -> None:
        """An elastic job loses GPUs but keeps going: a new segment, no reload, no loss."""
        self.charge_reload(now)
        elapsed = max(0, now - self.run_start)
        self.base = self.progress(now)
        self.reload = max(0, self.reload - elapsed)
        self.run_start = now
        self.gpus = gpus

    def end_run(self, now: int, interrupted_by: str | None) -> None:
        """The run left its GPUs. ``interrupted_by``: PREEMPTION, FAILURE or None (it
        completed, failed for good, or was cancelled: nothing is redone)."""
        self.charge_reload(now)
        if interrupted_by is not None:
            if not self.job.spec.checkpointable:
                self.pointer = 0  # restarts from scratch
            productive = max(0, now - self.run_start - self.reload)
            kept = max(0, self.pointer - self.base)
            wasted = max(0, productive - kept) * self.gpus
            self._charge(interrupted_by, wasted)
            self.next_cause = interrupted_by
        self.active = False
        self.frozen_at = None
        self.token += 1

    def charge_reload(self, now: int) -> None:
        """Charge the reload time spent in this segment so far (and no more later)."""
        spent = min(self.reload, max(0, now - self.run_start))
        if spent and self.reload_cause is not None:
            self._charge(self.reload_cause, spent * self.gpus)
        self.reload -= spent
        self.run_start += spent

    def _charge(self, cause: str, gpu_s: int) -> None:
        if cause == PREEMPTION:
            self.lost_preemption += gpu_s
        else:
            self.lost_failure += gpu_s
