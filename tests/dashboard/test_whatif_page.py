"""The "What if" page: operators only; a run goes to a thread without a broker and to the
Celery task with one; its page shows the progress, then the table and a chart a team;
a bad change shows the run's one-line error; nothing is written but the run's row."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from dashboard import whatif_runs
from dashboard.models import WhatIfRun
from scheduler_app.models import Job, Tenant, Transition
from tests.sim.whatif_seed import seed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator() -> Client:
    seed()
    user = get_user_model().objects.create_user("op", password="pw-whatif-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def inline_threads(monkeypatch) -> list[Any]:
    """The embedded mode's thread, run to its end before start_run returns."""
    started: list[Any] = []

    class Inline:
        def __init__(self, target: Any, args: tuple, **kwargs: Any) -> None:
            self.target, self.args = target, args
            started.append(kwargs.get("name"))

        def start(self) -> None:
            self.target(*self.args)

    monkeypatch.setattr(whatif_runs.threading, "Thread", Inline)
    return started


def test_the_page_is_for_operators_only() -> None:
    seed()
    user = get_user_model().objects.create_user("r1", password="pw-whatif-1")
    client = Client()
    client.force_login(user)
    assert client.get("/operator/whatif/").status_code == 403
    assert Client().get("/operator/whatif/").status_code == 302  # to the sign-in form


def test_without_a_broker_a_thread_runs_it_and_its_page_shows_the_answer(
        operator, inline_threads, settings) -> None:
    settings.CELERY_BROKER_URL = ""
    before = (Transition.objects.count(), list(Job.objects.values_list("id", "state")),
              list(Tenant.objects.values_list("name", "guaranteed_gpus", "usage_gpu_s")))
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=16", "hours": "24"})
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert inline_threads == [f"whatif-{run.pk}"]
    assert run.status == "done" and run.changes["set_quota"] == ["alpha=16"]
    page = operator.get(response["Location"]).content.decode()
    assert 'id="whatif-table"' in page and "alpha" in page
    assert page.count('data-chart="whatif"') == 3  # a chart a team
    # the assumptions under their heading, each a sentence (not "Assumes a team's wait: ...")
    assert "Both runs assume:" in page and "Assumes " not in page
    assert "<li>Running jobs run until their declared limit (max_runtime_s, counted from " \
           "the run&#x27;s placement" in page
    alpha = next(t for t in run.result["tenants"] if t["name"] == "alpha")
    assert alpha["whatif_mean_wait_s"] < alpha["baseline_mean_wait_s"]
    # the run wrote its own row and nothing of the scheduler's
    assert before == (Transition.objects.count(), list(Job.objects.values_list("id", "state")),
                      list(Tenant.objects.values_list("name", "guaranteed_gpus",
                                                      "usage_gpu_s")))


def test_with_a_broker_the_celery_task_gets_it(operator, settings, monkeypatch) -> None:
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    sent: list[str] = []
    from dashboard import tasks

    monkeypatch.setattr(tasks.whatif_run, "apply_async",
                        lambda args, **kw: sent.append(*args))
    monkeypatch.setattr(whatif_runs, "_in_thread", None)  # not run here instead
    # a change given twice counts once, as the command's flags do
    response = operator.post("/operator/whatif/", {"drain": "a1\na2\n a1, a2 a1", "hours": "6"})
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert sent == [str(run.pk)] and run.status == "queued" and not run.in_thread, run.error
    assert run.changes["drain"] == ["a1", "a2"] and run.hours == 6
    # the worker's side: the task runs it
    tasks.whatif_run(str(run.pk))
    run.refresh_from_db()
    assert run.status == "done" and run.result["horizon_s"] == 6 * 3600


def test_a_run_in_progress_polls_its_progress_bar(operator) -> None:
    run = WhatIfRun.objects.create(changes={}, hours=24, status="running", progress=0.4,
                                   stage="baseline")
    html = operator.get(f"/operator/whatif/{run.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert '<progress id="whatif-progress" max="100" value="40"' in html
    assert "hx-trigger=" in html and "baseline" in html


def test_a_run_the_broker_does_not_take_is_failed_saying_so(operator, settings,
                                                           monkeypatch) -> None:
    """A dead broker: the request raised a 500 and left the run 'queued' for ever, its
    page polling a progress bar no worker would move (2026-12-07). Now the run is failed
    at once with the broker's words, and its page says to start it again."""
    from scheduler_app.celery import app

    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    monkeypatch.setitem(app.conf, "task_always_eager", False)
    monkeypatch.setattr(whatif_runs, "_in_thread", None)  # not run here instead
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=16", "hours": "1"})
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert run.status == "failed" and run.finished_at is not None and not run.in_thread
    assert run.error.startswith("the broker did not take the run (")
    assert "Connection refused" in run.error or "111" in run.error
    html = operator.get(response["Location"]).content.decode()
    assert "the broker did not take the run" in html and "Start it again" in html
    assert "hx-trigger=" not in html  # finished: no polling


def test_a_bad_change_is_refused_at_its_box_and_starts_no_run(
        operator, inline_threads, settings) -> None:
    """Checked on the live state before a run starts: a typo is no failed row in Recent
    runs, and every bad change is named at once (a bad node and a bad setting both)."""
    settings.CELERY_BROKER_URL = ""
    response = operator.post("/operator/whatif/", {
        "set_quota": "nobody=8", "drain": "a1 zz9", "setting": "tick_interval_s=x",
        "hours": "24"})
    assert response.status_code == 400
    assert not WhatIfRun.objects.exists() and inline_threads == []
    form = response.context["form"]
    assert form.errors["set_quota"] == [
        "--set-quota nobody=8: unknown team nobody; teams: alpha, beta, gamma"]
    assert form.errors["drain"] == ["--drain zz9: unknown node"]
    assert form.errors["setting"][0].startswith("--setting tick_interval_s: ")
    html = response.content.decode()
    for message in ("unknown team nobody", "--drain zz9: unknown node",
                    "--setting tick_interval_s: "):
        assert message in html


def test_changes_that_only_fail_together_are_refused_together(operator) -> None:
    # each fits the cluster's 48 GPUs alone, not both
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=16\ngamma=16",
                                                   "hours": "24"})
    assert response.status_code == 400 and not WhatIfRun.objects.exists()
    assert response.context["form"].errors["set_quota"] == [
        "--set-quota alpha=16, --set-quota gamma=16: the guarantees would add up to 56 GPUs; "
        "the cluster has 48"]
    ended = Job.objects.get(name="alpha-q2").pk
    from scheduler_app.services.jobs import job_cancel

    job_cancel(job_id=ended, actor_name="op")
    response = operator.post("/operator/whatif/", {"cancel": f"{ended}", "hours": "24"})
    assert response.context["form"].errors["cancel"] == [
        f"--cancel {ended}: job {ended} has ended (CANCELLED)"]


def test_a_run_that_failed_shows_its_error(operator) -> None:
    """What only the run finds (the state changed since the form was checked) is still
    the run's one-line error."""
    run = WhatIfRun.objects.create(changes={"drain": ["a1"]}, hours=24, status="failed",
                                   error="--drain a1: unknown node")
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    assert "--drain a1: unknown node" in html
    assert "hx-trigger=" not in html  # finished: no more polling


@pytest.mark.parametrize("hours", ["0", "-1", "337", "nan"])
def test_a_bad_horizon_is_refused_by_the_form(operator, hours) -> None:
    response = operator.post("/operator/whatif/", {"hours": hours})
    assert response.status_code == 400 and not WhatIfRun.objects.exists()
    if hours != "nan":  # (Django's FloatField refuses nan itself: "Enter a number.")
        assert response.context["form"].errors["hours"] == [
            "The horizon must be from one second (1/3600) to 336 hours, as manage.py whatif "
            "takes it."]


def test_a_bad_horizon_does_not_hide_the_changes_errors(operator) -> None:
    # only the horizon's error showed until it was mended, then the changes' (an
    # operator's session, 2026-12-07): every bad box is said at once
    response = operator.post("/operator/whatif/", {"set_quota": "nobody=8", "hours": "0"})
    assert response.status_code == 400 and not WhatIfRun.objects.exists()
    errors = response.context["form"].errors
    assert set(errors) == {"hours", "set_quota"}
    assert errors["set_quota"] == [
        "--set-quota nobody=8: unknown team nobody; teams: alpha, beta, gamma"]


def test_two_errors_at_one_box_are_two_lines(operator) -> None:
    # they ran together as one sentence ("... safety --set-quota safety=-3: ...")
    response = operator.post("/operator/whatif/", {"set_quota": "nobody=8\nalpha=-3",
                                                   "hours": "24"})
    assert response.status_code == 400
    assert len(response.context["form"].errors["set_quota"]) == 2
    html = response.content.decode()
    slot = html[html.index('id="err-set_quota"'):]
    slot = slot[:slot.index("</p>")]
    assert slot.count("<br>") == 1, slot


def test_the_form_takes_the_horizons_the_command_takes(
        operator, inline_threads, settings) -> None:
    """The page refused a horizon under 15 minutes that the command ran (found by a user
    session, 2026-12-07): both take one second to 336 hours."""
    settings.CELERY_BROKER_URL = ""
    response = operator.post("/operator/whatif/", {"hours": "0.1"})
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert run.hours == pytest.approx(0.1) and run.status == "done"
    # whose settings the runs used is said (no scheduler published any here)
    html = operator.get(response["Location"]).content.decode()
    assert ("Settings: this process&#x27;s SCHEDULER_* environment (no scheduler has "
            "published its settings); all at their defaults.") in html


def test_a_cancelled_running_job_is_listed_on_the_page(
        operator, inline_threads, settings) -> None:
    settings.CELERY_BROKER_URL = ""
    gamma = str(Job.objects.get(name="gamma-run").pk)
    response = operator.post("/operator/whatif/", {"cancel": gamma, "hours": "6"})
    run = WhatIfRun.objects.get()
    assert run.status == "done", run.error
    assert run.result["cancelled"] == [{"id": gamma, "name": gamma, "tenant": "gamma",
                                        "running": True}]
    html = operator.get(response["Location"]).content.decode()
    assert f"Cancelled at once (left out of the waits): {gamma} (running)" in html


def test_an_answer_recorded_before_the_cancelled_list_still_shows_its_cancels(
        operator) -> None:
    # a run finished before "cancelled" was kept knew only the queued jobs it cancelled
    done = WhatIfRun.objects.create(changes={"cancel": ["7"]}, hours=1, status="done",
                                    progress=1.0)
    done.result = {"taken_at": "2026-12-06T00:00:00Z", "horizon_s": 3600, "changes": [],
                   "assumptions": [], "tenants": [], "series": {"step_s": 60,
                   "baseline": {}, "whatif": {}}, "jobs": [
                       {"id": "7", "tenant": "alpha", "gpus": 8, "baseline_start_in_s": 0,
                        "whatif_start_in_s": None, "cancelled": True, "moved_s": None}]}
    done.save()
    html = operator.get(f"/operator/whatif/{done.pk}/").content.decode()
    assert "Cancelled at once (left out of the waits): 7" in html
    assert 'id="whatif-ended"' not in html


def test_a_job_a_run_ended_without_a_start_is_listed_apart(operator) -> None:
    done = WhatIfRun.objects.create(changes={}, hours=1, status="done", progress=1.0)
    done.result = {"taken_at": "2026-12-06T00:00:00Z", "horizon_s": 3600, "changes": [],
                   "assumptions": [], "tenants": [], "cancelled": [],
                   "series": {"step_s": 60, "baseline": {}, "whatif": {}}, "jobs": [
                       {"id": "8", "tenant": "alpha", "gpus": 8, "baseline_start_in_s": None,
                        "whatif_start_in_s": 1800, "cancelled": False, "moved_s": None,
                        "baseline_ended": "CANCELLED", "whatif_ended": None}]}
    done.save()
    html = operator.get(f"/operator/whatif/{done.pk}/").content.decode()
    assert 'id="whatif-ended"' in html
    assert "8 (alpha; before: cancelled, after: starts in 0.50 h)" in html


def test_a_whatif_run_goes_to_a_queue_of_its_own_not_the_ticks(operator, settings) -> None:
    """On the tick's worker (one process) a run of a minute held every tick back for that
    minute (found by running it as production does, 2026-12-07)."""
    from scheduler_app.celery import app

    def queue_of(task: str) -> str:
        return app.amqp.router.route({}, task)["queue"].name

    assert f"{settings.CELERY_TASK_DEFAULT_QUEUE}-whatif" == settings.CELERY_WHATIF_QUEUE
    assert queue_of("dashboard.whatif_run") == settings.CELERY_WHATIF_QUEUE
    assert queue_of("scheduler_app.scheduler_tick") == settings.CELERY_TASK_DEFAULT_QUEUE
    # a run no worker has taken says which worker to start
    settings.CELERY_BROKER_URL = "redis://broker.invalid:6379/0"
    run = WhatIfRun.objects.create(changes={}, hours=24)
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    assert f"worker -Q {settings.CELERY_WHATIF_QUEUE} --concurrency 1" in html


def test_the_warnings_are_shown_above_the_table(operator, inline_threads, settings) -> None:
    """Draining all of pod-a leaves 16 schedulable GPUs for 40 guaranteed: the command
    says so under the changes, and so does the page, before the table."""
    settings.CELERY_BROKER_URL = ""
    response = operator.post("/operator/whatif/", {"drain": "a1 a2 a3 a4", "hours": "2"})
    run = WhatIfRun.objects.get()
    assert run.status == "done", run.error
    html = operator.get(response["Location"]).content.decode()
    assert 'id="whatif-warnings"' in html
    assert ("capacity below the guarantees: 16 GPUs are schedulable (on nodes healthy, not "
            "drained or down), fewer than the 40 the teams are guaranteed") in html
    assert html.index('id="whatif-warnings"') < html.index('id="whatif-table"')


def _answer(**fields: Any) -> WhatIfRun:
    """A finished run whose answer is ``fields`` over an empty one (the shape of
    ``WhatIf.to_json()``)."""
    result: dict[str, Any] = {
        "taken_at": "2026-12-06T00:00:00Z", "horizon_s": 24 * 3600, "changes": [],
        "assumptions": [], "tenants": [], "jobs": [], "cancelled": [], "warnings": [],
        "series": {"step_s": 900, "baseline": {}, "whatif": {}}}
    result.update(fields)
    return WhatIfRun.objects.create(changes={}, hours=result["horizon_s"] / 3600,
                                    status="done", progress=1.0, result=result)


def _team(name: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, "waiting": 0}
    for key in ("mean_wait_s", "p95_wait_s", "gpus_held", "preemptions", "gpu_hours_lost",
                "failed"):
        row[f"baseline_{key}"] = row[f"whatif_{key}"] = 0
    row.update(fields)
    return row


def test_the_team_table_has_the_jobs_that_fail_and_the_assumption_that_says_why(
        operator) -> None:
    from scheduler_app.sim.whatif import ASSUMPTIONS

    run = _answer(assumptions=list(ASSUMPTIONS),
                  tenants=[_team("alpha", baseline_failed=1, whatif_failed=3)])
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    assert '<th scope="colgroup" colspan="2">Failed</th>' in html
    row = html[html.index('<th scope="row">alpha</th>'):]
    row = row[:row.index("</tr>")]
    assert re.findall(r'<td class="num">([^<]*)</td>', row)[-2:] == ["1", "3"]
    # why a plan fails a job at its limit
    assert "reaches its limit before its work is done and fails there (TimeLimit: the " \
           "&#x27;failed&#x27; column)" in html


def test_jobs_are_named_and_moves_spelled_as_the_command_does(operator) -> None:
    """A task of an array by its name (8_3), a move with its sign, a move past the horizon
    as a lower bound, and no move under a minute (moved_most, moved_words)."""
    def job(job_id: str, name: str, before: int | None, after: int | None,
            **fields: Any) -> dict[str, Any]:
        moved = None if before is None and after is None else (
            (after if after is not None else 86400) - (before if before is not None else 86400))
        return {"id": job_id, "name": name, "tenant": "alpha", "gpus": 8,
                "baseline_start_in_s": before, "whatif_start_in_s": after,
                "cancelled": False, "moved_s": moved, "moved_lower_bound": False,
                "baseline_ended": None, "whatif_ended": None, **fields}

    run = _answer(jobs=[
        job("11", "8_3", None, 1000, moved_s=-85400, moved_lower_bound=True),
        job("12", "12", 3600, 9000),
        job("13", "13", 7200, 1800),
        job("14", "8_5", 600, 630),  # half a minute: not listed
        job("15", "8_6", None, None, baseline_ended="CANCELLED")],
        cancelled=[{"id": "10", "name": "8_2", "tenant": "alpha", "running": False}])
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    moved = html[html.index('id="whatif-moved"'):]
    moved = moved[:moved.index("</table>")]
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", r) for r in moved.split("<tr>")[2:]]
    assert [(r[0], r[-1]) for r in rows] == [("8_3", "&lt;-23.72"), ("12", "+1.50"),
                                             ("13", "-1.50")]
    assert "8_5" not in moved
    assert "Cancelled at once (left out of the waits): 8_2 (queued)" in html
    assert "8_6 (alpha; before: cancelled, after: not started)" in html


def test_an_array_task_is_named_on_the_page_after_a_real_run(
        operator, inline_threads, settings) -> None:
    from scheduler_app.services.jobs import array_submit

    settings.CELERY_BROKER_URL = ""
    tasks = array_submit(tenant=Tenant.objects.get(name="alpha"), owner=None, name="sweep",
                         gpus=8, count=3, max_runtime_s=3600)
    array = tasks[0].pk
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=16",
                                                   "cancel": f"{array}_0", "hours": "12"})
    run = WhatIfRun.objects.get()
    assert run.status == "done", run.error
    names = {j["id"]: j["name"] for j in run.result["jobs"]}
    assert names[str(tasks[1].pk)] == f"{array}_1"
    # task 0's id is the array's: cancelling it leaves the other tasks queued
    assert not any(j["whatif_ended"] for j in run.result["jobs"])
    html = operator.get(response["Location"]).content.decode()
    assert f"Cancelled at once (left out of the waits): {array}_0 (queued)" in html
    moved = html[html.index('id="whatif-moved"'):]
    assert f"<td>{array}_1</td>" in moved[:moved.index("</table>")]


def test_the_team_figures_are_written_as_the_command_writes_them(operator) -> None:
    run = _answer(tenants=[_team("alpha", baseline_gpus_held=0.0, whatif_gpus_held=1.5,
                                 baseline_gpu_hours_lost=0.0, whatif_gpu_hours_lost=12.25,
                                 baseline_mean_wait_s=5400.0)])
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    row = html[html.index('<th scope="row">alpha</th>'):]
    cells = re.findall(r'<td class="num">([^<]*)</td>', row[:row.index("</tr>")])
    # waiting, mean wait, p95 wait, GPUs held, preemptions, GPU-hours lost, failed
    assert cells == ["0", "1.50", "0.00", "0.00", "0.00", "0", "1.5", "0", "0", "0", "12.25",
                     "0", "0"]


def test_a_node_can_be_returned_to_service(operator, inline_threads, settings) -> None:
    """--undrain and --up on the page: "what if I return node X to service"."""
    from scheduler_app.models import Node
    from scheduler_app.services.cluster import node_drain, node_mark_down

    settings.CELERY_BROKER_URL = ""
    node_drain(node=Node.objects.get(name="b1"), actor_name="op", why="fans")
    node_mark_down(node=Node.objects.get(name="a1"), actor_name="op", why="gone")
    response = operator.post("/operator/whatif/", {"undrain": "b1", "up": "a1",
                                                   "hours": "2"})
    run = WhatIfRun.objects.get()
    assert run.status == "done", run.error
    assert run.changes["undrain"] == ["b1"] and run.changes["up"] == ["a1"]
    assert run.result["changes"] == ["--undrain b1", "--up a1"]
    html = operator.get(response["Location"]).content.decode()
    flag = '<code class="change"><span class="nobr">--{}</span> {}</code>'.format
    assert f"{flag('undrain', 'b1')}, {flag('up', 'a1')}" in html
    listed = operator.get("/operator/whatif/").content.decode()
    assert 'name="undrain"' in listed and 'name="up"' in listed
    assert f"{flag('undrain', 'b1')} {flag('up', 'a1')}" in listed  # Recent runs


def test_cancelling_a_job_that_has_ended_says_so(operator) -> None:
    """As the command says it: the run asks the snapshot about --cancel's jobs."""
    from scheduler_app.services.jobs import job_cancel

    ended = Job.objects.get(name="alpha-q2").pk
    job_cancel(job_id=ended, actor_name="op")
    run = WhatIfRun.objects.create(changes={"cancel": [str(ended)]}, hours=2)
    whatif_runs.execute(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == f"--cancel {ended}: job {ended} has ended (CANCELLED)"


def test_spaces_around_the_signs_belong_to_the_change(operator) -> None:
    """An operator typed "rl = 96": the command reads --set-quota "rl = 96" as rl=96; the
    page split it on its spaces into three bad changes."""
    from dashboard.forms import WhatIfForm

    form = WhatIfForm({"set_quota": "alpha = 16 : 0, beta =24\ngamma= 8",
                       "setting": "tick_interval_s = 10 queue_stretch=2", "hours": "24"})
    assert form.is_valid(), form.errors
    changes = form.changes()
    assert changes["set_quota"] == ["alpha=16:0", "beta=24", "gamma=8"]
    assert changes["setting"] == ["tick_interval_s=10", "queue_stretch=2"]


def test_recent_runs_show_each_runs_horizon(operator) -> None:
    WhatIfRun.objects.create(changes={"drain": ["a1"]}, hours=6)
    WhatIfRun.objects.create(changes={}, hours=1.5)
    html = operator.get("/operator/whatif/").content.decode()
    assert '<th scope="col" class="num">Horizon</th>' in html
    assert '<td class="num">6 h</td>' in html and '<td class="num">1.5 h</td>' in html
    run = _answer(horizon_s=5400)
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    assert "1.5 h ahead" in html and "1.50 h" not in html


def test_the_charts_hours_are_ticked_at_round_steps(operator) -> None:
    """Whole hours or round fractions (Chart.js skipped the category labels to 1.12, 2.25,
    3.38 h); the browser test reads the drawn ticks."""
    from dashboard.views import tick_hours

    assert [tick_hours(h) for h in (24, 336, 6, 5, 1, 0.25, 12.5)] == [
        2, 48, 0.5, 0.5, 0.1, 0.05, 2]
    run = _answer(horizon_s=24 * 3600, tenants=[_team("alpha")],
                  series={"step_s": 900, "baseline": {"alpha": [0] * 97},
                          "whatif": {"alpha": [8] * 97}})
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    data = html[html.index('id="whatif-0-data"'):]
    assert '"x_max": 24.0' in data and '"x_step": 2' in data
    assert '"x_title": "hours from now"' in data
    assert '"labels": [0.0, 0.25, 0.5,' in data


def test_a_horizon_under_an_hour_is_charted_in_minutes_or_seconds(operator) -> None:
    """A one-second horizon's axis read "0 ... 0" in hours (an operator's session,
    2026-12-07)."""
    from dashboard.views import chart_axis

    assert chart_axis(86400) == ("hours from now", 3600, 2)
    assert chart_axis(3600) == ("hours from now", 3600, 0.1)
    assert chart_axis(900) == ("minutes from now", 60, 2)
    assert chart_axis(60) == ("minutes from now", 60, 1)
    assert chart_axis(59) == ("seconds from now", 1, 5)
    assert chart_axis(1) == ("seconds from now", 1, 1)
    run = _answer(horizon_s=1, tenants=[_team("alpha")],
                  series={"step_s": 1, "baseline": {"alpha": [0, 8]},
                          "whatif": {"alpha": [8, 8]}})
    html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
    data = html[html.index('id="whatif-0-data"'):]
    assert '"x_max": 1.0' in data and '"x_step": 1' in data
    assert '"x_title": "seconds from now"' in data and '"labels": [0.0, 1.0]' in data


def _silent_run(seconds: float, *, in_thread: bool = True) -> WhatIfRun:
    from datetime import timedelta

    from django.utils import timezone

    return WhatIfRun.objects.create(
        changes={}, hours=24, status="running", progress=0.3, stage="baseline",
        in_thread=in_thread, heartbeat_at=timezone.now() - timedelta(seconds=seconds))


def test_a_run_its_restarted_server_dropped_is_marked_failed(operator) -> None:
    """A thread of the web process dies with it: its run polled as running forever."""
    lost = _silent_run(whatif_runs.LOST_AFTER_S + 5)
    html = operator.get(f"/operator/whatif/{lost.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert "the server restarted during the run" in html
    assert "hx-trigger=" not in html  # no more polling
    lost.refresh_from_db()
    assert lost.status == "failed" and lost.finished_at is not None
    # the list says so too
    other = _silent_run(whatif_runs.LOST_AFTER_S * 3)
    listed = operator.get("/operator/whatif/").content.decode()
    other.refresh_from_db()
    assert other.status == "failed" and "<td>running</td>" not in listed
    assert listed.count("<td>failed</td>") == 2


def test_a_run_that_is_alive_is_not_marked_failed(operator) -> None:
    fresh = _silent_run(whatif_runs.LOST_AFTER_S - 30)  # silent, not for long
    worker = _silent_run(whatif_runs.LOST_AFTER_S * 10, in_thread=False)  # a worker's
    running = _silent_run(whatif_runs.LOST_AFTER_S * 10)  # its thread is still there
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name=f"whatif-{running.pk}", daemon=True)
    thread.start()
    try:
        for run in (fresh, worker, running):
            html = operator.get(f"/operator/whatif/{run.pk}/").content.decode()
            assert "hx-trigger=" in html
            run.refresh_from_db()
            assert run.status == "running"
    finally:
        stop.set()
        thread.join()


def test_a_run_writes_its_heartbeat_with_its_progress(operator, monkeypatch) -> None:
    monkeypatch.setattr(whatif_runs, "PROGRESS_EVERY_S", 0.0)
    run = WhatIfRun.objects.create(changes={}, hours=1)
    beats: list[Any] = []
    real = whatif_runs._update

    def update(r: WhatIfRun, **fields: Any) -> None:
        real(r, **fields)
        beats.append(WhatIfRun.objects.get(pk=r.pk).heartbeat_at)

    monkeypatch.setattr(whatif_runs, "_update", update)
    whatif_runs.execute(run.pk)
    assert len(beats) > 3 and all(beats) and beats == sorted(beats)
    run.refresh_from_db()
    assert run.status == "done" and run.heartbeat_at == beats[-1]


def test_a_run_started_in_a_thread_says_so(operator, inline_threads, settings) -> None:
    settings.CELERY_BROKER_URL = ""
    operator.post("/operator/whatif/", {"hours": "1"})
    run = WhatIfRun.objects.get()
    assert run.in_thread and run.heartbeat_at is not None


def test_quotas_that_fit_only_together_are_not_refused_one_by_one(
        operator, inline_threads, settings) -> None:
    """alpha=20 alone would put 52 GPUs of guarantees on 48; with beta=20 beside it, 48.
    Likewise a quota that fits only with the nodes added."""
    settings.CELERY_BROKER_URL = ""
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=20\nbeta=20",
                                                   "hours": "2"})
    assert response.status_code == 302, response.context["form"].errors
    # alpha=24 fits once pod-b has a node more (56 of 56)
    response = operator.post("/operator/whatif/", {"set_quota": "alpha=24",
                                                   "add_nodes": "pod-b=1", "hours": "2"})
    assert response.status_code == 302, response.context["form"].errors
    assert [r.status for r in WhatIfRun.objects.all()] == ["done", "done"]


def test_old_finished_runs_are_pruned_as_a_new_one_starts(
        operator, inline_threads, settings, monkeypatch) -> None:
    # every run's answer was kept for ever (~700 KB each with 3,000 queued jobs; an
    # operator's session, 2026-12-07): the newest KEEP_RUNS finished ones stay
    settings.CELERY_BROKER_URL = ""
    monkeypatch.setattr(whatif_runs, "KEEP_RUNS", 3)
    now = timezone.now()
    old = [WhatIfRun.objects.create(changes={}, hours=1, status="done", finished_at=now,
                                    result={"n": i}) for i in range(4)]
    for i, run in enumerate(old):  # oldest first
        WhatIfRun.objects.filter(pk=run.pk).update(created_at=now - timedelta(hours=10 - i))
    running = WhatIfRun.objects.create(changes={}, hours=1, status="running")
    WhatIfRun.objects.filter(pk=running.pk).update(created_at=now - timedelta(hours=20))
    response = operator.post("/operator/whatif/", {"hours": "0.1"})
    assert response.status_code == 302
    kept = set(WhatIfRun.objects.values_list("pk", flat=True))
    # the two newest old ones, the new one, and the one still running (never pruned)
    assert kept == {old[2].pk, old[3].pk, running.pk, WhatIfRun.objects.latest("created_at").pk}
    assert operator.get("/operator/whatif/").status_code == 200
