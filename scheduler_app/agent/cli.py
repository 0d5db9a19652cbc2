"""The agent's command line, shared by ``python -m scheduler_app.agent`` (no Django) and
``manage.py node_agent`` (the same options)::

    python -m scheduler_app.agent --node pod-a-n01 --api http://sched:8000 \\
        --token-file /etc/gpu-agent/token --work-dir /var/lib/gpu-agent

The token comes from ``--token``, ``--token-file`` or ``$SCHED_AGENT_TOKEN`` (prefer the
last two: a command line is visible to every user of the node). ``--pod``, ``--gpus``,
``--gpu-type`` and ``--rail`` describe the node when it registers; left out, the agent
keeps what the scheduler already has for it. SIGTERM or Ctrl-C stops the agent and
leaves its jobs running: started again on the same work directory, it adopts them.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from .client import ApiClient
from .daemon import AgentConfig, NodeAgent
from .procs import signal_number

TOKEN_ENV = "SCHED_AGENT_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", required=True, help="this node's name in the scheduler")
    parser.add_argument("--api", required=True,
                        help="the scheduler's URL, e.g. http://sched:8000 (or .../api/v1)")
    parser.add_argument("--token", default=None,
                        help=f"the node's agent token (or --token-file, or ${TOKEN_ENV})")
    parser.add_argument("--token-file", default=None, help="a file holding the token")
    parser.add_argument("--work-dir", default=None,
                        help="state file, job logs and checkpoints (default "
                             "./agent-<node>); one per node, kept across restarts")
    parser.add_argument("--pod", default=None, help="the node's pod (topology)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs on this node")
    parser.add_argument("--gpu-type", default=None, help="e.g. H100")
    parser.add_argument("--rail", type=int, default=None, help="network rail")
    parser.add_argument("--heartbeat", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between heartbeats (keep well under the scheduler's "
                             "SCHEDULER_HEARTBEAT_TIMEOUT_S; default 5)")
    parser.add_argument("--poll", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between two reads of the assignments (default 2)")
    parser.add_argument("--loop", type=float, default=0.5, metavar="SECONDS",
                        help="seconds between two looks at the processes (default 0.5)")
    parser.add_argument("--stop-signal", default="TERM",
                        help="the signal that asks a job to checkpoint and stop (default TERM)")
    parser.add_argument("--default-grace", type=float, default=120.0, metavar="SECONDS",
                        help="grace window when the scheduler states no deadline")
    parser.add_argument("--log-tail-bytes", type=int, default=8192,
                        help="bytes of each log the API gets (default 8192, at most 16384)")
    parser.add_argument("--job-cwd", default=None,
                        help="working directory of the jobs (default: each job's directory "
                             "in the work directory)")
    parser.add_argument("--demo-jobs", action="store_true",
                        help="run every job as the demo training job (demo clusters, whose "
                             "jobs' commands name scripts that do not exist)")
    parser.add_argument("--kill-jobs-on-exit", action="store_true",
                        help="kill the jobs when the agent stops, and report them (demos, "
                             "CI); by default they keep running and a restart adopts them")
    parser.add_argument("--no-register", action="store_true",
                        help="do not register at start (heartbeat only)")


def read_token(options: dict[str, Any]) -> str:
    if options.get("token"):
        return str(options["token"]).strip()
    if options.get("token_file"):
        return Path(options["token_file"]).read_text().strip()
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise SystemExit(f"no agent token: pass --token, --token-file or set ${TOKEN_ENV}")
    return token


def build(options: dict[str, Any]) -> NodeAgent:
    """The agent the options describe (options as argparse or a Django command gives)."""
    node = str(options["node"])
    config = AgentConfig(
        node=node,
        work_dir=Path(options.get("work_dir") or f"agent-{node}").resolve(),
        pod=options.get("pod"),
        gpus=options.get("gpus"),
        gpu_type=options.get("gpu_type"),
        rail=options.get("rail"),
        heartbeat_s=float(options.get("heartbeat") or 5.0),
        poll_s=float(options.get("poll") or 2.0),
        loop_s=float(options.get("loop") or 0.5),
        stop_signal=signal_number(str(options.get("stop_signal") or "TERM")),
        default_grace_s=float(options.get("default_grace") or 120.0),
        log_tail_bytes=max(256, min(16384, int(options.get("log_tail_bytes") or 8192))),
        demo_jobs=bool(options.get("demo_jobs")),
        job_cwd=Path(options["job_cwd"]).resolve() if options.get("job_cwd") else None,
        kill_jobs_on_exit=bool(options.get("kill_jobs_on_exit")),
        register=not options.get("no_register"),
    )
    return NodeAgent(config, ApiClient(str(options["api"]), read_token(options)))


def run(agent: NodeAgent) -> None:
    """Run until SIGTERM or SIGINT (the jobs go on running unless --kill-jobs-on-exit)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("scheduler_app.agent").info("signal %s: stopping", signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        agent.run_forever(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_app.agent",
        description="The GPU scheduler's node agent (docs/agent-protocol.md).")
    add_arguments(parser)
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s agent[{args.node}] %(message)s")
    run(build(vars(args)))
    return 0
