"""The live sections answer 304 when nothing changed, and the map stays small."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from dashboard.demo import SimulatedAgents
from scheduler_app.models import Node
from scheduler_app.services.cluster import node_drain
from scheduler_app.services.leader import LeaderLoop

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_client(django_user_model) -> Client:
    call_command("seed_demo", "--password", "pw-live", stdout=StringIO())
    LeaderLoop(holder="live-test", ttl_s=60, heartbeat_timeout_s=0).step()
    SimulatedAgents(start_delay_s=0, heartbeat_s=0).step()
    client = Client()
    client.force_login(django_user_model.objects.get(username="evals-r1"))
    return client


def test_a_poll_that_finds_the_map_unchanged_gets_304_and_no_body(demo_client: Client):
    first = demo_client.get("/live/map/")
    assert first.status_code == 200 and first.has_header("ETag")
    assert "no-cache" in first["Cache-Control"] and "private" in first["Cache-Control"]
    again = demo_client.get("/live/map/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    node_drain(node=Node.objects.get(name="pod-b-n03"), actor_name="op", why="test")
    changed = demo_client.get("/live/map/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"]
    assert 'data-node="pod-b-n03" data-health="draining"' in changed.content.decode()


def test_the_map_of_48_nodes_weighs_less_than_24_kb(demo_client: Client):
    # one element per GPU with a tooltip naming its job made 40-46 KB a poll: the cells
    # carry only their team's colour now, the node's panel names the jobs
    body = demo_client.get("/live/map/").content
    assert body.count(b'class="node ') == 48
    assert len(body) < 24_000, len(body)
