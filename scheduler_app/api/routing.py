"""URL converters and the JSON 404 for /api/v1/ paths that match no route, so every
answer under /api/v1/ is JSON and no path parameter can reach the database unchecked."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .errors import json_error


class IdConverter:
    """A job or token id. Signed (a negative id is a 404 like any missing one, not a path
    that matches nothing) and at most 18 digits: larger numbers overflow the database's
    integer types and are no id."""

    regex = "-?[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class NameConverter:
    """A node's name: anything but a slash or a NUL (which PostgreSQL refuses in text),
    at most 128 characters (Node.name's length)."""

    regex = "[^/\x00]{1,128}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


@csrf_exempt  # it writes nothing; a CSRF refusal here would answer in HTML
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    return json_error(404, [{"field": None, "code": "not_found",
                             "message": f"No endpoint {request.path}: see /api/docs/."}])
