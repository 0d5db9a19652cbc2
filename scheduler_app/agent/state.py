"""What the agent must not forget across its own restart, in one JSON file in its work
directory (written atomically after every change): each job run it started (the
process's pid and start time, its GPUs, what it was asked, how it ended) and the reports
not yet delivered, in order.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

VERSION = 1


@dataclass
class Run:
    """One run of a job on this node: started by this agent (or an earlier one on the same
    work directory), ended when its process exited."""

    job_id: int
    number: int  # this node's run number of the job: 1, 2, ... (its directory)
    pid: int  # the runner's pid: also the process group id
    ticks: int | None  # the runner's start time (clock ticks since boot)
    boot: str | None  # the boot id when it started
    started_at: float
    gpus: list[int]
    dir: str
    confirmed: bool = False  # the scheduler knows it runs (our start, or another node's)
    placement: str | None = None  # the scheduler's run key of the placement it started for
    stop_sent_at: float | None = None  # the stop signal (preemption request) was sent
    deadline: float | None = None  # local clock: SIGKILL at this instant
    killed: str | None = None  # why we killed it: "grace", "abandoned", "shutdown"
    killed_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    outcome: str | None = None
    #: calls not yet delivered, in order: {"op": "start" | "checkpoint" | "ack" | "exit", ...}
    outbox: list[dict[str, Any]] = field(default_factory=list)
    log_sizes: list[int] = field(default_factory=lambda: [0, 0])

    @property
    def live(self) -> bool:
        return self.ended_at is None

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def exit_file(self) -> Path:
        return self.path / "exit.json"

    @property
    def stdout(self) -> Path:
        return self.path / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.path / "stderr.log"


@dataclass
class AgentState:
    node: str
    runs: list[Run] = field(default_factory=list)
    #: job id -> runs started here so far (run numbers; and "this node has seen the job")
    started: dict[int, int] = field(default_factory=dict)

    def current(self, job_id: int) -> Run | None:
        """The job's latest run here, if the agent still holds a record of it."""
        mine = [r for r in self.runs if r.job_id == job_id]
        return max(mine, key=lambda r: r.number) if mine else None

    # ------------------------------------------------------------------ persistence
    def save(self, path: Path) -> None:
        data = {"version": VERSION, "node": self.node,
                "runs": [asdict(r) for r in self.runs],
                "started": {str(k): v for k, v in self.started.items()}}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, node: str) -> AgentState:
        if not path.exists():
            return cls(node=node)
        data = json.loads(path.read_text())
        if data.get("version") != VERSION:
            raise ValueError(f"{path}: state version {data.get('version')!r}, expected {VERSION}")
        if data.get("node") != node:
            raise ValueError(f"{path} belongs to node {data.get('node')!r}, not {node!r}: "
                             "give each node's agent its own work directory")
        known = {f.name for f in fields(Run)}
        runs = [Run(**{k: v for k, v in r.items() if k in known}) for r in data["runs"]]
        started = {int(k): int(v) for k, v in data.get("started", {}).items()}
        return cls(node=node, runs=runs, started=started)
