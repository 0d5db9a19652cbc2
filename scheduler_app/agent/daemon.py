"""The node agent's loop: turn the scheduler's assignments into processes on this node,
and report what the processes do.

One :meth:`NodeAgent.step`, every ``loop_s`` (half a second):

1. watch the processes: forward the checkpoints they reported (their inbox), kill a job
   whose grace window is over, and turn an exit into a report;
2. heartbeat (every ``heartbeat_s``), with the tails of the jobs' logs; register again
   when the node was marked down while the agent could not reach the API;
3. poll the assignments (every ``poll_s``) and reconcile: start what is placed here, send
   the stop signal to what is asked to stop, kill what the scheduler no longer runs here;
4. deliver the reports waiting in each run's outbox, in order (start, checkpoints,
   acknowledgement, exit); a network failure keeps them for the next step;
5. save the state file.

The rules that make it safe to restart, crash or lose the network (docs/agent-protocol.md):

- every report is queued in the state file before it is sent, and sent until the server
  answers: 2xx (done) or 4xx (the server moved on: dropped, and logged);
- the agent never kills a job because it restarts; a restarted agent re-adopts each run
  of its state file whose process (pid *and* start time) still runs, and reports a run
  whose process is gone without an exit record as lost (failed, or preempted if it was
  being preempted), never silently;
- it kills (SIGKILL, no report) a job the scheduler no longer lists for this node: the
  scheduler has already requeued it (node marked down, placing timeout) and its GPUs may
  be someone else's now.

No Django here: this package runs on nodes that have only Python.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from . import procs
from .checkpoint import INBOX_ENV
from .client import ApiRefused, ApiUnavailable
from .state import AgentState, Run

log = logging.getLogger("scheduler_app.agent")

#: A confirm refused with one of these codes was confirmed already (another node of the
#: gang, or our own earlier request whose answer was lost): the run goes on.
ALREADY_STARTED = frozenset({"job_running", "job_preempt_requested", "job_checkpointing"})
#: The directory holding the ``scheduler_app`` package.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: Environment variables the agent never passes to a job (its own credentials).
PRIVATE_ENV = ("SCHED_AGENT_TOKEN",)


class AgentApi(Protocol):
    """What the agent needs of the API (``client.ApiClient``; tests pass a fake)."""

    server_skew_s: float

    def register(self, *, name: str, pod: str, gpus: int, gpu_type: str = "",
                 rail: int = 0) -> dict[str, Any]: ...
    def heartbeat(self) -> dict[str, Any]: ...
    def assignments(self) -> dict[str, Any]: ...
    def confirm_start(self, job_id: int, *, run: str | None = None) -> dict[str, Any]: ...
    def report_checkpoint(self, job_id: int, *, resume_pointer: str,
                          checkpoint_at: str | None = None,
                          run: str | None = None) -> dict[str, Any]: ...
    def ack_preempt(self, job_id: int, *, run: str | None = None) -> dict[str, Any]: ...
    def report_exit(self, job_id: int, *, outcome: str, exit_code: int | None = None,
                    run: str | None = None) -> dict[str, Any]: ...
    def push_log(self, job_id: int, *, stdout: str, stderr: str) -> dict[str, Any]: ...


@dataclass
class AgentConfig:
    node: str
    work_dir: Path
    pod: str | None = None  # None: keep what the scheduler has for the node
    gpus: int | None = None
    gpu_type: str | None = None
    rail: int | None = None
    heartbeat_s: float = 5.0
    poll_s: float = 2.0
    loop_s: float = 0.5
    stop_signal: int = signal.SIGTERM
    #: grace window when the scheduler states no deadline
    default_grace_s: float = 120.0
    #: the server's clock is trusted as ours unless they differ by more than this
    max_clock_skew_s: float = 2.0
    log_tail_bytes: int = 8192
    #: run every job as the demo training job (the demo cluster's commands are fictions)
    demo_jobs: bool = False
    job_cwd: Path | None = None  # default: the job's directory in the work directory
    kill_jobs_on_exit: bool = False
    register: bool = True


class NodeAgent:
    def __init__(
        self, config: AgentConfig, api: AgentApi, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.api = api
        self.clock = clock
        self.work = Path(config.work_dir)
        (self.work / "jobs").mkdir(parents=True, exist_ok=True)
        self.state_path = self.work / "agent-state.json"
        self.state = AgentState.load(self.state_path, config.node)
        self.popens: dict[tuple[int, int], subprocess.Popen] = {}  # our own children
        self.registered = not config.register
        self.last_beat: float | None = None  # last heartbeat attempt
        self.last_beat_ok: float | None = None
        self.last_poll: float | None = None
        self.contact_lost = True  # until the first heartbeat gets through
        self.backoff_until = 0.0
        self.warned: set[int] = set()
        self.warned_down = False
        #: the jobs the last assignments listed (None before the first poll)
        self.listed: set[int] | None = None
        self.dirty = False
        self.node_info: dict[str, Any] = {}
        for run in self.state.runs:
            if run.live:
                log.info("job %s: run %s (pid %s) from before the restart: %s", run.job_id,
                         run.number, run.pid,
                         "still running, adopted" if self._process(run).alive()
                         else "its process is gone")

    # ------------------------------------------------------------------ the loop
    def run_forever(self, stop: threading.Event) -> None:
        log.info("agent for node %s: work directory %s, API polled every %s s, "
                 "heartbeat every %s s", self.config.node, self.work, self.config.poll_s,
                 self.config.heartbeat_s)
        try:
            while not stop.is_set():
                self.step()
                stop.wait(self.config.loop_s)
        finally:
            self.shutdown()

    def step(self) -> None:
        now = self.clock()
        self.watch(now)
        if now >= self.backoff_until:
            if self.last_beat is None or now - self.last_beat >= self.config.heartbeat_s:
                self.beat(now)
            if self.registered and (
                self.last_poll is None or now - self.last_poll >= self.config.poll_s
            ):
                self.poll(now)
            self.flush()
        self.forget_finished()
        self.save()

    def shutdown(self) -> None:
        """Leave the jobs running (a restarted agent adopts them), unless asked to kill
        them; either way, save what must be reported."""
        if self.config.kill_jobs_on_exit:
            for run in self.live_runs():
                self._kill(run, "shutdown")
            deadline = time.monotonic() + 5
            while any(self._process_alive(r) for r in self.live_runs()) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            self.watch(self.clock())
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the outbox is saved for the next start
                log.warning("could not deliver the last reports", exc_info=True)
        self.dirty = True
        self.save()
        log.info("agent for node %s stopped; %s job(s) left running", self.config.node,
                 sum(1 for _ in self.live_runs()))

    # ------------------------------------------------------------------ 1. processes
    def live_runs(self) -> list[Run]:
        return [r for r in self.state.runs if r.live]

    def _process(self, run: Run) -> procs.ProcessId:
        return procs.ProcessId(run.pid, run.ticks, run.boot)

    def _process_alive(self, run: Run) -> bool:
        popen = self.popens.get((run.job_id, run.number))
        if popen is not None:
            return popen.poll() is None  # also reaps it: a zombie is not alive
        return self._process(run).alive()

    def watch(self, now: float) -> None:
        for run in self.live_runs():
            alive = self._process_alive(run)
            # after the liveness check: what a job reported before it exited is there now
            self.drain_inbox(run)
            if alive:
                if run.deadline is not None and now >= run.deadline and run.killed is None:
                    log.warning("job %s: grace window over, killed (SIGKILL); the "
                                "scheduler's grace timer ends the run", run.job_id)
                    self._kill(run, "grace")
                continue
            self.ended(run, now)

    def ended(self, run: Run, now: float) -> None:
        self.popens.pop((run.job_id, run.number), None)
        record = procs.read_exit(run.exit_file)
        run.ended_at = now
        self.dirty = True
        if record is not None:
            run.exit_code = int(record["exit_code"])
        elif run.killed is not None:
            run.exit_code = 128 + signal.SIGKILL
        if run.killed in ("abandoned", "grace") and record is None:
            # the scheduler decided already (requeued; or its grace timer fires): no report
            log.info("job %s: run %s ended (killed: %s)", run.job_id, run.number, run.killed)
            return
        if run.killed == "abandoned":
            return
        if record is None and run.killed is None:
            run.outcome = "preempted" if run.stop_sent_at else "failed"
            log.error("job %s: run %s lost: its process (pid %s) is gone and left no exit "
                      "record (killed from outside, or the node rebooted); reporting %s",
                      run.job_id, run.number, run.pid, run.outcome)
        elif run.stop_sent_at is not None:
            run.outcome = "completed" if run.exit_code == 0 else "preempted"
        else:
            run.outcome = "completed" if run.exit_code == 0 else "failed"
        if record is not None or run.killed is not None:
            log.info("job %s: exited with code %s: %s", run.job_id, run.exit_code, run.outcome)
        self.push_log(run, final=True)
        run.outbox.append({"op": "exit", "outcome": run.outcome, "exit_code": run.exit_code})

    def drain_inbox(self, run: Run) -> None:
        inbox = self.job_dir(run.job_id) / "inbox"
        try:
            names = sorted(p.name for p in inbox.iterdir()
                           if p.suffix == ".json" and not p.name.startswith("."))
        except OSError:
            return
        for name in names:
            path = inbox / name
            try:
                report = json.loads(path.read_text())
                pointer = str(report["resume_pointer"])
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("job %s: unreadable checkpoint report %s, ignored", run.job_id, name)
                path.unlink(missing_ok=True)
                continue
            if run.killed != "abandoned":
                run.outbox.append({"op": "checkpoint", "pointer": pointer,
                                   "at": report.get("checkpoint_at")})
                log.info("job %s: checkpoint %s", run.job_id, pointer)
            self.dirty = True
            self.save()  # queued durably before the file goes
            path.unlink(missing_ok=True)

    def _kill(self, run: Run, why: str) -> None:
        procs.signal_group(run.pid, signal.SIGKILL)
        if run.killed is None or why == "abandoned":
            run.killed = why
        run.killed_at = self.clock()
        self.dirty = True

    def abandon(self, run: Run, why: str) -> None:
        """The scheduler no longer runs this job here: kill it, report nothing more."""
        dropped = [op["op"] for op in run.outbox]
        run.outbox.clear()
        if run.live:
            log.warning("job %s: %s; killing run %s (pid %s)%s", run.job_id, why, run.number,
                        run.pid, f", dropping reports {dropped}" if dropped else "")
            self._kill(run, "abandoned")
        elif dropped:
            log.info("job %s: %s; dropping reports %s", run.job_id, why, dropped)
        self.dirty = True

    # ------------------------------------------------------------------ 2. heartbeat
    def beat(self, now: float) -> None:
        self.last_beat = now
        gap = self.last_beat_ok is not None and now - self.last_beat_ok > max(
            3 * self.config.heartbeat_s, 10)
        try:
            node = self.api.heartbeat()
        except ApiUnavailable as error:
            self._unavailable("heartbeat", error)
            return
        except ApiRefused as error:
            log.error("heartbeat refused: %s (is the token revoked?)", error)
            return
        self.node_info = node
        if not self.registered or (node.get("health") == "down" and (self.contact_lost or gap)):
            self.do_register(node)
        elif node.get("health") == "down" and not self.warned_down:
            log.warning("node %s is down (an operator's decision: the agent stays out of "
                        "it, and registering again keeps it down; an operator marks the "
                        "node up to bring it back)", self.config.node)
            self.warned_down = True
        if node.get("health") != "down":
            self.warned_down = False
        self.last_beat_ok = now
        self.contact_lost = False
        for run in self.state.runs:
            self.push_log(run)

    def do_register(self, node: dict[str, Any]) -> None:
        c = self.config
        shape = {
            "name": c.node,
            "pod": c.pod if c.pod is not None else node.get("pod", ""),
            "gpus": c.gpus if c.gpus is not None else int(node.get("gpu_count") or 0),
            "gpu_type": c.gpu_type if c.gpu_type is not None else node.get("gpu_type", ""),
            "rail": c.rail if c.rail is not None else int(node.get("rail") or 0),
        }
        try:
            answer = self.api.register(**shape)
        except ApiUnavailable as error:
            self._unavailable("register", error)
            return
        except ApiRefused as error:
            # e.g. a new GPU count while jobs hold GPUs here: keep running as the node is
            log.error("registration refused: %s", error)
            self.registered = True
            return
        self.registered = True
        health = (answer.get("node") or {}).get("health", "?")
        log.info("registered node %s (%s GPUs, pod %s): %s", c.node, shape["gpus"],
                 shape["pod"], health)

    def push_log(self, run: Run, *, final: bool = False) -> None:
        """Send the tails of the run's stdout and stderr if they grew, and at the run's
        end (``final``) even if it wrote nothing, so that the server knows such a run ran
        (best effort: the full logs stay on the node)."""
        if run.killed == "abandoned" or not run.path.exists():
            return
        if not final and not run.live:
            return
        sizes = [_size(run.stdout), _size(run.stderr)]
        if sizes == run.log_sizes and not (final and sizes == [0, 0]):
            return  # (at the end, an empty log is sent once: it was never sent before)
        n = self.config.log_tail_bytes
        try:
            self.api.push_log(run.job_id, stdout=_tail(run.stdout, n), stderr=_tail(run.stderr, n))
        except ApiUnavailable:
            return
        except ApiRefused as error:
            log.debug("job %s: log tail refused: %s", run.job_id, error)
        run.log_sizes = sizes
        self.dirty = True

    # ------------------------------------------------------------------ 3. assignments
    def poll(self, now: float) -> None:
        self.last_poll = now
        try:
            todo = self.api.assignments()
        except ApiUnavailable as error:
            self._unavailable("assignments", error)
            return
        except ApiRefused as error:
            log.error("assignments refused: %s", error)
            return
        self.reconcile(todo, now)

    def reconcile(self, todo: dict[str, Any], now: float) -> None:
        start = {int(item["job_id"]): item for item in todo.get("start", [])}
        preempt = {int(item["job_id"]): item for item in todo.get("preempt", [])}
        running = {int(j) for j in todo.get("running", [])}
        listed = set(start) | set(preempt) | running
        self.listed = listed
        for run in self.live_runs():
            if run.job_id not in listed and run.killed != "abandoned":
                self.abandon(run, "the scheduler no longer runs it on this node")
        for job_id, item in sorted(start.items()):
            run = self.state.current(job_id)
            if run is not None and item.get("run") is not None and run.placement == item["run"]:
                # this placement runs (or ran) here already: a gang stays listed while its
                # other nodes confirm, and a finished part is reported, not restarted
                continue
            if run is not None and run.live and run.killed != "abandoned":
                if not run.confirmed:
                    continue  # ours, its confirmation is on its way
                self.abandon(run, "placed here again (a new run)")
            elif run is not None and run.outbox:
                self.abandon(run, "placed here again (a new run)")
            self.start(item, now)
        for job_id in sorted(running | set(preempt)):
            run = self.state.current(job_id)
            if run is None:
                self._warn_unknown(job_id)
                continue
            if not run.confirmed:
                run.confirmed = True  # someone confirmed it: our confirm is moot
                run.outbox = [op for op in run.outbox if op["op"] != "start"]
                self.dirty = True
        for job_id, item in sorted(preempt.items()):
            run = self.state.current(job_id)
            if run is not None and run.live and run.stop_sent_at is None and run.killed is None:
                self.stop(run, item, now)

    def _warn_unknown(self, job_id: int) -> None:
        if job_id in self.warned:
            return
        self.warned.add(job_id)
        if job_id in self.state.started:
            log.error("job %s: the scheduler says it runs here, but this agent has no record "
                      "of its run any more", job_id)
        else:
            log.warning("job %s: the scheduler says it runs here, but it was never started "
                        "on this node (a gang whose start another node confirmed first?)",
                        job_id)

    def start(self, item: dict[str, Any], now: float) -> Run:
        job_id = int(item["job_id"])
        number = self.state.started.get(job_id, 0) + 1
        self.state.started[job_id] = number
        job_dir = self.job_dir(job_id)
        run_dir = job_dir / "runs" / str(number)
        inbox = job_dir / "inbox"
        checkpoints = job_dir / "checkpoints"
        for folder in (run_dir, checkpoints):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(inbox, ignore_errors=True)  # reports of an earlier run are stale
        inbox.mkdir()
        gpus = sorted(int(i) for i in (item.get("gpus") or {}).get(self.config.node, []))
        command = str(item.get("command") or "")
        resume = str(item.get("resume_pointer") or "")
        env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
        env.update({str(k): str(v) for k, v in (item.get("env") or {}).items()})
        env.update({
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpus),
            "JOB_ID": str(job_id),
            "SCHED_JOB_ID": str(job_id),
            "SCHED_JOB_NAME": str(item.get("name") or ""),
            "SCHED_JOB_COMMAND": command,
            "SCHED_NODE": self.config.node,
            "SCHED_RUN": str(number),
            "RESUME_POINTER": resume,
            "CHECKPOINT_DIR": str(checkpoints),
            INBOX_ENV: str(inbox),
        })
        run = Run(job_id=job_id, number=number, pid=0, ticks=None, boot=None, started_at=now,
                  gpus=gpus, dir=str(run_dir), placement=item.get("run"))
        self.state.runs.append(run)
        self.dirty = True
        if self.config.demo_jobs:
            argv = [sys.executable, "-m", "scheduler_app.agent.demo_job", "--from-command"]
            # importable from the job's directory even when the agent is not installed
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
        elif command.strip():
            argv = procs.command_argv(command)
        else:
            return self.not_started(run, now, "no command to run")
        try:
            popen, pid = procs.spawn(
                argv=argv, env=env, cwd=self.config.job_cwd or job_dir,
                stdout=run.stdout, stderr=run.stderr, exit_file=run.exit_file,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            # e.g. E2BIG (an argument or the environment past the kernel's limits), a
            # missing working directory, a NUL in the environment: this job fails, the
            # agent and the node's other jobs go on
            return self.not_started(run, now, f"cannot start it: {error!r}")
        run.pid, run.ticks, run.boot = pid.pid, pid.ticks, pid.boot
        run.outbox.append({"op": "start"})
        self.popens[(job_id, number)] = popen
        self.save()  # at once: a crash from here on must not forget the process
        log.info("job %s: started run %s (pid %s) on GPUs %s%s", job_id, number, pid.pid,
                 run.gpus, f", resuming from {resume}" if resume else "")
        return run

    def not_started(self, run: Run, now: float, reason: str) -> Run:
        """The run's process could not be started: report the job failed (no exit code,
        nothing ran), with the reason in its log on this node and in its log tail."""
        log.error("job %s: %s; reporting it failed", run.job_id, reason)
        try:
            with open(run.stderr, "a", encoding="utf-8", errors="replace") as err:
                err.write(f"agent: job {run.job_id} not started on {self.config.node}: "
                          f"{reason}\n")
        except OSError:
            log.warning("job %s: could not write the reason to its log", run.job_id)
        run.ended_at, run.outcome = now, "failed"
        self.push_log(run, final=True)
        run.outbox.append({"op": "exit", "outcome": "failed", "exit_code": None})
        self.dirty = True
        self.save()
        return run

    def stop(self, run: Run, item: dict[str, Any], now: float) -> None:
        """A preemption request: the stop signal now, SIGKILL at the deadline."""
        deadline = _epoch(item.get("grace_deadline"))
        if deadline is None:
            deadline = now + self.config.default_grace_s
        elif abs(self.api.server_skew_s) > self.config.max_clock_skew_s:
            deadline -= self.api.server_skew_s  # the server's instant on our clock
        run.deadline = deadline
        run.stop_sent_at = now
        run.confirmed = True
        procs.signal_group(run.pid, self.config.stop_signal)
        run.outbox.append({"op": "ack"})
        self.dirty = True
        log.info("job %s: asked to stop: %s sent, %.1f s to checkpoint and exit", run.job_id,
                 signal.Signals(self.config.stop_signal).name, deadline - now)

    # ------------------------------------------------------------------ 4. reports
    def flush(self) -> None:
        for run in sorted(self.state.runs, key=lambda r: (r.job_id, r.number)):
            while run.outbox:
                op = run.outbox[0]
                try:
                    self.send(run, op)
                except ApiUnavailable as error:
                    self._unavailable(op["op"], error)
                    return
                except ApiRefused as error:
                    self.refused(run, op, error)
                if run.outbox and run.outbox[0] is op:
                    run.outbox.pop(0)
                self.dirty = True

    def send(self, run: Run, op: dict[str, Any]) -> None:
        kind = op["op"]
        # every report names the placement it is about: one of an earlier run, delivered
        # once the job is placed here again, is refused instead of moving the new run
        key = run.placement
        if kind == "start":
            self.api.confirm_start(run.job_id, run=key)
            run.confirmed = True
        elif kind == "checkpoint":
            self.api.report_checkpoint(run.job_id, resume_pointer=op["pointer"],
                                       checkpoint_at=op.get("at"), run=key)
        elif kind == "ack":
            self.api.ack_preempt(run.job_id, run=key)
        elif kind == "exit":
            self.api.report_exit(run.job_id, outcome=op["outcome"], exit_code=op["exit_code"],
                                 run=key)
            log.info("job %s: reported %s (exit code %s)", run.job_id, op["outcome"],
                     op["exit_code"])
        else:
            log.error("job %s: unknown report %r dropped", run.job_id, op)

    def refused(self, run: Run, op: dict[str, Any], error: ApiRefused) -> None:
        kind = op["op"]
        if kind == "start":
            if error.status == 409 and error.code in ALREADY_STARTED:
                run.confirmed = True
                return
            run.outbox.remove(op)
            self.abandon(run, f"its start was refused ({error})")
        elif kind == "checkpoint" and error.field == "checkpoint_at" and op.get("at"):
            # our clock and the server's disagree: let the server stamp it
            op["at"] = None
            try:
                self.send(run, op)
            except ApiRefused as again:
                log.warning("job %s: checkpoint refused: %s", run.job_id, again)
        elif error.status == 400:
            # not the scheduler moving on: this report itself was bad (a bug here, or a
            # server that checks more): say what the server said, loudly
            log.error("job %s: %s report refused as bad input, dropped: %s%s", run.job_id,
                      kind, error, f" (field {error.field})" if error.field else "")
        else:
            log.info("job %s: %s refused (the scheduler has moved on): %s", run.job_id,
                     kind, error)

    def _unavailable(self, what: str, error: ApiUnavailable) -> None:
        self.contact_lost = True
        if error.retry_after_s:
            self.backoff_until = self.clock() + error.retry_after_s
        log.warning("%s: API unavailable (%s); retrying", what, error)

    # ------------------------------------------------------------------ 5. bookkeeping
    def forget_finished(self) -> None:
        """Drop the runs that ended, were reported and that the scheduler no longer
        lists (a run killed at the end of its grace is listed until the scheduler's timer
        fires: it stays known until then)."""
        if self.listed is None:
            return
        listed = self.listed
        keep = [r for r in self.state.runs if r.live or r.outbox or r.job_id in listed]
        if len(keep) != len(self.state.runs):
            self.state.runs = keep
            self.dirty = True
        if len(self.state.started) > 10_000:  # remember the most recent jobs only
            for job_id in sorted(self.state.started)[:-10_000]:
                del self.state.started[job_id]

    def save(self) -> None:
        if self.dirty:
            self.state.save(self.state_path)
            self.dirty = False

    def job_dir(self, job_id: int) -> Path:
        return self.work / "jobs" / str(job_id)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            data = f.read(n)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").replace("\x00", "")
    if len(data) == n and size > n:
        text = text.split("\n", 1)[-1]  # a whole first line, not half of one
    return text


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
