"""``manage.py api_token``: issue for a user or a node, and revoke."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduler_app.api.models import ApiToken

pytestmark = pytest.mark.django_db


def issue(*args: str) -> str:
    out = StringIO()
    call_command("api_token", *args, stdout=out)
    return out.getvalue().strip()


def test_issued_keys_authenticate_their_user_and_node(world):
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue('--user', 'vision-lead')}")
    assert client.get("/api/v1/me/").json()["username"] == "vision-lead"
    agent = world.client(None)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {issue('--node', 'n3')}")
    assert agent.post("/api/v1/agent/heartbeat/", {}, format="json").json()["name"] == "n3"


def test_revoke_by_prefix(world):
    key = issue("--user", "vision-r1", "--name", "ci")
    call_command("api_token", "--revoke", key[:12], stdout=StringIO())
    assert ApiToken.objects.get(prefix=key[:12]).revoked_at is not None
    client = world.client(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/me/").status_code == 401


def test_unknown_users_and_nodes_are_errors(world):
    with pytest.raises(CommandError, match="no user"):
        issue("--user", "ghost")
    with pytest.raises(CommandError, match="no node"):
        issue("--node", "n99")


def test_the_admin_lists_tokens_without_keys(world, admin_client):
    page = admin_client.get("/admin/api/apitoken/")
    assert page.status_code == 200
    assert world.keys["researcher"].encode() not in page.content
