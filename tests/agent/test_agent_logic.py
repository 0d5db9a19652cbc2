"""The node agent's logic against a fake API, with real child processes: what it starts
and with which environment, what it reports and in which order, preemption and the grace
window, refusals, a lost network, and its own restart."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from scheduler_app.agent.checkpoint import STOPPED_EXIT_CODE
from scheduler_app.agent.client import ApiRefused
from scheduler_app.agent.daemon import AgentConfig, NodeAgent
from scheduler_app.agent.procs import ProcessId, command_argv, signal_group

from .fake_api import FakeApi

PY = sys.executable

#: A job that records its environment and process group, prints to both streams, and
#: exits with the code it is given.
ENV_SCRIPT = """
import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({"env": dict(os.environ), "pid": os.getpid(), "pgrp": os.getpgrp(),
               "ppid": os.getppid()}, f)
print("hello on stdout", flush=True)
print("hello on stderr", file=sys.stderr, flush=True)
sys.exit(int(sys.argv[2]))
"""


def demo(*args: str) -> str:
    return " ".join([PY, "-m", "scheduler_app.agent.demo_job", *args])


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def make_agent(tmp_path, api):
    made: list[NodeAgent] = []

    def make(fake: FakeApi | None = None, **config) -> NodeAgent:
        config = {"heartbeat_s": 0, "poll_s": 0, "loop_s": 0, **config}
        agent = NodeAgent(AgentConfig(node="n1", work_dir=tmp_path / "work", **config),
                          fake or api)
        made.append(agent)
        return agent

    yield make
    for agent in made:  # no job outlives its test
        for run in agent.state.runs:
            signal_group(run.pid, signal.SIGKILL)


def until(agent: NodeAgent, pred, timeout: float = 30, what: str = "") -> None:
    """Step the agent until ``pred()`` holds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or pred}")
        agent.step()
        time.sleep(0.02)


def wait_for(pred, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    return not ProcessId(pid, None, None).alive()


def test_a_placed_job_runs_with_its_gpus_and_environment_and_its_exit_code_is_reported(
    tmp_path, api, make_agent, monkeypatch
):
    monkeypatch.setenv("SCHED_AGENT_TOKEN", "gsa_secret")
    script = tmp_path / "env_job.py"
    script.write_text(ENV_SCRIPT)
    out = tmp_path / "seen.json"
    api.place(7, f"{PY} {script} {out} 3", gpus=[1, 3])
    agent = make_agent()

    until(agent, lambda: api.jobs[7].state == "FAILED", what="the exit report")

    assert api.names(7) == ["start", "log", "exit"]
    assert ("exit", 7, "failed", 3) in api.calls
    seen = json.loads(out.read_text())
    env = seen["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["JOB_ID"] == "7"
    assert env["RESUME_POINTER"] == ""
    assert Path(env["CHECKPOINT_DIR"]).is_dir()
    assert Path(env["CHECKPOINT_DIR"]) != Path(env["SCHED_CHECKPOINT_INBOX"])
    assert "SCHED_AGENT_TOKEN" not in env  # the agent's credentials stay with the agent
    # the runner (the job's parent) leads a process group of its own
    assert seen["pgrp"] == seen["ppid"] != os.getpgrp()
    run_dir = agent.job_dir(7) / "runs" / "1"
    assert "hello on stdout" in (run_dir / "stdout.log").read_text()
    assert "hello on stderr" in (run_dir / "stderr.log").read_text()
    assert "hello on stdout" in api.logs[7]["stdout"]  # the last tail, pushed at the exit


def test_a_job_that_writes_nothing_still_has_its_tail_pushed_at_its_exit(api, make_agent):
    # the tail was pushed only when the logs grew from [0, 0], so a silent job's never
    # was, and `gpuq logs` could not tell "wrote nothing" from "never ran" (found by a
    # researcher's session, 2026-12-07)
    api.place(8, f"{PY} -c pass", gpus=[0])
    agent = make_agent()

    until(agent, lambda: api.jobs[8].state == "COMPLETED", what="the exit report")

    assert api.names(8) == ["start", "log", "exit"]
    assert api.logs[8] == {"stdout": "", "stderr": ""}


def test_an_array_task_gets_its_index_and_the_array_size_in_its_environment(
    tmp_path, api, make_agent
):
    script = tmp_path / "env_job.py"
    script.write_text(ENV_SCRIPT)
    out = tmp_path / "seen.json"
    # the env the scheduler's assignments give a task (selectors.agents)
    api.place(8, f"{PY} {script} {out} 0", gpus=[0],
              env={"ARRAY_INDEX": "3", "ARRAY_COUNT": "10", "SCHED_ARRAY_ID": "5"})
    agent = make_agent()

    until(agent, lambda: api.jobs[8].state == "COMPLETED", what="the exit report")

    env = json.loads(out.read_text())["env"]
    assert (env["ARRAY_INDEX"], env["ARRAY_COUNT"], env["SCHED_ARRAY_ID"]) == ("3", "10", "5")
    assert env["JOB_ID"] == "8"


def test_checkpoints_are_forwarded_in_order_before_the_exit(api, make_agent):
    api.place(3, demo("--steps", "6", "--step-seconds", "0.05", "--checkpoint-every", "0.1"),
              gpus=[0])
    agent = make_agent()

    until(agent, lambda: api.jobs[3].state == "COMPLETED", what="completion")

    names = [n for n in api.names(3) if n != "log"]
    assert names[0] == "start" and names[-1] == "exit"
    assert set(names[1:-1]) == {"checkpoint"} and len(names) >= 3
    pointers = [p for p, _at in api.jobs[3].checkpoints]
    assert pointers[-1].endswith("step-00000006.json")
    assert pointers == sorted(pointers)
    assert ("exit", 3, "completed", 0) in api.calls
    assert all(at for _p, at in api.jobs[3].checkpoints)  # the job's own time goes along


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGUSR1])
def test_a_preemption_request_sends_the_stop_signal_acks_and_reports_the_checkpoint_then_the_exit(
    api, make_agent, stop_signal
):
    api.place(5, demo("--step-seconds", "0.05", "--checkpoint-every", "1000"), gpus=[2])
    agent = make_agent(stop_signal=stop_signal)
    until(agent, lambda: api.jobs[5].state == "RUNNING", what="the start")
    stdout = agent.job_dir(5) / "runs" / "1" / "stdout.log"
    until(agent, lambda: "step 3" in stdout.read_text(), what="a few steps")

    api.ask_to_stop(5, datetime.now(UTC) + timedelta(seconds=60))
    until(agent, lambda: api.jobs[5].state == "PREEMPTED", what="the preempted exit")

    names = [n for n in api.names(5) if n != "log"]
    assert names == ["start", "ack", "checkpoint", "exit"]
    assert ("exit", 5, "preempted", STOPPED_EXIT_CODE) in api.calls
    step = int(api.jobs[5].resume_pointer.rsplit("step-", 1)[1].split(".")[0])
    assert f"step {step}" in stdout.read_text()
    assert "stop signal: checkpoint" in stdout.read_text()


def test_a_job_that_ignores_the_stop_signal_is_killed_at_the_end_of_its_grace(
    api, make_agent, caplog
):
    api.place(9, demo("--step-seconds", "0.05", "--ignore-sigterm"), gpus=[0])
    agent = make_agent()
    until(agent, lambda: api.jobs[9].state == "RUNNING", what="the start")
    run = agent.state.current(9)
    until(agent, lambda: "step 1" in run.stdout.read_text(), what="its signal handlers")
    deadline = datetime.now(UTC) + timedelta(seconds=1.5)
    api.ask_to_stop(9, deadline)

    with caplog.at_level(logging.INFO, logger="scheduler_app.agent"):
        until(agent, lambda: gone(run.pid), what="the kill")
        until(agent, lambda: not run.live, what="the end of the run")

    assert run.killed == "grace"
    assert run.killed_at >= deadline.timestamp()  # not a moment before its grace ended
    assert "ignored" in run.stdout.read_text()
    # the scheduler's grace timer ends the run: the agent acked, and reports no exit
    assert [n for n in api.names(9) if n != "log"] == ["start", "ack"]
    assert "grace window over" in caplog.text


def test_a_refused_start_kills_the_job_and_reports_nothing_more(api, make_agent):
    api.place(4, demo("--step-seconds", "0.05"), gpus=[0])
    api.refuse_next["start"] = ApiRefused(409, "job_queued", "job", "placing timed out")
    agent = make_agent()
    agent.step()
    api.jobs[4].state = "QUEUED"  # what the refusal said: the placing timeout requeued it
    run = agent.state.current(4)

    until(agent, lambda: not run.live, what="the kill")

    assert run.killed == "abandoned"
    assert [n for n in api.names(4) if n != "log"] == ["start"]


def test_a_report_refused_as_bad_input_is_logged_as_such(api, make_agent, caplog):
    """A 400 was logged as "the scheduler has moved on", which it had not: the report was
    bad (found by a user session, 2026-12-07). The log says so, with the server's words."""
    api.place(5, demo("--steps", "2", "--step-seconds", "0.01"), gpus=[0])
    api.refuse_next["exit"] = ApiRefused(400, "max_length", "exit_code", "Ensure this ...")
    agent = make_agent()
    with caplog.at_level(logging.INFO, logger="scheduler_app.agent"):
        until(agent, lambda: "exit" in api.names(5), what="the exit report")
        agent.step()
    assert "job 5: exit report refused as bad input, dropped: 400 max_length: Ensure " \
           "this ... (field exit_code)" in caplog.text
    assert "moved on" not in caplog.text


def test_a_start_another_gang_node_confirmed_first_goes_on(api, make_agent):
    api.place(6, demo("--steps", "3", "--step-seconds", "0.05"), gpus=[0])
    api.jobs[6].state = "PLACING"
    api.refuse_next["start"] = ApiRefused(409, "job_running", "job", "job is RUNNING")
    agent = make_agent()
    agent.step()
    api.jobs[6].state = "RUNNING"  # what the other node's confirmation did
    run = agent.state.current(6)

    until(agent, lambda: api.jobs[6].state == "COMPLETED", what="completion")

    assert run.confirmed and run.killed is None and run.exit_code == 0
    assert ("exit", 6, "completed", 0) in api.calls


def test_a_running_gang_still_listed_to_start_is_kept_not_restarted(api, make_agent):
    # A gang stays in "start" while its other nodes confirm: the agent running its part
    # of that placement (the same run key) keeps it.
    api.place(7, demo("--steps", "40", "--step-seconds", "0.05"), gpus=[0], gang_nodes=2)
    agent = make_agent()
    until(agent, lambda: api.jobs[7].state == "RUNNING", what="the start")
    run = agent.state.current(7)
    for _ in range(5):
        agent.step()
    assert agent.state.current(7) is run and run.live and run.killed is None
    assert api.names(7).count("start") == 1


def test_a_gang_another_node_confirmed_before_this_one_polled_is_started_here(
        api, make_agent):
    api.place(9, demo("--steps", "3", "--step-seconds", "0.05"), gpus=[1], gang_nodes=2)
    api.jobs[9].state = "RUNNING"  # the other node confirmed before this agent's first poll
    api.refuse_next["start"] = ApiRefused(409, "job_running", "job", "job is RUNNING")
    agent = make_agent()
    agent.step()
    run = agent.state.current(9)
    assert run is not None and run.gpus == [1]  # its part runs here too

    until(agent, lambda: api.jobs[9].state == "COMPLETED", what="completion")
    assert agent.state.current(9) is run  # one run of this placement: not started again
    assert run.exit_code == 0


def test_a_job_the_scheduler_no_longer_lists_is_killed_without_a_report(api, make_agent):
    api.place(8, demo("--step-seconds", "0.05"), gpus=[0])
    agent = make_agent()
    until(agent, lambda: api.jobs[8].state == "RUNNING", what="the start")
    run = agent.state.current(8)

    api.jobs[8].state = "QUEUED"  # e.g. the node was marked down and the job requeued
    until(agent, lambda: not run.live, what="the kill")

    assert gone(run.pid)
    assert run.killed == "abandoned"
    assert [n for n in api.names(8) if n != "log"] == ["start"]


def test_a_job_placed_here_again_gets_a_new_run_and_the_old_one_is_killed(api, make_agent):
    api.place(2, demo("--step-seconds", "0.05"), gpus=[0])
    agent = make_agent()
    until(agent, lambda: api.jobs[2].state == "RUNNING", what="the start")
    first = agent.state.current(2)

    api.place(2, demo("--step-seconds", "0.05"), gpus=[1], resume="/ckpt/step-00000009.json")
    until(agent, lambda: api.jobs[2].state == "RUNNING", what="the second start")

    second = agent.state.current(2)
    assert second.number == 2 and second.gpus == [1]
    until(agent, lambda: gone(first.pid), what="the first run's end")
    until(agent, lambda: "resuming from step 9" in second.stdout.read_text(),
          what="the resume")


def test_every_report_names_its_run_and_an_earlier_runs_queued_ones_are_dropped(
        api, make_agent):
    """An exit queued while the API was away, delivered once the job was placed here
    again, failed the new run before it started with an agent that did not drop it
    (an agent author's session, 2026-12-07). The reference agent drops the earlier run's
    queued reports when the job is placed here again, and names its run in every report,
    so that the server refuses any that slips through (409 stale_run: the API's tests)."""
    api.place(12, demo("--steps", "1", "--step-seconds", "0.01"), gpus=[0])
    agent = make_agent()
    agent.step()  # starts and confirms it
    first = agent.state.current(12)
    api.unreachable = True
    until(agent, lambda: not first.live, what="the first run's exit, the API away")
    assert [op["op"] for op in first.outbox][-1] == "exit"
    # meanwhile the node was marked down, the job requeued and placed here again
    api.place(12, demo("--step-seconds", "0.05"), gpus=[1])
    api.unreachable = False
    until(agent, lambda: api.jobs[12].state == "RUNNING", what="the second run's start")
    for _ in range(5):
        agent.step()
    assert api.jobs[12].state == "RUNNING" and agent.state.current(12).live
    reports = [(name, run) for name, _job, run in api.reported_runs]
    assert [r for r in reports if r[0] == "start"] == [("start", "placement-1"),
                                                        ("start", "placement-2")]
    # the first run's queued checkpoint and exit were dropped, and every report named its run
    assert [r for r in reports if r[1] != "placement-2"] == [("start", "placement-1")]


def test_reports_wait_for_the_api_and_go_out_in_order(api, make_agent):
    api.place(11, demo("--steps", "4", "--step-seconds", "0.05", "--checkpoint-every", "0.1"),
              gpus=[0])
    agent = make_agent()
    agent.step()  # starts the job and confirms it
    run = agent.state.current(11)
    api.unreachable = True
    until(agent, lambda: not run.live, what="the exit, while the API is away")
    queued = [op["op"] for op in run.outbox]
    assert queued[-1] == "exit" and "checkpoint" in queued

    api.unreachable = False
    until(agent, lambda: api.jobs[11].state == "COMPLETED", what="delivery")

    names = [n for n in api.names(11) if n != "log"]
    assert names == ["start", *["checkpoint"] * (len(names) - 2), "exit"]


def test_a_restarted_agent_adopts_its_running_job_and_reports_its_exit_code(
    tmp_path, api, make_agent
):
    api.place(12, demo("--steps", "30", "--step-seconds", "0.1"), gpus=[0])
    first = make_agent()
    until(first, lambda: api.jobs[12].state == "RUNNING", what="the start")
    pid = first.state.current(12).pid
    del first  # the agent dies: its job does not

    second = make_agent()
    assert second.state.current(12).pid == pid and not gone(pid)
    until(second, lambda: api.jobs[12].state == "COMPLETED", what="completion")

    assert api.names(12).count("start") == 1
    assert ("exit", 12, "completed", 0) in api.calls
    assert len(list((second.job_dir(12) / "runs").iterdir())) == 1  # never started twice


def test_a_restarted_agent_reports_a_job_whose_process_vanished_as_lost(
    api, make_agent, caplog
):
    api.place(13, demo("--step-seconds", "0.05"), gpus=[0])
    first = make_agent()
    until(first, lambda: api.jobs[13].state == "RUNNING", what="the start")
    run = first.state.current(13)
    first.popens.clear()  # the agent is gone: no one waits for the process
    signal_group(run.pid, signal.SIGKILL)  # and the job dies with no exit record
    wait_for(lambda: gone(run.pid), "the kill")
    del first

    with caplog.at_level(logging.INFO, logger="scheduler_app.agent"):
        second = make_agent()
        until(second, lambda: api.jobs[13].state == "FAILED", what="the lost report")

    assert ("exit", 13, "failed", None) in api.calls
    assert "lost" in caplog.text


def test_a_recycled_pid_is_not_mistaken_for_the_job(tmp_path, api, make_agent):
    api.place(14, demo("--step-seconds", "0.05"), gpus=[0])
    first = make_agent()
    until(first, lambda: api.jobs[14].state == "RUNNING", what="the start")
    real_pid = first.state.current(14).pid
    state_file = tmp_path / "work" / "agent-state.json"
    saved = json.loads(state_file.read_text())
    # the state file names a live process (this test) started at another time
    saved["runs"][0]["pid"], saved["runs"][0]["ticks"] = os.getpid(), 1
    state_file.write_text(json.dumps(saved))
    first.popens.clear()
    del first
    try:
        second = make_agent()
        until(second, lambda: api.jobs[14].state == "FAILED", what="the lost report")
        assert ("exit", 14, "failed", None) in api.calls
    finally:
        signal_group(real_pid, signal.SIGKILL)


def test_after_losing_the_api_a_node_found_down_registers_again(api, make_agent):
    agent = make_agent()
    agent.step()
    assert api.names().count("register") == 1  # at start
    api.node["health"] = "down"  # an operator's decision, while the agent is fine
    agent.step()
    agent.step()
    assert api.names().count("register") == 1  # the agent stays out of it

    api.unreachable = True
    agent.step()  # the heartbeat fails: the scheduler may mark the node down meanwhile
    api.unreachable = False
    agent.step()

    assert api.names().count("register") == 2
    assert api.node["health"] == "healthy"


def test_registration_keeps_the_shape_the_scheduler_has_unless_told(api, make_agent):
    make_agent().step()
    assert api.node["gpu_count"] == 4 and api.node["pod"] == "p"
    api.node["health"] = "down"
    agent = make_agent(gpus=8, pod="q")
    agent.step()
    assert api.node["gpu_count"] == 8 and api.node["pod"] == "q"


def test_the_grace_deadline_is_read_on_the_servers_clock(api, make_agent):
    api.place(15, demo("--step-seconds", "0.05", "--ignore-sigterm"), gpus=[0])
    agent = make_agent()
    until(agent, lambda: api.jobs[15].state == "RUNNING", what="the start")
    api.server_skew_s = 3600.0  # the server's clock is an hour ahead of ours
    api.ask_to_stop(15, datetime.now(UTC) + timedelta(hours=1, seconds=30))
    now = time.time()
    agent.step()

    run = agent.state.current(15)
    assert now + 20 < run.deadline < now + 40  # 30 s from now on our clock, not 1 h 30 s


def test_stopping_with_kill_jobs_on_exit_kills_and_reports_them(api, make_agent):
    api.place(16, demo("--step-seconds", "0.05"), gpus=[0])
    agent = make_agent(kill_jobs_on_exit=True)
    until(agent, lambda: api.jobs[16].state == "RUNNING", what="the start")
    pid = agent.state.current(16).pid

    agent.shutdown()

    assert gone(pid)
    assert ("exit", 16, "failed", 137) in api.calls


def test_a_job_the_agent_never_started_is_logged_not_touched(api, make_agent, caplog):
    api.place(17, "true", gpus=[0])
    api.jobs[17].state = "RUNNING"
    with caplog.at_level(logging.WARNING, logger="scheduler_app.agent"):
        make_agent().step()
    assert "never started on this node" in caplog.text
    assert api.names(17) == []


def test_a_job_without_a_command_fails_at_once(api, make_agent):
    api.place(18, "  ", gpus=[0])
    agent = make_agent()
    until(agent, lambda: api.jobs[18].state == "FAILED", what="the failure")
    assert ("exit", 18, "failed", None) in api.calls


def test_a_job_that_cannot_be_started_fails_with_the_reason_and_the_agent_goes_on(
    api, make_agent, caplog
):
    # one argument past Linux's MAX_ARG_STRLEN (128 KiB): exec fails with E2BIG; the agent
    # used to die of it (and of the same job on every next node)
    api.place(30, demo("--steps", "40", "--step-seconds", "0.05"), gpus=[0])
    api.place(31, "echo " + "\u00ff" * 70_000, gpus=[1])
    api.place(32, demo("--steps", "2", "--step-seconds", "0.01"), gpus=[2])
    agent = make_agent()

    with caplog.at_level(logging.ERROR, logger="scheduler_app.agent"):
        until(agent, lambda: api.jobs[31].state == "FAILED", what="the failure report")
    until(agent, lambda: api.jobs[32].state == "COMPLETED", what="the next job's exit")

    assert ("exit", 31, "failed", None) in api.calls
    assert "start" not in api.names(31)
    assert "Argument list too long" in api.logs[31]["stderr"]  # the reason, in its log
    assert "job 31: cannot start it" in caplog.text
    assert api.jobs[30].state == "RUNNING" and agent.state.current(30).live


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("python train.py --lr 3e-4", ["python", "train.py", "--lr", "3e-4"]),
        ("python 'my script.py'", ["python", "my script.py"]),
        ("cd /data && exec python train.py", ["/bin/sh", "-c", "cd /data && exec python train.py"]),
        ("LR=1 python train.py", ["/bin/sh", "-c", "LR=1 python train.py"]),
        ("python train.py > out.txt", ["/bin/sh", "-c", "python train.py > out.txt"]),
    ],
)
def test_simple_commands_run_without_a_shell(command, argv):
    assert command_argv(command) == argv
