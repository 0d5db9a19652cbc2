"""The request parser and the response negotiation: the fast paths answer what DRF's own
code answers."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.test import override_settings
from rest_framework.parsers import JSONParser

from .conftest import job_body


def _post_raw(world, body: bytes, content_type: str = "application/json", **extra):
    return world.client("researcher").generic("POST", "/api/v1/jobs/", body,
                                              content_type=content_type, **extra)


def test_an_escaped_lone_surrogate_is_a_400_not_a_500(world):
    body = json.dumps(job_body(name="x\ud800y")).encode()  # json escapes it: "\ud800"
    assert b"\\ud800" in body
    response = _post_raw(world, body)
    assert response.status_code == 400
    assert "lone surrogates" in response.json()["errors"][0]["message"]


def test_a_surrogate_written_as_bytes_is_refused_by_the_decoding(world):
    body = b'{"tenant": "vision", "name": "x\xed\xa0\x80y", "gpus": 1}'
    response = _post_raw(world, body)
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["errors"][0]["message"]


def test_escaped_text_that_is_valid_unicode_is_accepted(world):
    body = json.dumps(job_body(name="caf\u00e9 \U0001f680")).encode()  # escaped, pairs
    response = _post_raw(world, body)
    assert response.status_code == 201
    assert response.json()["name"] == "caf\u00e9 \U0001f680"


@pytest.mark.parametrize("body", [b"{", b"[1,", b'{"gpus": NaN}', b"\xff\xfe"])
def test_bad_json_gets_drfs_message(world, body):
    from io import BytesIO

    from rest_framework.exceptions import ParseError

    response = _post_raw(world, body)
    assert response.status_code == 400
    with pytest.raises(ParseError) as drf:
        JSONParser().parse(BytesIO(body), parser_context={})
    assert response.json()["errors"][0]["message"] == str(drf.value.detail)


@pytest.mark.parametrize("accept", [None, "", "*/*", "application/json", "application/*",
                                    " application/json ", "application/json; indent=2",
                                    "text/html, */*;q=0.8", "text/html", "application/xml"])
@pytest.mark.parametrize("path", ["/api/v1/me/", "/api/v1/me/?format=json",
                                  "/api/v1/me/?format=api"])
def test_negotiation_answers_what_drfs_default_answers(world, accept, path):
    extra = {"HTTP_ACCEPT": accept} if accept is not None else {}
    fast = world.client("researcher").get(path, **extra)
    rest_framework = {**settings.REST_FRAMEWORK}
    rest_framework.pop("DEFAULT_CONTENT_NEGOTIATION_CLASS")
    with override_settings(REST_FRAMEWORK=rest_framework):
        default = world.client("researcher").get(path, **extra)
    assert (fast.status_code, fast.get("Content-Type"), fast.content) == (
        default.status_code, default.get("Content-Type"), default.content)
    if accept in (None, "*/*", "application/json") and "api" not in path.split("?")[-1]:
        assert fast.status_code == 200 and fast["Content-Type"] == "application/json"
