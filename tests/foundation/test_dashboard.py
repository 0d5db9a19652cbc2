"""The placeholder dashboard: sign-in required, and the overview shows the cluster."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from tests.foundation.factories import sign_in

pytestmark = pytest.mark.django_db


def test_the_home_page_asks_for_a_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


def test_a_signed_in_user_sees_teams_nodes_and_recent_jobs(client):
    call_command("seed_demo", "--password", "pw-for-tests-1", stdout=StringIO())
    assert sign_in(client, "pretrain-r1", "pw-for-tests-1")
    page = client.get("/").content.decode()
    assert "pretrain" in page and "pod-a-n01" in page and "llm-7b-pretrain" in page
    assert "QUEUED → PLACING" in page


def test_every_model_has_an_admin_page_for_the_operator(admin_client):
    for model in ("tenant", "membership", "pod", "node", "job", "allocation", "transition"):
        assert admin_client.get(f"/admin/scheduler_app/{model}/?q=x").status_code == 200
    assert admin_client.get("/admin/scheduler_app/lease/").status_code == 200
    assert admin_client.get("/admin/scheduler_app/transition/add/").status_code == 403
