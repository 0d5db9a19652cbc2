"""End to end, with real processes on this machine: the API server, the scheduler loop and
two node agents running the demo training job (``tests/agent/stack.py``).

The cluster: two 4-GPU nodes; team ``research`` guarantees nothing and may borrow 8, team
``prod`` is entitled to 8. Research's checkpointable job runs beside a research job that
cannot checkpoint (so it is protected, and fills the other node); when prod asks for a
whole node, the checkpointable job is the one preempted.

Select them with ``pytest -m e2e``; the whole file takes about a minute.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime

import pytest

from tests.production.procs import poll

from .stack import Stack, demo_command, first_log, migrated_template, run_dirs, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEAMS = [("research", 0, 8), ("prod", 8, 0)]
NODES = [("node-a", "pod-1", 4), ("node-b", "pod-1", 4)]
_RESUMED = re.compile(r"resuming from step (\d+)")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return migrated_template(tmp_path_factory.mktemp("agent-e2e-db"))


@pytest.fixture
def stack(tmp_path, template):
    started = Stack(tmp_path, template)
    started.setup(tenants=TEAMS, nodes=NODES)
    try:
        started.server()
        yield started
    finally:
        started.stop_all()


def up(stack: Stack) -> dict[str, object]:
    """Both agents (each registers its node), then the scheduler."""
    agents = {node: stack.agent(node) for node, _pod, _gpus in NODES}
    for node, proc in agents.items():
        proc.wait_for(lambda line, node=node: f"registered node {node}" in line, 60)
    stack.scheduler()
    return agents


def where(detail: dict) -> str:
    (node,) = detail["allocation"]
    return node


def other(node: str) -> str:
    return "node-b" if node == "node-a" else "node-a"


def last_pointer_step(detail: dict) -> int:
    return int(re.search(r"step-(\d+)", detail["resume_pointer"]).group(1))


def rows(detail: dict) -> list[tuple[str, str]]:
    return [(h["to_state"], h["reason"]) for h in detail["history"]]


def checkpointable(stack: Stack, name: str, *extra: str, grace_s: int = 8) -> int:
    return stack.submit(
        "research", name, 2, demo_command("--step-seconds", "0.2", "--checkpoint-every", "1",
                                          *extra),
        checkpointable=True, checkpoint_interval_s=1, checkpoint_time_s=grace_s)


def filler(stack: Stack) -> int:
    """A research job that cannot checkpoint: protected, it holds a whole node (research is
    guaranteed nothing: a job nothing may preempt borrows only with a short limit)."""
    return stack.submit("research", "filler", 4, demo_command("--step-seconds", "0.5"),
                        gpus_per_node=4, max_runtime_s=3600)


def test_a_preempted_job_checkpoints_on_sigterm_and_resumes_on_the_other_node(stack):
    agents = up(stack)
    job = checkpointable(stack, "train")
    fill = filler(stack)
    first = stack.wait_job(job, lambda d: d["state"] == "RUNNING", what="the first start")
    node = where(first)
    gpus = first["allocation"][node]
    stack.wait_job(fill, lambda d: d["state"] == "RUNNING" and where(d) == other(node))

    # it runs where it was placed, on the GPUs it was given, and checkpoints
    log1 = wait_text(lambda: first_log(stack, node, job), "checkpoint at")
    assert f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))} node={node}" in log1
    assert "starting from step 0" in log1
    stack.wait_job(job, lambda d: d["last_checkpoint_at"] and d["resume_pointer"])

    # an entitled team needs a whole node: the checkpointable job makes room
    head = stack.submit("prod", "eval", 4, demo_command("--step-seconds", "0.2"),
                        gpus_per_node=4)
    stopped = stack.wait_job(job, lambda d: d["state"] == "QUEUED"
                             and ("PREEMPTED", "Preempted") in rows(d), what="the preemption")
    history = rows(stopped)
    asked = history.index(("PREEMPT_REQUESTED", "PreemptRequested"))
    acked = history.index(("CHECKPOINTING", "CheckpointStarted"))
    gone = history.index(("PREEMPTED", "Preempted"))
    # a periodic checkpoint may land between the request and the agent's ack
    assert set(history[asked + 1:acked]) <= {("PREEMPT_REQUESTED", "Checkpointed")}
    # the checkpoint written on SIGTERM (and maybe a periodic one the signal overtook)
    assert history[acked + 1:gone]
    assert set(history[acked + 1:gone]) == {("CHECKPOINTING", "Checkpointed")}
    assert history[gone + 1] == ("QUEUED", "Requeued")
    exit_row = stopped["history"][gone]
    assert exit_row["detail"]["exit_code"] == 75 and exit_row["actor_name"] == node
    assert str(head) in str(stopped["history"][asked]["detail"])
    stopped_at = last_pointer_step(stopped)
    log1 = wait_text(lambda: first_log(stack, node, job), "stop signal")
    assert f"stop signal: checkpoint at step {stopped_at}" in log1
    stack.wait_job(head, lambda d: d["state"] == "RUNNING" and where(d) == node)

    # the other node frees up: the job resumes there from its pointer
    stack.api("POST", f"/jobs/{fill}/cancel/", {"why": "make room"})
    second = stack.wait_job(job, lambda d: d["state"] == "RUNNING", what="the resume")
    assert where(second) == other(node)
    log2 = wait_text(lambda: first_log(stack, other(node), job),
                     f"step {stopped_at + 1}\n")
    assert f"resuming from step {stopped_at}" in log2
    assert "starting from step 0" not in log2
    gpus2 = ",".join(map(str, second["allocation"][other(node)]))
    assert f"CUDA_VISIBLE_DEVICES={gpus2} node={other(node)}" in log2
    # the cancelled filler was killed by its agent, which reported nothing for it
    fill_rows = stack.job(fill)["history"]
    assert fill_rows[-1]["to_state"] == "CANCELLED"
    assert not any(r["actor"] == "agent" and r["to_state"] in ("COMPLETED", "FAILED")
                   for r in fill_rows)

    # the API serves the tail of the job's log, as its current node's agent sent it
    tail = poll(lambda: (t := stack.api("GET", f"/jobs/{job}/log/"))["node"] == other(node)
                and f"resuming from step {stopped_at}" in t["stdout"] and t, 30,
                what="the log tail")
    assert tail["at"] is not None
    assert agents  # both agents ran the whole story


def test_a_job_that_ignores_sigterm_is_killed_at_the_end_of_its_grace(stack):
    agents = up(stack)
    job = checkpointable(stack, "stubborn", "--ignore-sigterm", grace_s=3)
    fill = filler(stack)
    first = stack.wait_job(job, lambda d: d["state"] == "RUNNING" and d["resume_pointer"])
    node = where(first)
    stack.wait_job(fill, lambda d: d["state"] == "RUNNING")
    pid = int(re.search(r"pid=(\d+)", wait_text(
        lambda: first_log(stack, node, job), "pid=")).group(1))

    stack.submit("prod", "eval", 4, demo_command("--step-seconds", "0.2"), gpus_per_node=4)
    done = stack.wait_job(job, lambda d: ("PREEMPTED", "GraceExpired") in rows(d),
                          what="the grace expiry")

    history = rows(done)
    asked = history.index(("PREEMPT_REQUESTED", "PreemptRequested"))
    assert history[asked + 1] == ("CHECKPOINTING", "CheckpointStarted")
    assert ("PREEMPTED", "GraceExpired") in history[asked + 2:]
    deadline = _epoch(done["history"][asked]["at"]) + 3
    # the agent killed it, not before the end of its grace
    _i, killed_at, _line = agents[node].wait_for(lambda line: "grace window over" in line, 30)
    assert killed_at >= deadline
    poll(lambda: not _alive(pid), 30, what="the job's process to be gone")
    log = (run_dirs(stack, node, job)[0] / "stdout.log").read_text()
    ignored_at = log.index("ignored")
    assert "step" in log[ignored_at:]  # it went on working through its grace window
    assert not any(h["actor"] == "agent" and h["to_state"] == "PREEMPTED"
                   for h in done["history"])


def test_a_killed_agent_marks_its_node_down_and_its_job_resumes_elsewhere(stack):
    agents = up(stack)
    job = checkpointable(stack, "train")
    first = stack.wait_job(job, lambda d: d["state"] == "RUNNING" and d["resume_pointer"])
    node = where(first)
    old = run_dirs(stack, node, job)[0] / "stdout.log"
    old_pid = int(re.search(r"pid=(\d+)", wait_text(lambda: old, "pid=")).group(1))

    agents[node].kill9()  # the agent dies; its job's process does not (it is orphaned)
    poll(lambda: stack.node(node)["health"] == "down", 60, what=f"{node} marked down")
    moved = stack.wait_job(job, lambda d: d["state"] == "RUNNING" and where(d) == other(node),
                           what="the resume on the other node")
    assert ("QUEUED", "NodeFailed") in rows(moved)
    down_at = max(i for i, r in enumerate(rows(moved)) if r == ("QUEUED", "NodeFailed"))
    resumed_from = _steps_before(moved["history"][:down_at])
    log2 = wait_text(lambda: first_log(stack, other(node), job),
                     f"step {resumed_from + 1}\n")
    assert f"resuming from step {resumed_from}" in log2

    # the agent comes back (through manage.py this time), registers its node again, and
    # kills the orphan the scheduler has moved elsewhere, reporting nothing for it
    assert _alive(old_pid)
    token = stack.tmp / f"token-{node}"
    back = stack.start(f"node_agent[{node}]", [
        sys.executable, "manage.py", "node_agent",
        "--node", node, "--api", stack.url, "--token-file", str(token),
        "--work-dir", str(stack.work_dir(node)), "--heartbeat", "0.5", "--poll", "0.3",
        "--loop", "0.1"])
    back.wait_for(lambda line: "no longer runs it on this node" in line, 60)
    poll(lambda: not _alive(old_pid), 30, what="the orphan's end")
    poll(lambda: stack.node(node)["health"] == "healthy", 30, what=f"{node} up again")
    after = stack.job(job)
    assert after["state"] == "RUNNING" and where(after) == other(node)
    assert not any(h["actor_name"] == node for h in after["history"][down_at:])


def _steps_before(history: list[dict]) -> int:
    """The step of the last checkpoint reported before the node went down."""
    pointers = [h["detail"]["resume_pointer"] for h in history if h["reason"] == "Checkpointed"]
    return int(re.search(r"step-(\d+)", pointers[-1]).group(1))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
