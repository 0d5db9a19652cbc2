"""One error shape for every failure (docs/api.md, "Errors").

    {"errors": [{"field": "gpus", "code": "never_fits", "message": "..."}]}

``field`` names the input at fault (a dotted path, ``jobs[3].gpus`` in a batch) or is null
when no single field is (authentication, permissions, state conflicts). ``message``
says what is allowed. Service errors map to statuses: ``ServiceError`` 400,
``Forbidden`` 403, ``NotFound`` 404, ``Conflict`` (and the core's ``IllegalTransition``)
409; Django's ``ValidationError`` from the services' spec validation is 400 per field.
SQLite's "database is locked" (another connection held the one write lock past the busy
timeout) is 503 ``database_busy`` with ``Retry-After``: nothing was written, a retry
will do (it was a 500).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from scheduler_app.core.states import IllegalTransition
from scheduler_app.services.errors import Conflict, Forbidden, Invalid, NotFound, ServiceError


class ApiConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the current state."

    def __init__(self, detail: Any = None, code: str | None = None, field: str | None = None):
        super().__init__(detail, code)
        self.field = field


def flatten(detail: Any, path: str = "") -> list[dict[str, Any]]:
    """DRF's nested error detail as a flat list of {field, code, message}."""
    if isinstance(detail, dict):
        out: list[dict[str, Any]] = []
        for key, value in detail.items():
            if key in ("non_field_errors", "detail"):
                out += flatten(value, path)
            elif isinstance(key, int):  # a list serializer's errors, keyed by index
                out += flatten(value, f"{path}[{key}]")
            else:
                out += flatten(value, f"{path}.{key}" if path else str(key))
        return out
    if isinstance(detail, list):
        if all(isinstance(item, (dict, list)) for item in detail) and detail:
            # a list serializer: one entry per item, empty dicts for the good ones
            out = []
            for i, item in enumerate(detail):
                out += flatten(item, f"{path}[{i}]")
            return out
        out = []
        for item in detail:
            out += flatten(item, path)
        return out
    code = getattr(detail, "code", None) or "invalid"
    return [{"field": path or None, "code": str(code), "message": str(detail)}]


def from_django_validation(error: DjangoValidationError, prefix: str = "") -> list[dict]:
    if hasattr(error, "error_dict"):
        out = []
        for field, errors in error.error_dict.items():
            name = f"{prefix}.{field}" if prefix else field
            for e in errors:
                for message in e.messages:
                    out.append({"field": name, "code": e.code or "invalid", "message": message})
        return out
    return [
        {"field": prefix or None, "code": e.code or "invalid", "message": m}
        for e in error.error_list
        for m in e.messages
    ]


def _service_status(error: ServiceError) -> int:
    if isinstance(error, Forbidden):
        return status.HTTP_403_FORBIDDEN
    if isinstance(error, NotFound):
        return status.HTTP_404_NOT_FOUND
    if isinstance(error, Conflict):
        return status.HTTP_409_CONFLICT
    return status.HTTP_400_BAD_REQUEST


def from_service_error(error: ServiceError) -> list[dict[str, Any]]:
    if isinstance(error, Invalid) and error.errors:
        return [{"field": field, "code": error.code_of(field), "message": message}
                for field, message in error.errors.items()]
    return [{"field": error.field or None, "code": error.code, "message": error.message}]


def error_response(status_code: int, errors: list[dict], headers: dict | None = None) -> Response:
    return Response({"errors": errors}, status=status_code, headers=headers)


def json_error(status_code: int, errors: list[dict]) -> JsonResponse:
    """The error shape outside DRF (a middleware, a plain Django view)."""
    return JsonResponse({"errors": errors}, status=status_code)


#: Seconds a client waits before it retries a request the busy database refused.
BUSY_RETRY_AFTER_S = 2


def database_busy(exc: BaseException) -> bool:
    """Did ``exc`` end a request because the database was locked by another writer
    (SQLite: "database is locked", after its busy timeout)?"""
    return isinstance(exc, OperationalError) and "database is locked" in str(exc)


def busy_errors() -> list[dict[str, Any]]:
    return [{"field": None, "code": "database_busy",
             "message": "The database is busy with another write: nothing was written. "
                        f"Retry after {BUSY_RETRY_AFTER_S} s (Retry-After)."}]


def named_or_404(rows: Any, name: str, what: str, where: str) -> Any:
    """The row of ``rows`` (a manager or a queryset) whose ``name`` is ``name``; else a 404
    that says what was looked for and where the names are listed, as the filters' 400 does
    (a misspelt node in ``/nodes/pod-a-n1/drain/`` got Django's "No Node matches the given
    query."; an operator's session, 2026-12-07)."""
    found = rows.filter(name=name).first()
    if found is None:
        raise exceptions.NotFound(f"No {what} named {name!r}: see {where}.")
    return found


def id_or_404(rows: Any, pk: int, what: str, where: str = "") -> Any:
    """The row of ``rows`` (a model's manager or a queryset) with id ``pk``; else a 404 in
    the product's words ("No token 12: see GET /api/v1/tokens/."), not Django's "No
    ApiToken matches the given query." (a pipeline author's session, 2026-12-07)."""
    found = rows.filter(pk=pk).first()
    if found is None:
        raise exceptions.NotFound(f"No {what} {pk}" + (f": see {where}." if where else "."))
    return found


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if database_busy(exc):
        return error_response(503, busy_errors(),
                              headers={"Retry-After": str(BUSY_RETRY_AFTER_S)})
    if isinstance(exc, DjangoValidationError):
        return error_response(400, from_django_validation(exc))
    if isinstance(exc, ServiceError):
        return error_response(_service_status(exc), from_service_error(exc))
    if isinstance(exc, IllegalTransition):
        return error_response(409, [{"field": None, "code": "illegal_transition",
                                     "message": str(exc)}])
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return None  # a bug: let it be a 500 with the traceback in the logs
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten(exc.detail)
    else:
        codes = exc.get_codes()
        errors = [{"field": getattr(exc, "field", None),
                   "code": codes if isinstance(codes, str) else exc.default_code,
                   "message": str(exc.detail)}]
    headers = {k: v for k, v in response.items() if k in ("WWW-Authenticate", "Retry-After",
                                                            "Allow")}
    return error_response(response.status_code, errors, headers)
