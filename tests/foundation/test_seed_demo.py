"""`manage.py seed_demo` builds the demo cluster and is idempotent."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Sum

from scheduler_app.models import Allocation, Job, Membership, Node, Pod, Tenant, Transition
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from tests.foundation.factories import sign_in

pytestmark = pytest.mark.django_db

MODELS = (Pod, Node, Tenant, Membership, Job, Allocation, Transition, get_user_model())


def everything() -> dict[str, list[dict]]:
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in MODELS}


def seed() -> str:
    out = StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_builds_three_pods_of_sixteen_eight_gpu_nodes_and_six_teams():
    output = seed()
    assert Pod.objects.count() == 3
    assert Node.objects.count() == 48
    assert set(Node.objects.values_list("gpu_count", "gpu_type")) == {(8, "H100")}
    assert Tenant.objects.count() == 6
    assert all(t.guaranteed_gpus > 0 and t.borrow_limit_gpus > 0 for t in Tenant.objects.all())
    guaranteed = Tenant.objects.aggregate(total=Sum("guaranteed_gpus"))["total"]
    assert guaranteed <= 3 * 16 * 8
    for tenant in Tenant.objects.all():
        roles = sorted(tenant.memberships.values_list("role", flat=True))
        assert roles == ["lead", "researcher", "researcher"]
    operator = get_user_model().objects.get(username="operator")
    assert operator.is_staff and not operator.memberships.exists()
    assert "operator" in output and "pretrain-lead" in output and "password" in output
    assert compare_with_tables(rebuild_from_log()) == []


def test_seed_demo_twice_changes_nothing():
    seed()
    before = everything()
    output = seed()
    assert everything() == before
    assert "(0 new)" in output and "0 new demo jobs" in output


def test_seeded_users_can_sign_in_with_the_printed_password(client):
    output = seed()
    password = output.split("password for new users: ")[1].split(")")[0]
    assert sign_in(client, "evals-r1", password)


def test_seed_demo_shows_a_pipeline_and_an_array():
    seed()
    sweep = Job.objects.get(idempotency_key="demo-2")
    report = Job.objects.get(name="mmlu-report")
    assert report.depends_on == [[sweep.pk, "ok"]]
    tasks = Job.objects.filter(name="probe-layer-sweep").order_by("array_index")
    assert tasks.count() == 12 and {t.array_max_running for t in tasks} == {3}
    assert [t.array_task for t in tasks][:2] == [f"{tasks[0].pk}_0", f"{tasks[0].pk}_1"]
