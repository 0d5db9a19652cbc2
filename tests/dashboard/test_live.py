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


@pytest.mark.parametrize(("who", "title"), [("evals-r1", "Active"), ("evals-lead", "Team jobs")])
def test_a_homes_own_jobs_and_the_gpu_totals_are_polled(demo_client: Client,
                                                       django_user_model, who, title):
    # a home left open showed a job PLACING after it had completed, and the totals of
    # when it was opened (found by trying the product, 2026-12-07)
    from scheduler_app.models import Job
    from scheduler_app.services import job_cancel

    demo_client.force_login(django_user_model.objects.get(username=who))
    home = demo_client.get("/").content.decode()
    assert "hx-get=\"/live/home-jobs/\"" in home and 'id="home-totals"' in home
    first = demo_client.get("/live/home-jobs/")
    body = first.content.decode()
    assert first.status_code == 200 and title in body and "GPUs in use" in body
    assert 'id="sec-home-jobs"' in body and "hx-trigger=\"every" in body
    again = demo_client.get("/live/home-jobs/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304
    owner = django_user_model.objects.get(username="evals-r1")
    job = Job.objects.filter(owner=owner, state="QUEUED").first() or Job.objects.filter(
        owner=owner, state__in=["RUNNING", "PLACING"]).first()
    assert job is not None and f"/jobs/{job.pk}/" in body
    job_cancel(job_id=job.pk, actor_name="evals-r1", why="test")
    changed = demo_client.get("/live/home-jobs/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200
    active = changed.content.decode().split("Recently finished")[0]
    assert f"/jobs/{job.pk}/" not in active


def test_an_operators_home_polls_no_job_list(demo_client: Client, django_user_model):
    demo_client.force_login(django_user_model.objects.get(username="operator"))
    body = demo_client.get("/live/home-jobs/").content.decode()
    assert "GPUs in use" in body and "<table" not in body


def test_every_page_says_when_no_scheduler_is_running(demo_client: Client, django_user_model):
    # a killed worker went unnoticed: submits were accepted and jobs promised the next
    # tick (found by running it as production does, 2026-12-07)
    from datetime import timedelta

    from django.utils import timezone

    from scheduler_app.models import Lease

    assert "scheduler-down" not in demo_client.get("/").content.decode()  # it leads
    Lease.objects.update(expires_at=timezone.now() - timedelta(minutes=3))
    for path in ("/", "/jobs/", "/cluster/"):
        page = demo_client.get(path).content.decode()
        assert 'id="scheduler-down"' in page, path
        assert "No scheduler is running (its lease expired 3 min" in page
    demo_client.force_login(django_user_model.objects.get(username="operator"))
    assert "<code>run_scheduler</code>" in demo_client.get("/").content.decode()
    summary = demo_client.get("/api/v1/cluster/").json()["scheduler"]
    assert summary["running"] is False and summary["lease_expires_in_s"] < -170


def test_the_pages_count_free_gpus_as_the_api_does(demo_client: Client):
    # the home and the cluster page said "29 free" while the API said 13 free and 16
    # unavailable: idle GPUs on a draining and a down node were counted as free (found by
    # an operator's session, 2026-12-07)
    import re

    from scheduler_app.api.reads import cluster_summary
    from scheduler_app.services.cluster import node_mark_down

    idle = Node.objects.filter(free_gpus__gt=0).order_by("name")
    node_drain(node=idle[0], actor_name="op", why="fan")
    node_mark_down(node=idle[1], actor_name="op", why="PSU")
    api = cluster_summary(reserved_gpus=0)
    assert api.gpus_unavailable > 0
    for page in ("/cluster/", "/live/home-jobs/"):
        body = demo_client.get(page).content.decode()
        m = re.search(r"(\d+) of (\d+) GPUs in use · (\d+) free · (\d+) idle on draining "
                      r"or down nodes", body)
        assert m is not None, page
        used, gpus, free, unavailable = map(int, m.groups())
        assert (used, gpus, free, unavailable) == (
            api.gpus_used, api.gpus, api.gpus_free, api.gpus_unavailable), page
        assert used + free + unavailable == gpus


def test_the_node_panel_says_who_took_the_node_out_when_and_why(demo_client: Client):
    # a lead whose job waited with NodeDown could not see why the node was out: only the
    # log stream had the reason (an operator's session, 2026-12-07)
    from scheduler_app.services.cluster import node_mark_down, node_undrain

    node = Node.objects.get(name="pod-b-n03")
    assert "since" not in demo_client.get(f"/live/node/{node.pk}/").content.decode()
    node_drain(node=node, actor_name="op", why="fan replacement")
    panel = demo_client.get(f"/live/node/{node.pk}/").content.decode()
    assert "Drained since" in panel and ", by op: fan replacement" in panel
    node_undrain(node=node, actor_name="op")
    node_mark_down(node=node, actor_name="op", why="PSU failure")
    panel = demo_client.get(f"/live/node/{node.pk}/").content.decode()
    assert "Down since" in panel and "PSU failure" in panel and "fan" not in panel
