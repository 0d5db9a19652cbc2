"""The scheduler's agent API over HTTP, with the standard library only (urllib): a node
needs nothing installed but Python.

Every call returns the decoded JSON body; the server's clock (its ``Date`` header) is kept
in :attr:`ApiClient.server_skew_s` so deadlines the server states can be read on the
node's clock. Errors come in two kinds the agent treats differently:

- :class:`ApiRefused`: the server answered 4xx (bad input, not this node's job, a state
  that no longer allows the report): retrying the same call cannot help;
- :class:`ApiUnavailable`: no answer, 5xx, or 429: try again later (``retry_after_s``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime
from typing import Any

USER_AGENT = "gpu-scheduler-agent/1"


class ApiError(Exception):
    pass


class ApiRefused(ApiError):
    """A 4xx answer: ``status``, and the first error's ``code`` and ``field``."""

    def __init__(self, status: int, code: str, field: str | None, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.field = field
        self.message = message


class ApiUnavailable(ApiError):
    """No usable answer: the network, a 5xx, or throttling (429, ``retry_after_s``)."""

    def __init__(self, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _with_run(body: dict[str, Any], run: str | None) -> dict[str, Any] | None:
    if run is not None:
        body["run"] = run
    return body or None


def api_base(url: str) -> str:
    """``http://host:8000`` or ``http://host:8000/api/v1/`` -> ``http://host:8000/api/v1``."""
    base = url.rstrip("/")
    return base if base.endswith("/api/v1") else base + "/api/v1"


class ApiClient:
    """The agent endpoints of ``docs/agent-protocol.md``, authenticated by the node's
    agent token."""

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0) -> None:
        self.base = api_base(url)
        self.token = token
        self.timeout_s = timeout_s
        self.server_skew_s = 0.0  # server clock minus ours, from the last Date header

    # ------------------------------------------------------------------ the endpoints
    def register(self, *, name: str, pod: str, gpus: int, gpu_type: str = "",
                 rail: int = 0) -> dict[str, Any]:
        return self.call("POST", "/agent/register/", {
            "name": name, "pod": pod, "gpus": gpus, "gpu_type": gpu_type, "rail": rail})

    def heartbeat(self) -> dict[str, Any]:
        return self.call("POST", "/agent/heartbeat/")

    def assignments(self) -> dict[str, Any]:
        return self.call("GET", "/agent/assignments/")

    # each report names its run (the start item's key) when it is known: a report of an
    # earlier run, delivered late, is refused (409 stale_run) rather than moving the next
    def confirm_start(self, job_id: int, *, run: str | None = None) -> dict[str, Any]:
        return self.call("POST", f"/agent/jobs/{job_id}/start/", _with_run({}, run))

    def report_checkpoint(self, job_id: int, *, resume_pointer: str,
                          checkpoint_at: str | None = None,
                          run: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"resume_pointer": resume_pointer}
        if checkpoint_at:
            body["checkpoint_at"] = checkpoint_at
        return self.call("POST", f"/agent/jobs/{job_id}/checkpoint/", _with_run(body, run))

    def ack_preempt(self, job_id: int, *, run: str | None = None) -> dict[str, Any]:
        return self.call("POST", f"/agent/jobs/{job_id}/preempt-ack/", _with_run({}, run))

    def report_exit(self, job_id: int, *, outcome: str, exit_code: int | None = None,
                    run: str | None = None) -> dict[str, Any]:
        return self.call("POST", f"/agent/jobs/{job_id}/exit/",
                         _with_run({"outcome": outcome, "exit_code": exit_code}, run))

    def push_log(self, job_id: int, *, stdout: str, stderr: str) -> dict[str, Any]:
        return self.call("POST", f"/agent/jobs/{job_id}/log/",
                         {"stdout": stdout, "stderr": stderr})

    # ------------------------------------------------------------------ HTTP
    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                self._clock(response.headers.get("Date"))
                raw = response.read()
        except urllib.error.HTTPError as error:
            self._clock(error.headers.get("Date") if error.headers else None)
            raw = error.read()
            if error.code == 429 or error.code >= 500:
                retry = _float(error.headers.get("Retry-After") if error.headers else None)
                raise ApiUnavailable(f"{method} {path}: HTTP {error.code}", retry) from error
            code, field, message = _first_error(raw)
            raise ApiRefused(error.code, code, field, message) from error
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            raise ApiUnavailable(f"{method} {path}: {error}") from error
        if not raw:
            return {}
        try:
            decoded = json.loads(raw)
        except ValueError as error:
            raise ApiUnavailable(f"{method} {path}: not JSON") from error
        return decoded if isinstance(decoded, dict) else {"results": decoded}

    def _clock(self, date: str | None) -> None:
        if not date:
            return
        try:
            server = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return
        # the header has whole seconds: the server's clock is in [date, date + 1)
        self.server_skew_s = server + 0.5 - time.time()


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _first_error(raw: bytes) -> tuple[str, str | None, str]:
    try:
        errors = json.loads(raw).get("errors") or []
        first = errors[0]
        return str(first.get("code", "error")), first.get("field"), str(first.get("message", ""))
    except (ValueError, AttributeError, IndexError, TypeError):
        return "error", None, raw[:200].decode(errors="replace")
