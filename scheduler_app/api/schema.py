"""OpenAPI details drf-spectacular cannot infer: the bearer token scheme, and the error
responses every operation may give (one ``Errors`` shape, docs/api.md "Errors")."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

ERRORS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["errors"],
    "properties": {
        "errors": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["field", "code", "message"],
                "properties": {
                    "field": {
                        "type": "string", "nullable": True,
                        "description": "The input at fault (jobs[3].gpus in a batch), or "
                                       "null when no single field is.",
                    },
                    "code": {"type": "string", "description": "A stable machine-readable "
                             "word, e.g. never_fits, illegal_transition, not_authenticated."},
                    "message": {"type": "string", "description": "What is wrong and what "
                                "is allowed, in words."},
                },
            },
        }
    },
}

WHY = {
    "400": "Bad input: each error names the field and says what is allowed.",
    "401": "No credentials, or an unknown or revoked token.",
    "403": "Authenticated, but not allowed (never hidden behind a 404).",
    "404": "No such object.",
    "405": "Method not allowed.",
    "409": "The object's state does not allow this (e.g. cancelling a final job).",
    "413": "The body is over 1 MiB (request_too_large): nothing was read.",
    "415": "Send application/json.",
    "429": "Throttled: wait Retry-After seconds.",
    "503": "The database is busy (database_busy: another write held it past its timeout): "
           "nothing was done; retry after Retry-After seconds.",
}


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "scheduler_app.api.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A user's token (pipelines) or a node's agent token: "
                           "'Authorization: Bearer <key>'.",
        }


def add_error_responses(result: dict[str, Any], generator: Any, request: Any,
                        public: bool) -> dict[str, Any]:
    """Postprocessing hook: the error responses of every operation of /api/v1/."""
    result.setdefault("components", {}).setdefault("schemas", {})["Errors"] = ERRORS_SCHEMA
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            codes = ["400", "401", "403", "405", "429", "503"]
            if "{" in path:
                codes.append("404")
            if method in ("post", "put", "patch", "delete"):
                codes.append("409")
            if "requestBody" in operation:
                codes += ["413", "415"]
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, {
                    "description": WHY[code],
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Errors"}}},
                })
    closed_request_bodies(result["components"]["schemas"])
    return result


def closed_request_bodies(schemas: dict[str, Any]) -> None:
    """A request body that refuses unknown keys (``KnownFieldsOnly``: 400
    ``unknown_field``) says so, ``additionalProperties: false``: a client built from the
    schema took extra keys for fine (2026-12-07). Its component is named as
    drf-spectacular names it: the class name, less "Serializer", plus "Request"."""
    from .fields import KnownFieldsOnly

    todo, seen = list(KnownFieldsOnly.__subclasses__()), set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo += cls.__subclasses__()
        name = cls.__name__.removesuffix("Serializer")
        for component in (f"{name}Request", f"Patched{name}Request"):
            schema = schemas.get(component)
            if schema is not None and schema.get("type") == "object":
                schema["additionalProperties"] = False
