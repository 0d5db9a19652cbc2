"""``manage.py node_agent``: the node agent, on a host that has the whole project.

    python manage.py node_agent --node pod-a-n01 --api http://127.0.0.1:8000 --token gsa_...

A thin wrapper: the agent is ``scheduler_app.agent`` (no Django; nodes without the project
run ``python -m scheduler_app.agent`` with the same options). It talks to the scheduler
through the REST API only, never to the database. docs/agent-protocol.md.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app.agent import cli


class Command(BaseCommand):
    help = "Run the node agent for one node (register, heartbeat, start and stop its jobs)."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        cli.run(cli.build(options))
