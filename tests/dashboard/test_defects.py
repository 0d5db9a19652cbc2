"""The dashboard defects a researcher, a lead and an operator tripped on: each test fails
without its fix (the GPU type list, the preemption sentences, the words, the usage chart,
the operator's live tables, drain, sorting, the form, the failed job's log, why a job
waits, the node panel, the chart colours)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from dashboard import words
from scheduler_app.api.agent_logs import job_log_store
from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Node, Pod, Tenant, Transition
from scheduler_app.selectors import dashboard as sel
from scheduler_app.selectors.jobs import queue_order
from scheduler_app.selectors.why import why_pending
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.agents import agent_report_checkpoint, agent_report_exit
from scheduler_app.services.cluster import node_drain
from tests.foundation.factories import NodeFactory, TenantFactory

from .conftest import World

ROOT = Path(__file__).resolve().parents[2]


def text(response) -> str:
    """A page's words, without tags."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


# --------------------------------------------------------------------------- 3, 7
def test_the_gpu_type_list_names_each_type_once(world: World):
    page = world.client("researcher").get("/jobs/new/").content.decode()
    assert page.count('<option value="H100">') == 1  # four H100 nodes, one entry
    assert sel.gpu_types() == ["H100"]


def test_the_live_check_sends_no_slot_the_page_lacks(world: World):
    response = world.client("researcher").post("/jobs/new/check/", {
        "tenant": world.vision.pk, "gpus": "12", "gpus_per_node": "8",
        "_touched": "gpus,gpus_per_node,idempotency_key"})
    body = response.content.decode()
    assert 'id="err-gpus_per_node"' in body
    assert "err-idempotency_key" not in body  # htmx:oobErrorNoTarget in the console
    page = world.client("researcher").get("/jobs/new/").content.decode()
    for slot in re.findall(r'id="(err-[a-z_]+)"', body):
        assert f'id="{slot}"' in page


# --------------------------------------------------------------------------- 4
def test_a_preemption_row_names_a_hidden_job_in_words(world: World):
    page = text(world.client("researcher").get(f"/jobs/{world.jobs['first'].pk}/"))
    assert "make room for a job of team nlp" in page
    assert "#a job" not in page
    operator = text(world.client("operator").get(f"/jobs/{world.jobs['first'].pk}/"))
    assert f"make room for job #{world.jobs['wanted'].pk}" in operator


def test_core_sentences_keep_gpu_hours_and_a_leading_job_id():
    html = words.core_sentence("to start 42 (16 GPUs): evicted 17, 0.07 GPU-hours lost")
    assert "evicted job #17, 0.07 GPU-hours lost" in html
    assert "#0.07" not in html
    assert words.core_sentence("6: protected: same team").startswith("job #6: protected")


# --------------------------------------------------------------------------- 8
def test_words_for_a_newcomer():
    assert words.plural(1, "GPU") == "1 GPU" and words.plural(8, "GPU") == "8 GPUs"
    assert words.possessive("evals") == "evals'" and words.possessive("vision") == "vision's"
    half = words.half_life_words()  # "1 day" with the default settings
    assert f"halves every {half} (the half-life)" in dict(
        (a, m) for a, _t, m in words.glossary())["decayed-usage"]
    from scheduler_app.core.states import PENDING_SENTENCES, PendingReason

    assert "are down or draining." not in PENDING_SENTENCES[PendingReason.NODE_DOWN]


def test_the_fair_share_terms_link_to_the_glossary_which_states_the_half_life(world: World):
    client = world.client("lead")
    page = client.get("/teams/").content.decode()
    for anchor in ("decayed-usage", "per-guaranteed-gpu", "order"):
        assert f'href="/glossary/#{anchor}"' in page
    assert f"usage halves every {words.half_life_words()}" in text(client.get("/teams/"))
    glossary = client.get("/glossary/").content.decode()
    for anchor in ("decayed-usage", "per-guaranteed-gpu", "order", "log-row", "checkpoint"):
        assert f'id="{anchor}"' in glossary


def test_a_checkpoint_is_not_running_to_running_and_log_rows_are_not_job_numbers(
    world: World,
):
    job = world.jobs["second"]
    node = job.allocations.filter(end__isnull=True).first().node
    agent_report_checkpoint(node=node, job=job, resume_pointer="s3://ckpt/step-100")
    page = text(world.client("researcher").get(f"/jobs/{job.pk}/"))
    assert "running → running" not in page
    assert "still running" in page and "Checkpoint written" in page
    row = Transition.objects.filter(job=job).last()
    assert f"log row {row.pk}" in page and f"#{row.pk} " not in page.replace(
        f"#{job.pk} ", "")
    feed = text(world.client("operator").get("/live/feed/"))
    assert f"row {row.pk}" in feed and "RUNNING → RUNNING" not in feed


def test_the_operators_team_filter_reads_all_teams(world: World):
    assert "All teams" in world.client("operator").get("/jobs/").content.decode()
    assert "All my teams" not in world.client("operator").get("/jobs/").content.decode()


def test_a_team_whose_name_ends_in_s_has_its_queue_not_its_s_queue(db):
    evals = TenantFactory(name="evals")
    user = get_user_model().objects.create_user("e-lead")
    from scheduler_app.models import Membership

    Membership.objects.create(user=user, tenant=evals, role="lead")
    from django.test import Client

    client = Client()
    client.force_login(user)
    page = client.get("/teams/").content.decode()
    assert "evals' queue" in page and "evals's" not in page


# --------------------------------------------------------------------------- 5, 9
def test_the_usage_peak_comes_from_the_allocations_not_the_samples(db):
    pod = Pod.objects.create(name="p")
    nodes = [NodeFactory(name=f"n{i}", pod=pod) for i in range(20)]
    team = TenantFactory(name="vision", guaranteed_gpus=160, borrow_limit_gpus=0)
    now = datetime(2026, 1, 6, 12, 0, tzinfo=UTC)
    job = job_submit(tenant=team, name="burst", gpus=160, at=now - timedelta(hours=5))
    # held 160 GPUs from 08:05 to 08:10: between two 15-minute samples
    job_transition(job_id=job.pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, at=now - timedelta(hours=3, minutes=55),
                   alloc={n.name: list(range(8)) for n in nodes})
    job_transition(job_id=job.pk, to_state=JobState.CANCELLED, reason=Reason.CANCELLED,
                   actor=Actor.USER, at=now - timedelta(hours=3, minutes=50))
    series = sel.usage_series(now=now, hours=24, step_s=900)
    assert max(series.held["vision"]) == 0  # the samples miss it
    assert series.peak["vision"] == 160  # the log does not
    # the samples fall on round quarter hours
    assert all(t.minute % 15 == 0 and t.second == 0 for t in series.times[:-1])


def test_usage_offers_hour_day_and_week_with_the_guarantee(world: World):
    client = world.client("lead")
    for window, title in (("hour", "last hour"), ("day", "last day"), ("week", "last week")):
        page = client.get(f"/live/usage/?window={window}").content.decode()
        assert f"GPUs held over the {title}" in page
        data = re.search(r'id="usage-data" type="application/json">(.*?)</script>', page)
        chart = __import__("json").loads(data.group(1))
        assert {s["name"]: s["guaranteed"] for s in chart["series"]} == {"nlp": 16,
                                                                          "vision": 16}
        assert len(chart["ticks"]) == len(chart["labels"]) and any(chart["ticks"])
        # no label twice ("19:04", "19:04": the last round sample and now, in one minute)
        assert len(set(chart["labels"])) == len(chart["labels"]), chart["labels"][-3:]
    home = client.get("/").content.decode()
    assert 'id="sec-usage"' in home  # the lead's home has usage over time too
    assert home.index('id="tj-title"') < home.index('id="sec-fairshare"')


def test_the_fair_share_charts_series_use_no_team_colour():
    css = (ROOT / "static/css/app.css").read_text()
    js = (ROOT / "static/js/app.js").read_text()
    teams = {c.lower() for c in re.findall(r"--t\d: (#[0-9a-fA-F]{6})", css)}
    assert len(teams) == 10
    series = js[js.index("var SERIES"):js.index("};", js.index("var SERIES"))]
    used = {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}", series)}
    assert used and not used & teams


# --------------------------------------------------------------------------- 6, 12
def test_the_operators_quota_and_node_tables_are_live_sections(world: World):
    client = world.client("operator")
    quotas = client.get("/live/operator-quotas/").content.decode()
    assert 'id="sec-operator-quotas"' in quotas and "hx-trigger" in quotas
    world.vision.refresh_from_db()
    assert f'data-label="held">{world.vision.held_gpus}<' in quotas
    assert "32 of 32 GPUs guaranteed" in quotas
    nodes = client.get("/live/operator-nodes/").content.decode()
    assert nodes.count('id="noderow-') == 4
    for column in ("GPU type", "Jobs", "Heartbeat"):
        assert f">{column}</th>" in nodes
    assert world.client("lead").get("/live/operator-nodes/").status_code == 403
    page = client.get("/operator/").content.decode()
    assert 'id="node-search"' in page
    assert "<title>Operator · GPU scheduler</title>" in page  # the title is only words


def test_a_drain_needs_a_reason(world: World):
    client = world.client("operator")
    node = world.nodes[2]
    response = client.post(f"/operator/nodes/{node.pk}/drain/", HTTP_HX_REQUEST="true")
    assert "Say why the node is drained" in response.content.decode()
    node.refresh_from_db()
    assert node.health == "healthy"
    client.post(f"/operator/nodes/{node.pk}/drain/", {"why": "PSU swap"})
    node.refresh_from_db()
    assert node.health == "draining"
    assert Transition.objects.filter(node=node).last().detail["why"] == "PSU swap"


def test_jobs_sort_by_queue_position_and_filters_apply_on_change(world: World):
    extra = job_submit(tenant=world.vision, owner=world.users["teammate"], name="later",
                       gpus=8, priority=5, at=world.at(3800))
    world.loop.step(now=world.at(3810))
    page = world.client("lead").get("/jobs/?sort=position").content.decode()
    ids = [int(i) for i in re.findall(r'data-job="(\d+)"', page)]
    queued = [pk for pk, _t in queue_order()]
    assert ids[:len(queued)] == queued and extra.pk in ids
    assert "data-auto-submit" in page
    assert '<option value="position" selected>' in page


def test_a_running_job_says_when_it_ends_at_the_latest(world: World):
    """Its limit counts from the run's placement, as the scheduler's TimeLimit and the
    cluster page's plans count it: from started_at (the agent's confirmation, seconds
    later) the list and the plans disagreed (a team lead's session, 2026-12-07)."""
    job = world.jobs["second"]
    job.refresh_from_db()
    placed = Transition.objects.filter(job=job, to_state=JobState.PLACING).latest("id").at
    job.started_at = placed + timedelta(seconds=7)  # an agent that took 7 s to confirm
    job.save(update_fields=["started_at"])
    ends = placed + timedelta(seconds=job.max_runtime_s)
    listing = world.client("researcher").get("/jobs/").content.decode()
    assert f'<span class="ends-by">{words.clock(ends)}</span> at the latest' in listing
    page = world.client("researcher").get(f"/jobs/{job.pk}/").content.decode()
    shown = re.search(r'id="job-ends-by">(.*?)</dd>', page, re.S).group(1)
    assert words.clock(ends) in shown


def test_the_form_refuses_an_empty_command(world: World):
    response = world.client("researcher").post("/jobs/new/", {
        "tenant": world.vision.pk, "name": "nothing", "command": "   ", "gpus": "1",
        "max_runtime_s": "1h", "restart_s": "0", "priority": "0"})
    assert response.status_code == 400
    assert "Type the command the node agent runs" in response.content.decode()
    assert not Job.objects.filter(name="nothing").exists()


def test_a_long_name_is_clamped_in_lists_and_breaks_anywhere(world: World):
    css = (ROOT / "static/css/app.css").read_text()
    assert ".job-name {" in css and "line-clamp: 2" in css
    assert re.search(r"\.jobs td:first-child \{[^}]*overflow-wrap: anywhere", css)
    listing = world.client("lead").get("/jobs/").content.decode()
    assert 'class="job-name"' in listing and 'class="owner"' in listing


@pytest.mark.parametrize(("spec", "says"), [
    # it said "every no limit, 2 min to write" (found by trying the product, 2026-12-07)
    ({"checkpointable": True},
     "no interval declared; 2 min to write one when asked to stop (the cluster's default: "
     "it declares none)"),
    ({"checkpointable": True, "checkpoint_interval_s": 1800, "checkpoint_time_s": 90},
     "every 30 min; 1 min 30 s to write one when asked to stop"),
    ({"checkpointable": True, "checkpoint_time_s": 7200},
     "no interval declared; 10 min to write one when asked to stop (it declares 2 h: the "
     "cluster's cap)"),
    ({}, "<dt>Checkpoints</dt><dd>no</dd>"),
])
def test_the_job_page_says_how_it_checkpoints_as_the_scheduler_grants_it(
        world: World, spec, says):
    job = job_submit(tenant=world.vision, owner=world.users["researcher"], name="ck",
                     gpus=1, **spec)
    page = world.client("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert says in " ".join(page.split()), page[page.find("Checkpoints"):][:300]


# --------------------------------------------------------------------------- 10
def test_a_failed_job_shows_the_end_of_its_log(world: World):
    job = world.jobs["second"]
    node = job.allocations.filter(end__isnull=True).first().node
    job_log_store(job=job, node=node, stdout="epoch 1\n",
                  stderr="Traceback (most recent call last):\nKeyError: 'lr'\n")
    agent_report_exit(node=node, job=job, outcome="failed", exit_code=1)
    page = world.client("researcher").get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-log-tail"' in page and "KeyError: &#x27;lr&#x27;" in page
    assert "Failed with exit code 1" in page


# --------------------------------------------------------------------------- 13
def test_why_a_job_waits_is_answered_on_the_page_in_the_api_and_by_gpuq(world: World):
    job = world.jobs["queued"]
    job.refresh_from_db()
    assert job.state == "QUEUED"
    answer = why_pending(job=job)
    assert answer is not None and answer.reason == job.pending_reason
    assert answer.headline and answer.next_step
    page = world.client("lead").get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-why"' in page and "Next step:" in page
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(world.users["teammate"])
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["why_pending"]["headline"] == answer.headline
    assert detail["why_pending"]["next_step"] == answer.next_step
    from gpuq.cli import why_lines

    data = {"id": job.pk, "name": job.name, "tenant": "vision", "state": "QUEUED",
            "pending_reason": job.pending_reason, "why_pending": detail["why_pending"]}
    printed = " ".join(" ".join(why_lines(data, data, 200)).split())
    assert f"Why: {answer.headline}" in printed
    assert f"Next step: {answer.next_step}" in printed
    running = world.jobs["second"]
    api.force_authenticate(world.users["lead"])
    assert api.get(f"/api/v1/jobs/{running.pk}/").json()["why_pending"] is None


@pytest.mark.parametrize(("shape", "step"), [
    ({"gpus": 24}, "Asking for 16 GPUs would fit now."),
    ({"gpus": 24, "gpus_per_node": 8}, "Asking for 16 GPUs (8 per node) would fit now."),
])
def test_why_says_a_smaller_gang_would_fit_now(db, shape, step):
    pod = Pod.objects.create(name="pod-a")
    for i in range(3):
        NodeFactory(name=f"pod-a-n{i}", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=24, borrow_limit_gpus=0)
    job = job_submit(tenant=team, name="big", **shape)
    Node.objects.filter(name="pod-a-n2").update(free_gpus=0)
    Job.objects.filter(pk=job.pk).update(pending_reason="Resources")
    job.refresh_from_db()
    answer = why_pending(job=job)
    assert answer is not None
    assert "It needs 24 GPUs" in answer.headline and "16 GPUs are free" in answer.headline
    assert answer.next_step == step
    assert "free now on healthy nodes: pod-a 16" in answer.evidence


@pytest.mark.parametrize(("room", "step"), [
    (3, None),  # less than a node's worth: no advice the submit would refuse
    (13, "Asking for 8 GPUs (8 per node) would fit now."),
])
def test_a_smaller_gang_is_suggested_only_in_whole_nodes_of_its_shape(db, room, step):
    # "Asking for 3 GPUs would start it now" to a job of 8 per node, which gpuq then
    # refused ("3 GPUs cannot be split into nodes of 8"): found 2026-12-07
    pod = Pod.objects.create(name="pod-a")
    for i in range(4):
        NodeFactory(name=f"pod-a-n{i}", pod=pod)
    team = TenantFactory(name="evals", guaranteed_gpus=32, borrow_limit_gpus=0)
    job = job_submit(tenant=team, name="big", gpus=16, gpus_per_node=8)
    Tenant.objects.filter(pk=team.pk).update(held_gpus=32 - room)
    Job.objects.filter(pk=job.pk).update(pending_reason="QuotaLimit")
    job = Job.objects.select_related("tenant").get(pk=job.pk)
    answer = why_pending(job=job)
    if step is None:
        assert "Asking for" not in answer.next_step
    else:
        assert answer.next_step == step


def test_why_a_node_down_wait_names_the_draining_nodes(db):
    pod = Pod.objects.create(name="pod-a")
    nodes = [NodeFactory(name=f"pod-a-n{i}", pod=pod) for i in range(4)]
    team = TenantFactory(name="vision", guaranteed_gpus=32, borrow_limit_gpus=0)
    node_drain(node=nodes[3], actor_name="op", why="fan")
    job = job_submit(tenant=team, name="all", gpus=32)
    Job.objects.filter(pk=job.pk).update(pending_reason="NodeDown")
    job.refresh_from_db()
    answer = why_pending(job=job)
    assert "8 GPUs sit idle on 1 of 4 nodes that are down or draining" in answer.headline
    assert "not taking jobs: pod-a-n3 (draining)" in answer.evidence
    # a draining node with no GPU free is not one the idle GPUs are on (it counted)
    Node.objects.filter(pk=nodes[2].pk).update(health="draining", free_gpus=0)
    answer = why_pending(job=job)
    assert "8 GPUs sit idle on 1 of 4 nodes that are down or draining" in answer.headline
    assert "not taking jobs: pod-a-n2 (draining), pod-a-n3 (draining)" in answer.evidence


def _queued_behind(team, n: int, **last):
    """``n`` queued jobs of ``team``, then one more (``last``): the one asked about."""
    for i in range(n):
        job_submit(tenant=team, name=f"ahead-{i}", gpus=1)
    return job_submit(tenant=team, name="behind", gpus=1, **last)


def _leading(seconds_left: float) -> None:
    """A scheduler holds the leader lease for ``seconds_left`` more seconds (negative:
    it expired that long ago)."""
    from django.utils import timezone

    from scheduler_app.models import Lease
    from scheduler_app.services.lease import LEADER_LEASE

    Lease.objects.update_or_create(name=LEADER_LEASE, defaults={
        "holder": "host:1", "fencing_token": 1,
        "expires_at": timezone.now() + timedelta(seconds=seconds_left)})


def test_a_job_deep_in_its_teams_queue_is_not_promised_a_reason_at_the_next_tick(db):
    # each tick looks at the front of each team's queue: a job behind 40 of its team's
    # (found by trying the product, 2026-12-07: still "explained at the next tick" after
    # seven ticks) says what it waits behind
    _leading(15)
    pod = Pod.objects.create(name="pod-a")
    NodeFactory(name="pod-a-n0", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=8, borrow_limit_gpus=0)
    job = _queued_behind(team, 40)
    answer = why_pending(job=job)
    assert answer.reason == "None"
    assert answer.headline == ("The scheduler has not looked at it yet: 40 jobs of its team "
                               "are ahead of it (40 in the cluster's order, 40 GPUs between "
                               "them).")
    assert "next tick" not in answer.next_step
    assert "as the jobs ahead of it start" in answer.next_step
    first = Job.objects.get(name="ahead-0")
    assert "next tick" in why_pending(job=first).next_step  # at the front: it is


def test_with_no_scheduler_running_a_new_job_is_not_promised_the_next_tick(db):
    # a killed worker: submits still answer 201, and the job said "explained at the next
    # tick (every few seconds)" (found by running it as production does, 2026-12-07)
    pod = Pod.objects.create(name="pod-a")
    NodeFactory(name="pod-a-n0", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=8, borrow_limit_gpus=0)
    job = job_submit(tenant=team, name="alone", gpus=1)
    for lease in (None, -300):
        if lease is not None:
            _leading(lease)
        answer = why_pending(job=job)
        assert answer.headline.startswith("No scheduler is running")
        assert "next tick" not in answer.next_step
    assert "(its lease expired 5 min ago)" in answer.headline
    _leading(15)
    assert "next tick" in why_pending(job=job).next_step


def test_a_user_limit_that_was_lifted_is_not_read_as_a_cap_of_zero(db):
    pod = Pod.objects.create(name="pod-a")
    NodeFactory(name="pod-a-n0", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=8, borrow_limit_gpus=0)
    job = _queued_behind(team, 3)
    Job.objects.filter(pk=job.pk).update(pending_reason="UserLimit")
    job.refresh_from_db()
    assert team.max_gpus_per_user is None
    answer = why_pending(job=job)
    assert answer.reason == "Priority" and "of the 0 one person" not in answer.headline
    assert answer.headline.startswith("3 jobs rank ahead of it")


@pytest.mark.parametrize(("limits", "reason", "says", "step"), [
    ({"guaranteed_gpus": 16, "borrow_limit_gpus": 8}, "QuotaLimit",
     "It needs 60 GPUs, more than team vision may hold at once now (24: 16 guaranteed + 8 "
     "borrow limit): it cannot start while the team's limits stay as they are.",
     "Cancel it and submit it again with at most 24 GPUs, or ask an operator to raise the "
     "team's guarantee or borrow limit."),
    ({"guaranteed_gpus": 64, "borrow_limit_gpus": 0, "max_gpus_per_user": 6}, "UserLimit",
     "It needs 60 GPUs, more than the 6 one person of team vision may hold at once now: it "
     "cannot start while that cap stays as it is.",
     "Cancel it and submit it again with at most 4 GPUs, or ask an operator to raise the "
     "team's GPUs per user."),
])
def test_a_job_over_a_limit_lowered_after_its_submit_says_it_cannot_start(
        db, limits, reason, says, step):
    # an operator's cut leaves it queued (as Slurm and Kueue do), but no "it starts when
    # the team's running jobs free 74 GPUs": found by trying the product, 2026-12-07
    pod = Pod.objects.create(name="pod-a")
    for i in range(16):
        NodeFactory(name=f"pod-a-n{i}", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=64, borrow_limit_gpus=0)
    # preemptible: a job nothing may preempt could not borrow (test below)
    job = job_submit(tenant=team, name="big", gpus=60, gpus_per_node=4, preemptible=True)
    assert job.state == "QUEUED"
    Tenant.objects.filter(pk=team.pk).update(**limits)
    Job.objects.filter(pk=job.pk).update(pending_reason=reason)
    job = Job.objects.select_related("tenant").get(pk=job.pk)
    answer = why_pending(job=job)
    assert (answer.reason, answer.headline, answer.next_step) == (reason, says, step)


def test_a_job_nothing_may_preempt_is_told_it_may_use_only_its_teams_guarantee(db):
    """It may not borrow (no time limit, not checkpointable, not preemptible): the why
    says so and what would let it, not "the team holds 20 of its 32"."""
    pod = Pod.objects.create(name="pod-a")
    for i in range(4):
        NodeFactory(name=f"pod-a-n{i}", pod=pod)
    team = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)
    job = job_submit(tenant=team, name="plain", gpus=8, gpus_per_node=8)
    Tenant.objects.filter(pk=team.pk).update(held_gpus=12)
    Job.objects.filter(pk=job.pk).update(pending_reason="QuotaLimit")
    job = Job.objects.select_related("tenant").get(pk=job.pk)
    answer = why_pending(job=job)
    assert answer.headline == (
        "Team vision holds 12 GPUs of its 16 guaranteed; this job's 8 would take it to 20, "
        "and it cannot be preempted (neither checkpointable nor preemptible) and declares "
        "no time limit: such a job borrows past its team's guarantee only with a time limit "
        "of at most 2 h, so that the team it borrows from can take its GPUs back.")
    assert answer.next_step == (
        "Mark it checkpointable (or preemptible), or give it a time limit of at most 2 h, "
        "and it may borrow idle GPUs; otherwise it starts when the team's running jobs free "
        "4 GPUs.")


# --------------------------------------------------------------------------- 11
def test_the_node_panel_lists_its_jobs_naming_other_teams_by_team(world: World):
    node = world.jobs["wanted"].allocations.filter(end__isnull=True).first()
    holder = node.node if node else world.jobs["second"].allocations.first().node
    panel = world.client("researcher").get(f"/live/node/{holder.pk}/").content.decode()
    assert holder.name in panel and "Heartbeat" in panel and "GPUs used" in panel
    assert 'data-close-panel' in panel
    jobs_here = Job.objects.filter(allocations__node=holder, allocations__end__isnull=True)
    for job in jobs_here:
        if job.tenant == world.nlp:
            assert "a job of team nlp" in panel and job.name not in panel
        else:
            assert f"#{job.pk} {job.name}" in panel
    assert world.client(None).get(f"/live/node/{holder.pk}/").status_code == 302
    assert 'class="node-open"' in world.client("researcher").get("/live/map/").content.decode()


def test_the_node_panel_names_an_arrays_tasks_as_everywhere_else(world: World):
    # "#8 probe-layer-sweep" where every list says 8_0 (found 2026-12-07)
    from scheduler_app.services import array_submit

    tasks = array_submit(tenant=world.vision, owner=world.users["researcher"], name="sweep",
                         gpus=1, count=2)
    node = NodeFactory(name="n9", pod=Pod.objects.order_by("name").first())  # (all full)
    job_transition(job_id=tasks[1].pk, to_state=JobState.PLACING, reason=Reason.PLACED,
                   actor=Actor.SCHEDULER, alloc={node.name: [0]})
    panel = world.client("researcher").get(f"/live/node/{node.pk}/").content.decode()
    assert f"{tasks[0].pk}_1 sweep" in panel and f"#{tasks[1].pk} sweep" not in panel
