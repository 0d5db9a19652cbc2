"""``manage.py demo_real_agents``: real node agents for a few nodes of the demo cluster.

    python manage.py demo_real_agents                       # 2 idle nodes, until Ctrl-C
    python manage.py demo_real_agents --nodes pod-c-n15,pod-c-n16 --api http://127.0.0.1:8000
    python manage.py demo_real_agents --print               # the command lines only

Issues an agent token for each node (revoked again when it stops), then runs one agent
process per node (``python -m scheduler_app.agent``) against the API: jobs placed on these
nodes become real processes (the demo training job: the demo's commands name scripts that
do not exist), are preempted with SIGTERM, checkpoint and resume. Run the web server and
the scheduler beside it, and the simulated agents for the other nodes::

    python manage.py demo_agents --skip-nodes pod-c-n15,pod-c-n16

Ctrl-C stops the agents, which kill their jobs and report them (``--kill-jobs-on-exit``:
a demo leaves no stray process behind).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler_app.api.models import ApiToken
from scheduler_app.api.tokens import token_issue, token_revoke
from scheduler_app.models import Allocation, Node


class Command(BaseCommand):
    help = "Run real node agents (real processes) for a few nodes of the demo cluster."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", default="",
                            help="comma-separated node names (default: the last --count "
                                 "nodes that hold no job)")
        parser.add_argument("--count", type=int, default=2,
                            help="how many nodes, when --nodes is not given (default 2)")
        parser.add_argument("--api", default="http://127.0.0.1:8000",
                            help="the API server the agents talk to")
        parser.add_argument("--work-dir", default=str(Path(settings.BASE_DIR) / "demo-agents"),
                            help="the agents' work directories and token files")
        parser.add_argument("--heartbeat", type=float, default=2.0)
        parser.add_argument("--print", dest="print_only", action="store_true",
                            help="issue the tokens and print the command lines; run nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        nodes = self._nodes(options)
        work = Path(options["work_dir"]).resolve()
        work.mkdir(parents=True, exist_ok=True)
        tokens: list[ApiToken] = []
        commands: dict[str, list[str]] = {}
        for node in nodes:
            token, key = token_issue(node=node, name="demo_real_agents")
            tokens.append(token)
            key_file = work / f"{node.name}.token"
            key_file.write_text(key)
            key_file.chmod(0o600)
            commands[node.name] = [
                sys.executable, "-m", "scheduler_app.agent", "--node", node.name,
                "--api", options["api"], "--token-file", str(key_file),
                "--work-dir", str(work / node.name), "--heartbeat", str(options["heartbeat"]),
                "--demo-jobs", "--kill-jobs-on-exit",
            ]
        skip = ",".join(n.name for n in nodes)
        if options["print_only"]:
            for argv in commands.values():
                self.stdout.write(shlex.join(argv))
            self.stdout.write(f"# simulated agents for the rest: manage.py demo_agents "
                              f"--skip-nodes {skip}")
            return
        self.stdout.write(f"real agents for {skip} (work directory {work}); run "
                          f"`manage.py demo_agents --skip-nodes {skip}` for the others")
        stop = threading.Event()
        previous = {s: signal.signal(s, lambda *_: stop.set())
                    for s in (signal.SIGINT, signal.SIGTERM)}
        agents = {name: subprocess.Popen(argv, cwd=settings.BASE_DIR)
                  for name, argv in commands.items()}
        try:
            while not stop.wait(1):
                for name, agent in agents.items():
                    if agent.poll() is not None:
                        self.stderr.write(f"the agent of {name} exited ({agent.returncode})")
                        stop.set()
        finally:
            for agent in agents.values():
                if agent.poll() is None:
                    agent.send_signal(signal.SIGTERM)
            for agent in agents.values():
                try:
                    agent.wait(15)
                except subprocess.TimeoutExpired:
                    agent.kill()
            for token in tokens:
                token_revoke(token=token)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _nodes(self, options: dict[str, Any]) -> list[Node]:
        if options["nodes"]:
            names = [n for n in options["nodes"].split(",") if n]
            found = {n.name: n for n in Node.objects.filter(name__in=names)}
            missing = [n for n in names if n not in found]
            if missing:
                raise CommandError(f"no such node: {', '.join(missing)} (seed the demo first)")
            return [found[n] for n in names]
        # the last nodes, those that hold no job first: the seeded jobs never ran as
        # processes, so a real agent could only watch them (it did not start them)
        busy = set(Allocation.objects.filter(end__isnull=True).values_list("node_id", flat=True))
        nodes = sorted(Node.objects.order_by("-name"), key=lambda n: n.pk in busy)
        if not nodes:
            raise CommandError("no nodes: run `manage.py seed_demo` first")
        return sorted(nodes[: options["count"]], key=lambda n: n.name)
