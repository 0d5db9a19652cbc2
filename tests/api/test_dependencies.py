"""Job dependencies through the API and the services: what is refused at submit (naming
the field, nothing written), what a job shows, what the leader gives the core, and that
a dependent waits and is cancelled when its dependency can never be met."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_app.api import access
from scheduler_app.core.states import JobState, PendingReason, Reason
from scheduler_app.models import Allocation, Job, Transition
from scheduler_app.selectors.jobs import job_visibility
from scheduler_app.services.errors import Invalid
from scheduler_app.services.jobs import (
    array_submit,
    cycle_errors,
    job_cancel,
    job_submit,
    parse_dependencies,
)
from scheduler_app.services.leader import LeaderLoop
from scheduler_app.services.transitions import now_s
from tests.foundation.test_replay import replay_verify

from .conftest import World, job_body, submit

pytestmark = pytest.mark.django_db



def errors_of(response) -> dict[str, str]:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


def post(world: World, who: str = "researcher", **spec: Any):
    return world.client(who).post("/api/v1/jobs/", job_body(**spec), format="json")


def batch(world: World, jobs: list[dict[str, Any]], who: str = "researcher"):
    return world.client(who).post("/api/v1/jobs/batch/", {"tenant": "vision", "jobs": jobs},
                                  format="json")


def nothing_written(before: tuple[int, int]) -> bool:
    return (Job.objects.count(), Transition.objects.count()) == before


def counts() -> tuple[int, int]:
    return Job.objects.count(), Transition.objects.count()


# ---------------------------------------------------------------- submit: good
def test_a_job_names_what_it_waits_for_and_shows_it(world):
    first = submit(world, name="prep")["id"]
    other = submit(world, name="eval")["id"]
    made = submit(world, name="train", depends_on=[{"job": first},
                                                  {"job": other, "when": "notok"}])
    assert made["depends_on"] == [{"job": first, "when": "ok"},  # ok unless told
                                  {"job": other, "when": "notok"}]
    detail = world.client("researcher").get(f"/api/v1/jobs/{made['id']}/").json()
    assert detail["depends_on"] == made["depends_on"]
    assert detail["array_id"] is None and detail["array_task"] is None
    assert Job.objects.get(pk=made["id"]).depends_on == [[first, "ok"], [other, "notok"]]


def test_a_retry_may_list_the_dependencies_in_another_order(world):
    # all of them must be met, so their order means nothing: a pipeline that builds the
    # list from a set got a 409 on its retry (a pipeline author's session, 2026-12-07)
    first = submit(world, name="prep")["id"]
    other = submit(world, name="eval")["id"]
    deps = [{"job": first}, {"job": other, "when": "any"}]
    made = submit(world, name="train", idempotency_key="k-order", depends_on=deps)
    retry = post(world, name="train", idempotency_key="k-order", depends_on=deps[::-1])
    assert retry.status_code == 200 and retry.json()["id"] == made["id"]
    changed = post(world, name="train", idempotency_key="k-order",
                   depends_on=[{"job": first}, {"job": other}])  # "any" -> "ok": another job
    assert changed.status_code == 409


def test_a_lead_may_make_a_job_wait_for_a_members_job(world):
    theirs = submit(world, who="teammate")["id"]
    made = submit(world, who="lead", depends_on=[{"job": theirs, "when": "any"}])
    assert made["depends_on"] == [{"job": theirs, "when": "any"}]


def test_a_batch_names_its_own_jobs_by_index_and_existing_jobs_by_id(world):
    existing = submit(world)["id"]
    response = batch(world, [
        {"name": "train", "gpus": 1, "depends_on": [{"index": 1}, {"job": existing}]},
        {"name": "prep", "gpus": 1},
        {"name": "eval", "gpus": 1, "depends_on": [{"index": 0, "when": "any"}]},
    ])
    assert response.status_code == 201, response.json()
    train, prep, evaluate = response.json()["jobs"]
    assert train["depends_on"] == [{"job": prep["id"], "when": "ok"},
                                   {"job": existing, "when": "ok"}]
    assert evaluate["depends_on"] == [{"job": train["id"], "when": "any"}]
    stored = dict(Job.objects.filter(pk__in=[train["id"], evaluate["id"]])
                  .values_list("pk", "depends_on"))
    assert stored == {train["id"]: [[prep["id"], "ok"], [existing, "ok"]],
                      evaluate["id"]: [[train["id"], "any"]]}


# ---------------------------------------------------------------- submit: refused
def test_a_dependency_on_an_unknown_job_is_refused_naming_it(world):
    before = counts()
    response = post(world, depends_on=[{"job": 999_999}])
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"depends_on[0].job"} and "999999" in errors["depends_on[0].job"]
    assert nothing_written(before)


@pytest.mark.parametrize("whose", ["other_team", "teammate"])
def test_a_dependency_on_a_job_the_submitter_cannot_see_is_refused(world, whose):
    tenant = "nlp" if whose == "other_team" else "vision"
    hidden = submit(world, who=whose, tenant=tenant)["id"]
    before = counts()
    response = post(world, depends_on=[{"job": hidden}])
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"depends_on[0].job"}
    assert "not yours to see" in errors["depends_on[0].job"]
    assert nothing_written(before)


def test_a_dependency_that_can_never_be_met_is_refused_at_submit(world):
    """afterok on a job already cancelled was a 201 QUEUED, cancelled at the next tick
    (DependencyNeverSatisfied): a pipeline read success for a job that could never start
    (found by a pipeline author's session, 2026-12-07)."""
    gone = submit(world)["id"]
    world.client("researcher").post(f"/api/v1/jobs/{gone}/cancel/", {}, format="json")
    done = submit(world)["id"]
    Job.objects.filter(pk=done).update(state="COMPLETED")  # (its run is not the point)
    before = counts()
    for dependency, message in [
        ({"job": gone, "when": "ok"},
         f"Job {gone} has ended CANCELLED, so a job waiting for it to complete (afterok) "
         "could never start."),
        ({"job": done, "when": "notok"},
         f"Job {done} has ended COMPLETED, so a job waiting for it to fail or be cancelled "
         "(afternotok) could never start."),
    ]:
        response = post(world, depends_on=[dependency])
        assert response.status_code == 400
        [error] = response.json()["errors"]
        assert (error["field"], error["code"], error["message"]) == (
            "depends_on[0].job", "bad_dependency", message)
        refused = batch(world, [{"name": "b", "gpus": 1, "depends_on": [dependency]}])
        assert refused.status_code == 400
        assert set(errors_of(refused)) == {"jobs[0].depends_on[0].job"}
    assert nothing_written(before)
    # what can still be met is taken: afterany on an ended job (met at once), afterok on
    # one that completed
    assert post(world, depends_on=[{"job": gone, "when": "any"}]).status_code == 201
    assert post(world, depends_on=[{"job": done, "when": "ok"}]).status_code == 201


def test_an_unknown_when_is_refused(world):
    first = submit(world)["id"]
    before = counts()
    response = post(world, depends_on=[{"job": first, "when": "afterok"}])
    assert response.status_code == 400
    assert set(errors_of(response)) == {"depends_on[0].when"}
    # the code and words docs/api.md gives ('invalid_choice', '"afterok" is not a valid
    # choice.' until 2026-12-07: it named the mistake, not what is allowed)
    [error] = response.json()["errors"]
    assert error["code"] == "bad_dependency"
    assert error["message"].startswith("Unknown kind 'afterok': one of ok, any, notok (")
    assert nothing_written(before)


def test_the_same_job_twice_and_an_index_outside_a_batch_are_refused(world):
    first = submit(world)["id"]
    before = counts()
    twice = post(world, depends_on=[{"job": first}, {"job": first, "when": "notok"}])
    assert twice.status_code == 400 and set(errors_of(twice)) == {"depends_on[1]"}
    index = post(world, depends_on=[{"index": 0}])
    assert index.status_code == 400 and set(errors_of(index)) == {"depends_on[0].index"}
    both = post(world, depends_on=[{"job": first, "index": 0}])
    assert both.status_code == 400 and set(errors_of(both)) == {"depends_on[0]"}
    assert nothing_written(before)


def test_a_cycle_in_a_batch_is_refused_naming_its_first_job(world):
    before = counts()
    response = batch(world, [
        {"name": "a", "gpus": 1},
        {"name": "b", "gpus": 1, "depends_on": [{"index": 3}]},
        {"name": "c", "gpus": 1, "depends_on": [{"index": 1}]},
        {"name": "d", "gpus": 1, "depends_on": [{"index": 2}, {"index": 0}]},
    ])
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"jobs[1].depends_on"}
    assert "jobs[1] -> jobs[3] -> jobs[2] -> jobs[1]" in errors["jobs[1].depends_on"]
    assert nothing_written(before)


def test_a_batch_index_out_of_range_or_on_itself_is_refused(world):
    before = counts()
    response = batch(world, [{"name": "a", "gpus": 1, "depends_on": [{"index": 0}]},
                             {"name": "b", "gpus": 1, "depends_on": [{"index": 7}]}])
    assert response.status_code == 400
    errors = errors_of(response)
    assert set(errors) == {"jobs[0].depends_on[0].index", "jobs[1].depends_on[0].index"}
    assert "itself" in errors["jobs[0].depends_on[0].index"]
    assert "0 to 1" in errors["jobs[1].depends_on[0].index"]
    hidden = submit(world, who="other_team", tenant="nlp")["id"]
    response = batch(world, [{"name": "a", "gpus": 1, "depends_on": [{"job": hidden}]}])
    assert set(errors_of(response)) == {"jobs[0].depends_on[0].job"}
    assert nothing_written((before[0] + 1, before[1] + 2))


def test_a_bad_dependency_has_one_code_in_a_job_a_batch_and_an_array(world):
    """bad_dependency on a single submit, invalid in a batch or an array (found by a user
    gaming the scheduler, 2026-12-07): one code, whatever carries it."""
    before = counts()
    single = post(world, depends_on=[{"job": 999_999}])
    many = batch(world, [{"name": "a", "gpus": 1, "depends_on": [{"job": 999_999}]},
                         {"name": "b", "gpus": 1, "depends_on": [{"index": 1}]}])
    array = world.client("researcher").post("/api/v1/arrays/", {
        "tenant": "vision", "name": "s", "gpus": 1, "depends_on": [{"job": 999_999}],
        "array": {"count": 2}}, format="json")
    cycle = batch(world, [{"name": "a", "gpus": 1, "depends_on": [{"index": 1}]},
                          {"name": "b", "gpus": 1, "depends_on": [{"index": 0}]}])
    codes = {(r, e["field"]): e["code"] for r, response in
             (("single", single), ("batch", many), ("array", array), ("cycle", cycle))
             for e in response.json()["errors"]}
    assert codes == {("single", "depends_on[0].job"): "bad_dependency",
                     ("batch", "jobs[0].depends_on[0].job"): "bad_dependency",
                     ("batch", "jobs[1].depends_on[0].index"): "bad_dependency",
                     ("array", "depends_on[0].job"): "bad_dependency",
                     ("cycle", "jobs[0].depends_on"): "bad_dependency"}
    assert nothing_written(before)
    # an array's other refusals keep theirs beside it
    with pytest.raises(Invalid) as both:
        array_submit(tenant=world.vision, owner=world.users["researcher"], name="s", gpus=1,
                     count=2, max_running=0, depends_on=[{"job": 999_999}])
    assert (both.value.code_of("array.max_running"), both.value.code_of("depends_on[0].job"),
            both.value.code) == ("invalid", "bad_dependency", "invalid")


def test_the_services_refuse_the_same_without_the_api(world):
    hidden = job_submit(tenant=world.nlp, owner=world.users["other_team"], name="x", gpus=1)
    with pytest.raises(Invalid) as err:
        job_submit(tenant=world.vision, owner=world.users["researcher"], name="y", gpus=1,
                   depends_on=[{"job": hidden.pk}])
    assert err.value.field == "depends_on[0].job"
    # no owner (a script, the simulator): no one to see for, existence still counts
    assert job_submit(tenant=world.vision, name="z", gpus=1,
                      depends_on=[{"job": hidden.pk}]).depends_on == [[hidden.pk, "ok"]]
    with pytest.raises(Invalid) as err:
        job_submit(tenant=world.vision, name="z", gpus=1, depends_on=[{"job": 10**9}])
    assert err.value.field == "depends_on[0].job"


def test_the_services_visibility_rule_is_the_apis(world):
    jobs = [submit(world, who=who, tenant="nlp" if who == "other_team" else "vision")
            for who in ("researcher", "teammate", "other_team", "lead")]
    rows = Job.objects.filter(pk__in=[j["id"] for j in jobs]).values_list("tenant_id",
                                                                         "owner_id")
    for user in world.users.values():
        service = job_visibility(user)
        for tenant_id, owner_id in rows:
            assert service(tenant_id, owner_id) == access.sees(user, tenant_id, owner_id)


def test_cycles_are_found_in_long_chains_without_recursion():
    chain = {i: [("index", i + 1, "ok")] for i in range(999)}
    assert cycle_errors({**chain, 999: []}) == {}
    errors = cycle_errors({**chain, 999: [("index", 0, "ok")]})
    assert list(errors) == ["jobs[0].depends_on"]
    deps, problems = parse_dependencies([{"job": 1}, {"job": 2, "when": "any"}])
    assert deps == [("job", 1, "ok"), ("job", 2, "any")] and problems == {}


# ---------------------------------------------------------------- the leader, replay
def test_the_leader_gives_the_core_the_dependencies_by_core_id(world):
    first = submit(world)["id"]
    made = submit(world, depends_on=[{"job": first, "when": "any"}])["id"]
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    spec = loop.scheduler.jobs[str(made)].spec
    assert spec.depends_on == ((str(first), "any"),)
    # a later submit reaches the core through the catch-up, with the same fields
    later = submit(world, depends_on=[{"job": made}])["id"]
    assert not loop.step(now=now_s()).error
    assert loop.scheduler.jobs[str(later)].spec.depends_on == ((str(made), "ok"),)
    # and a leader rebuilt from the tables makes the same specs
    rebuilt = LeaderLoop(holder="test2", ttl_s=15, heartbeat_timeout_s=0)
    rebuilt.build(now_s())
    assert rebuilt.scheduler.jobs[str(later)].spec == loop.scheduler.jobs[str(later)].spec


def test_a_rebuilt_leader_knows_how_an_awaited_job_ended(world):
    """The build reads the live jobs only: a job that others wait for and that ended is
    read too, so the core can decide for its dependents (they would wait for ever for a
    job it never sees)."""
    first = submit(world)["id"]
    made = submit(world, depends_on=[{"job": first}])["id"]
    job_cancel(job_id=first, actor_name="vision-r1")
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    loop.build(now_s())
    assert loop.scheduler.jobs[str(first)].state == JobState.CANCELLED
    assert str(made) in loop.scheduler.jobs


def test_replay_agrees_with_the_tables_after_dependencies(world):
    first = submit(world)["id"]
    submit(world, depends_on=[{"job": first}])
    batch(world, [{"name": "a", "gpus": 1}, {"name": "b", "gpus": 1,
                                              "depends_on": [{"index": 0}]}])
    job_cancel(job_id=first, actor_name="vision-r1")
    ok, output = replay_verify()
    assert ok, output


# ---------------------------------------------------------------- why it waits
def test_a_job_waiting_for_its_dependency_says_for_which_job_in_words(world):
    first = submit(world)["id"]
    second = submit(world)["id"]
    made = submit(world, depends_on=[{"job": first}, {"job": second, "when": "notok"}])
    Job.objects.filter(pk=made["id"]).update(pending_reason=PendingReason.DEPENDENCY.value)
    why = world.client("researcher").get(f"/api/v1/jobs/{made['id']}/").json()["why_pending"]
    assert why["reason"] == "Dependency"
    assert why["headline"] == (f"It waits for job {first} to complete and job {second} to "
                               "fail or be cancelled.")


def test_a_dependency_the_viewer_may_not_see_is_named_by_its_team(world):
    theirs = submit(world, who="other_team", tenant="nlp")["id"]
    # an operator's job in vision waits for an nlp job: vision's lead sees the one only
    made = submit(world, who="operator", depends_on=[{"job": theirs, "when": "any"}])["id"]
    Job.objects.filter(pk=made).update(pending_reason=PendingReason.DEPENDENCY.value)
    why = world.client("lead").get(f"/api/v1/jobs/{made}/").json()["why_pending"]
    assert why["headline"] == "It waits for a job of team nlp to end."
    why = world.client("operator").get(f"/api/v1/jobs/{made}/").json()["why_pending"]
    assert why["headline"] == f"It waits for job {theirs} to end."


# ---------------------------------------------------------------- with the core
def _start(world: World, job_id: int) -> None:
    for alloc in Allocation.objects.filter(job_id=job_id, end__isnull=True):
        response = world.client(f"agent:{alloc.node.name}").post(
            f"/api/v1/agent/jobs/{job_id}/start/", {}, format="json")
        assert response.status_code == 200, response.json()


def _exit(world: World, job_id: int, outcome: str) -> None:
    node = Allocation.objects.filter(job_id=job_id, end__isnull=True).first().node.name
    response = world.client(f"agent:{node}").post(
        f"/api/v1/agent/jobs/{job_id}/exit/", {"outcome": outcome}, format="json")
    assert response.status_code == 200, response.json()


def test_a_dependent_waits_holding_nothing_and_starts_once_its_job_completed(world):
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    first = submit(world, gpus=4)["id"]
    made = submit(world, gpus=4, depends_on=[{"job": first}])["id"]
    assert not loop.step(now=now_s()).error
    job = Job.objects.get(pk=made)
    assert (job.state, job.pending_reason) == (JobState.QUEUED, PendingReason.DEPENDENCY)
    assert not Allocation.objects.filter(job_id=made).exists()
    _start(world, first)
    _exit(world, first, "completed")
    assert not loop.step(now=now_s()).error
    assert Job.objects.get(pk=made).state == JobState.PLACING


def test_a_dependency_that_can_never_be_met_cancels_the_dependent(world):
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    first = submit(world, gpus=4)["id"]
    made = submit(world, gpus=4, depends_on=[{"job": first, "when": "ok"}])["id"]
    assert not loop.step(now=now_s()).error
    _start(world, first)
    _exit(world, first, "failed")
    assert not loop.step(now=now_s()).error
    job = Job.objects.get(pk=made)
    assert job.state == JobState.CANCELLED
    row = Transition.objects.filter(job_id=made).last()
    assert row.reason == Reason.DEPENDENCY_NEVER_SATISFIED
    assert row.detail["job"] == str(first) or row.detail["job"] == first
    ok, output = replay_verify()
    assert ok, output


def test_a_dependent_of_a_job_cancelled_before_a_rebuild_is_cancelled_by_the_new_leader(
    world,
):
    first = submit(world)["id"]
    made = submit(world, depends_on=[{"job": first}])["id"]
    job_cancel(job_id=first, actor_name="vision-r1")
    loop = LeaderLoop(holder="test", ttl_s=15, heartbeat_timeout_s=0)
    assert not loop.step(now=now_s()).error
    assert Job.objects.get(pk=made).state == JobState.CANCELLED
