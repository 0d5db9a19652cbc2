"""The OpenAPI schema: it validates, it is served with its docs, and the API keeps its
promises (schemathesis: no 5xx, every status, content type, header and body as the
schema says) on generated requests, run against the WSGI app in-process."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from scheduler_app.wsgi import application

pytestmark = pytest.mark.django_db

#: Bounded so the run takes well under two minutes (about 30 operations, a few dozen
#: examples each); seeded so a failure reproduces.
SCHEMATHESIS_CONFIG = """
seed = 20260106
[generation]
max-examples = 15
[phases.coverage]
enabled = true
[phases.stateful]
enabled = false
[checks.positive_data_acceptance]
# A well-formed request may still break a rule the schema cannot express (a job larger
# than the cluster, a node that does not exist yet): 400 and 404 are right for those.
expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429"]
"""


def test_the_openapi_schema_validates():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)  # drf-spectacular's own check (OpenAPI 3.0 JSON schema)
    validate(schema)  # openapi-spec-validator
    paths = set(schema["paths"])
    assert {"/api/v1/jobs/", "/api/v1/jobs/batch/", "/api/v1/jobs/{id}/cancel/",
            "/api/v1/agent/jobs/{id}/exit/", "/api/v1/cluster/transitions/"} <= paths
    assert schema["components"]["securitySchemes"]["tokenAuth"]["scheme"] == "bearer"
    submit = schema["paths"]["/api/v1/jobs/"]["post"]
    assert {"201", "400", "401", "403", "429", "503"} <= set(submit["responses"])
    assert "database_busy" in submit["responses"]["503"]["description"]


def test_the_schema_says_what_the_server_refuses():
    """Found by a pipeline author reading the schema against the server (2026-12-07):
    bodies that refuse unknown keys did not say so, 413 was in no operation, and seven
    request bodies were described by an internal docstring."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    parts = schema["components"]["schemas"]
    for name in ("SubmitInRequest", "JobSpecInRequest", "DependencyInRequest",
                 "BatchInRequest", "ArraySubmitInRequest", "CancelInRequest",
                 "PatchedQuotaPatchInRequest"):
        assert parts[name]["additionalProperties"] is False, name
    assert "DRF drops" not in str(parts)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if path.startswith("/api/v1/") and "requestBody" in operation:
                assert "request_too_large" in operation["responses"]["413"]["description"], (
                    method, path)


def test_the_schema_has_dependencies_and_job_arrays():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    paths, parts = schema["paths"], schema["components"]["schemas"]
    assert {"/api/v1/arrays/", "/api/v1/arrays/{id}/", "/api/v1/arrays/{id}/cancel/"} <= set(
        paths)
    assert "array" in {p["name"] for p in paths["/api/v1/jobs/"]["get"]["parameters"]}
    job = parts["JobOut"]["properties"]
    assert {"depends_on", "array_id", "array_index", "array_count", "array_max_running",
            "array_task"} <= set(job)
    assert job["array_task"]["readOnly"] and job["array_task"]["nullable"]
    submit = parts["SubmitInRequest"]["properties"]["depends_on"]
    assert submit["items"]["$ref"].endswith("/DependencyInRequest")
    dependency = parts["DependencyInRequest"]["properties"]
    assert set(dependency) == {"job", "index", "when"}
    assert parts["WhenEnum"]["enum"] == ["ok", "any", "notok"]
    array = parts["ArrayInRequest"]["properties"]
    assert (array["count"]["minimum"], array["count"]["maximum"]) == (1, 10_000)
    assert array["max_running"]["minimum"] == 1
    assert "array" in parts["ArraySubmitInRequest"]["required"]
    assert {"array_id", "count", "jobs", "tenant"} <= set(parts["ArrayOut"]["properties"])


def test_the_schema_and_its_docs_are_served(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "GPU scheduler API"
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content and b"drf_spectacular_sidecar" in docs.content


@pytest.fixture
def _wsgi_calls_keep_the_test_transaction():
    # Django closes "old" connections at each request's end; in a test that would close
    # the transaction the test runs in. Its test client disconnects these for the same
    # reason; schemathesis calls the raw WSGI app.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def load_schema() -> schemathesis.schemas.BaseSchema:
    """The schema as the app generates it, calls going to the WSGI app in-process. Loaded
    eagerly: schemathesis' lazy (fixture) loader does not run on pytest 9."""
    config = schemathesis.config.SchemathesisConfig.from_str(SCHEMATHESIS_CONFIG)
    loaded = schemathesis.openapi.from_dict(
        SchemaGenerator().get_schema(request=None, public=True), config=config)
    loaded.app = application
    return loaded


schema = load_schema()


@schema.parametrize()
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much], deadline=None)
def test_the_api_keeps_the_schemas_promises(case, world, _wsgi_calls_keep_the_test_transaction):
    # agents' endpoints with an agent token, everything else as an operator (who may do
    # everything): the most code runs
    who = "agent:n0" if case.path.startswith("/api/v1/agent/") else "operator"
    case.call_and_validate(headers={"Authorization": f"Bearer {world.keys[who]}"})
