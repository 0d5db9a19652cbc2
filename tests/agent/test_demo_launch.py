"""The demo's real agents: ``manage.py demo_real_agents --print`` gives runnable command
lines with working tokens, and the simulated agents leave those nodes alone."""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from dashboard.demo import SimulatedAgents
from scheduler_app.api.tokens import token_find
from scheduler_app.core.states import JobState
from scheduler_app.models import Job, Node
from tests.foundation.factories import job_in_state

pytestmark = pytest.mark.django_db


def test_print_gives_an_agent_command_line_per_idle_node_with_a_live_token(world, tmp_path):
    job_in_state(JobState.RUNNING, tenant=world.vision, node=world.nodes[3])  # n3 is busy
    out = StringIO()
    call_command("demo_real_agents", "--print", "--count", "2", "--work-dir", str(tmp_path),
                 "--api", "http://127.0.0.1:9999", stdout=out)
    lines = out.getvalue().splitlines()
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    nodes = [argv[argv.index("--node") + 1] for argv in commands]
    assert nodes == ["n1", "n2"]  # the last idle nodes
    for argv in commands:
        assert argv[1:3] == ["-m", "scheduler_app.agent"] and "--demo-jobs" in argv
        key = Path(argv[argv.index("--token-file") + 1]).read_text()
        token = token_find(key=key)
        assert token is not None and token.node.name == argv[argv.index("--node") + 1]
    assert lines[-1].endswith("demo_agents --skip-nodes n1,n2")


def test_simulated_agents_leave_the_real_agents_nodes_alone(world):
    real, simulated = world.nodes[0], world.nodes[1]
    mine = job_in_state(JobState.PLACING, tenant=world.vision, node=real)
    theirs = job_in_state(JobState.PLACING, tenant=world.vision, node=simulated)
    agents = SimulatedAgents(start_delay_s=0, skip_nodes=frozenset({real.name}))
    agents.register_all()
    agents.step()
    assert Job.objects.get(pk=theirs.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=mine.pk).state == JobState.PLACING
    assert Node.objects.get(pk=real.pk).last_heartbeat is None
    assert Node.objects.get(pk=simulated.pk).last_heartbeat is not None
