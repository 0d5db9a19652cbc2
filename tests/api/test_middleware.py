"""Token-authenticated /api/v1/ requests step over the browser's middleware (sessions,
CSRF, authentication, messages: scheduler_app/api/middleware.py); everything else goes
through it as before, and the security headers are on every answer."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from scheduler_app.api.middleware import token_api_request

SPEC = {"tenant": "vision", "name": "mw", "gpus": 1}


@pytest.mark.parametrize(("path", "header", "expected"), [
    ("/api/v1/jobs/", "Bearer abc", True),
    ("/api/v1/jobs/", "token abc", True),
    ("/api/v1/jobs/", "BEARER", True),  # malformed: ApiTokenAuthentication refuses it
    ("/api/v1/jobs/", "Basic abc", False),
    ("/api/v1/jobs/", None, False),
    ("/api/v1/jobs/", "Bearer\xa0abc", False),  # one word to DRF's byte split
    ("/api/schema/", "Bearer abc", False),
    ("/api/docs/", "Bearer abc", False),
    ("/admin/", "Bearer abc", False),
    ("/", "Bearer abc", False),
])
def test_which_requests_skip(path, header, expected):
    extra = {} if header is None else {"HTTP_AUTHORIZATION": header}
    assert token_api_request(RequestFactory().get(path, **extra)) is expected


def test_a_token_submit_sets_no_cookie_and_keeps_the_security_headers(world):
    r = world.client("researcher").post("/api/v1/jobs/", SPEC, format="json")
    assert r.status_code == 201, r.content
    assert not r.cookies
    assert "Vary" not in r
    assert r["X-Frame-Options"] == "DENY"
    assert r["X-Content-Type-Options"] == "nosniff"
    assert r["Referrer-Policy"] == "same-origin"


def test_a_bad_token_is_still_a_401(world):
    r = Client().post("/api/v1/jobs/", SPEC, content_type="application/json",
                      HTTP_AUTHORIZATION="Bearer gsu_nope")
    assert r.status_code == 401
    assert r["WWW-Authenticate"] == 'Bearer realm="api"'
    assert r["X-Frame-Options"] == "DENY"


def test_the_session_still_works_and_still_needs_csrf(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["researcher"])
    assert client.get("/api/v1/me/").status_code == 200
    refused = client.post("/api/v1/jobs/", SPEC, content_type="application/json")
    assert refused.status_code == 403
    client.get("/login/")  # the csrftoken cookie
    token = client.cookies["csrftoken"].value
    made = client.post("/api/v1/jobs/", SPEC, content_type="application/json",
                       HTTP_X_CSRFTOKEN=token)
    assert made.status_code == 201, made.content


def test_a_request_the_locked_database_refused_is_a_503_with_retry_after(world,
                                                                          monkeypatch):
    """On SQLite a 10,000-task array held the write lock for 8.7 s: the agents' heartbeats
    were 500s ("database is locked") and the scheduler marked their nodes down
    (2026-12-07). Busy is a 503 in the API's shape, with Retry-After: a retry will do."""
    from django.db import OperationalError

    import scheduler_app.api.agents as agent_views

    def locked(**_kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(agent_views, "agent_heartbeat", locked)
    response = world.client("agent:n0").post("/api/v1/agent/heartbeat/", {}, format="json")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json() == {"errors": [{
        "field": None, "code": "database_busy",
        "message": "The database is busy with another write: nothing was written. Retry "
                   "after 2 s (Retry-After)."}]}

    def broken(**_kwargs):
        raise OperationalError("no such table: scheduler_app_node")

    monkeypatch.setattr(agent_views, "agent_heartbeat", broken)
    with pytest.raises(OperationalError):  # any other database error is still a bug: 500
        world.client("agent:n0").post("/api/v1/agent/heartbeat/", {}, format="json")
