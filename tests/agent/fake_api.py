"""An in-memory stand-in for the scheduler's agent API: the job states an agent sees and
the moves its reports make (the same table as ``services.agents``), every call recorded,
and switches to make it unreachable or refuse a call."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler_app.agent.client import ApiRefused, ApiUnavailable

HOLDING = ("PLACING", "RUNNING", "PREEMPT_REQUESTED", "CHECKPOINTING")
EXITS = {
    "completed": {"RUNNING", "PREEMPT_REQUESTED", "CHECKPOINTING"},
    "failed": {"PLACING", "RUNNING", "PREEMPT_REQUESTED", "CHECKPOINTING"},
    "preempted": {"PREEMPT_REQUESTED", "CHECKPOINTING"},
}
TO = {"completed": "COMPLETED", "failed": "FAILED", "preempted": "PREEMPTED"}


@dataclass
class FakeJob:
    id: int
    command: str
    gpus: list[int]
    state: str = "PLACING"
    resume_pointer: str = ""
    grace_deadline: str | None = None
    checkpoints: list[tuple[str, str | None]] = field(default_factory=list)
    gang_nodes: int = 1  # nodes of its placement (the real selector lists running gangs)
    run: str = ""  # the placement's key, as the real selector gives it
    env: dict[str, str] = field(default_factory=dict)  # the selector's env (an array's)


class FakeApi:
    def __init__(self, node: str = "n1", gpus: int = 4) -> None:
        self.node_name = node
        self.node: dict[str, Any] = {"name": node, "pod": "p", "gpu_count": gpus,
                                     "gpu_type": "", "rail": 0, "health": "healthy"}
        self.jobs: dict[int, FakeJob] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.unreachable = False
        self.refuse_next: dict[str, ApiRefused] = {}  # call name -> error, once
        self.server_skew_s = 0.0
        self.logs: dict[int, dict[str, str]] = {}
        self.placements = 0
        #: (report, job id, the run it named) of every report
        self.reported_runs: list[tuple[str, int, str | None]] = []

    # ------------------------------------------------------------------ test controls
    def place(self, job_id: int, command: str, gpus: list[int], resume: str = "",
              gang_nodes: int = 1, env: dict[str, str] | None = None) -> FakeJob:
        self.placements += 1
        job = FakeJob(job_id, command, gpus, resume_pointer=resume, gang_nodes=gang_nodes,
                      run=f"placement-{self.placements}", env=dict(env or {}))
        self.jobs[job_id] = job
        return job

    def ask_to_stop(self, job_id: int, deadline: datetime) -> None:
        job = self.jobs[job_id]
        assert job.state == "RUNNING", job.state
        job.state = "PREEMPT_REQUESTED"
        job.grace_deadline = deadline.astimezone(UTC).isoformat()

    def names(self, job_id: int | None = None) -> list[str]:
        """The calls made (about one job), without their arguments."""
        return [c[0] for c in self.calls if job_id is None or (len(c) > 1 and c[1] == job_id)]

    # ------------------------------------------------------------------ the API
    def _enter(self, name: str, *args: Any) -> None:
        if self.unreachable:
            raise ApiUnavailable(f"{name}: connection refused")
        error = self.refuse_next.pop(name, None)
        self.calls.append((name, *args))
        if error is not None:
            raise error

    def register(self, **shape: Any) -> dict[str, Any]:
        self._enter("register", shape["name"])
        self.node.update(gpu_count=shape["gpus"], pod=shape["pod"])
        if self.node["health"] == "down":
            self.node["health"] = "healthy"
        return {"node": dict(self.node), "token": None}

    def heartbeat(self) -> dict[str, Any]:
        self._enter("heartbeat")
        return dict(self.node)

    def assignments(self) -> dict[str, Any]:
        self._enter("assignments")
        start, preempt, running = [], [], []
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            if job.state == "PLACING" or (job.state == "RUNNING" and job.gang_nodes > 1):
                start.append({"job_id": job.id, "name": f"job-{job.id}", "command": job.command,
                              "gpus": {self.node_name: job.gpus}, "run": job.run,
                              "resume_pointer": job.resume_pointer, "env": dict(job.env)})
            if job.state in ("PREEMPT_REQUESTED", "CHECKPOINTING"):
                preempt.append({"job_id": job.id, "state": job.state,
                                "grace_deadline": job.grace_deadline})
            if job.state in HOLDING[1:]:
                running.append(job.id)
        return {"start": start, "preempt": preempt, "running": running}

    def _job(self, job_id: int, allowed: set[str] | tuple[str, ...]) -> FakeJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ApiRefused(404, "not_found", "job", "no such job")
        if job.state not in allowed:
            raise ApiRefused(409, f"job_{job.state.lower()}", "job", f"job is {job.state}")
        return job

    def _run(self, name: str, job_id: int, run: str | None) -> None:
        """The server's stale-run rule: a report naming another placement is a 409."""
        self.reported_runs.append((name, job_id, run))
        job = self.jobs.get(job_id)
        if run is not None and job is not None and run != job.run:
            raise ApiRefused(409, "stale_run", "run", f"report of {run}, job is at {job.run}")

    def confirm_start(self, job_id: int, *, run: str | None = None) -> dict[str, Any]:
        self._enter("start", job_id)
        self._run("start", job_id, run)
        self._job(job_id, {"PLACING"}).state = "RUNNING"
        return {}

    def report_checkpoint(self, job_id: int, *, resume_pointer: str,
                          checkpoint_at: str | None = None,
                          run: str | None = None) -> dict[str, Any]:
        self._enter("checkpoint", job_id, resume_pointer)
        self._run("checkpoint", job_id, run)
        job = self._job(job_id, HOLDING[1:])
        job.checkpoints.append((resume_pointer, checkpoint_at))
        job.resume_pointer = resume_pointer
        return {}

    def ack_preempt(self, job_id: int, *, run: str | None = None) -> dict[str, Any]:
        self._enter("ack", job_id)
        self._run("ack", job_id, run)
        self._job(job_id, {"PREEMPT_REQUESTED"}).state = "CHECKPOINTING"
        return {}

    def report_exit(self, job_id: int, *, outcome: str, exit_code: int | None = None,
                    run: str | None = None) -> dict[str, Any]:
        self._enter("exit", job_id, outcome, exit_code)
        self._run("exit", job_id, run)
        self._job(job_id, EXITS[outcome]).state = TO[outcome]
        return {}

    def push_log(self, job_id: int, *, stdout: str, stderr: str) -> dict[str, Any]:
        self._enter("log", job_id)
        self.logs[job_id] = {"stdout": stdout, "stderr": stderr}
        return {}
