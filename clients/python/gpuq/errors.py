"""What can go wrong, as exceptions a pipeline can catch by kind.

Every refusal of the API carries its field messages: the API answers every error with
``{"errors": [{"field", "code", "message"}]}`` (docs/api.md, "Errors"), and
:class:`ApiError` keeps that list as ``.errors`` so a caller can show each message at its
field, as the dashboard's form does.
"""

from __future__ import annotations

from typing import Any


class GpuqError(Exception):
    """The root of every error this package raises."""


class ConfigError(GpuqError):
    """No URL or token, or an unreadable config file: says what to set."""


class BadURL(ConfigError, ValueError):
    """A server address that is not an http(s) URL (a ValueError too, as it always was)."""


class ConnectionFailed(GpuqError):
    """The server could not be reached (after the retries)."""


class ApiError(GpuqError):
    """The API refused the request. ``status`` is the HTTP status, ``errors`` the API's
    list of ``{"field", "code", "message"}``; ``code``, ``field`` and ``message`` are the
    first one's."""

    def __init__(self, status: int, errors: list[dict[str, Any]], *, method: str = "",
                 path: str = "", headers: dict[str, str] | None = None,
                 attempts: int = 1) -> None:
        self.status = status
        self.attempts = attempts  # > 1: an earlier try may have done it (Job.cancel)
        self.errors = errors or [{"field": None, "code": "error", "message": f"HTTP {status}"}]
        self.method = method
        self.path = path
        self.headers = headers or {}
        first = self.errors[0]
        self.code = str(first.get("code") or "error")
        self.field: str | None = first.get("field")
        self.message = str(first.get("message") or "")
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [f"{e['field']}: {e.get('message', '')}" if e.get("field")
                 else str(e.get("message", "")) for e in self.errors]
        return f"{self.status} {'; '.join(parts)}"

    def field_messages(self) -> dict[str | None, list[str]]:
        """Field (None: the request as a whole) -> its messages, in the API's order."""
        out: dict[str | None, list[str]] = {}
        for e in self.errors:
            out.setdefault(e.get("field"), []).append(str(e.get("message", "")))
        return out


class InvalidRequest(ApiError):
    """400: bad input (an unknown tenant, too many GPUs, a bad value): see ``errors``."""


class Unauthorized(ApiError):
    """401: no token, or an unknown or revoked one: ``gpuq login`` issues a new one."""


class Forbidden(ApiError):
    """403: signed in, but not allowed (someone else's job, a tenant you are not in)."""


class NotFound(ApiError):
    """404: no such job, tenant or endpoint."""


class Conflict(ApiError):
    """409: the job's state does not allow it (cancelling a final job), or an
    idempotency key reused for a different job."""


class Throttled(ApiError):
    """429 after the retries: too many requests; batch submits."""


class ServerError(ApiError):
    """5xx after the retries."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    429: Throttled,
}


def api_error(status: int, errors: list[dict[str, Any]], **kwargs: Any) -> ApiError:
    """The :class:`ApiError` subclass for ``status``."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, errors, **kwargs)
