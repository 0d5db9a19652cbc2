"""HTTP to the scheduler's REST API with the standard library only (urllib), as the node
agent does (``scheduler_app/agent/client.py``), plus what a client on a laptop or in a
pipeline needs on top:

- **retries with backoff** on what a retry can cure: no connection, a dropped
  connection, a 5xx, a 429 (waiting at least its ``Retry-After``). A 4xx other than 429
  is an answer, never retried. Submits are safe to retry because they carry an
  idempotency key (``client.Client.submit``); a retried cancel meets a 409 the caller
  reads as "already cancelled" (``client.Job.cancel``);
- **errors as exceptions** that keep the API's field messages (``errors.ApiError``);
- **pagination links** followed on the configured origin, whatever host name the server
  put in them (behind a proxy it may know itself by another).
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .errors import ApiError, BadURL, ConnectionFailed, api_error

USER_AGENT = f"gpuq/{__version__}"
API_PATH = "/api/v1"
#: Statuses worth another try: the server may answer differently in a moment.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def api_base(url: str) -> str:
    """``http://host:8000``, ``http://host:8000/`` or ``http://host:8000/api/v1/`` ->
    ``http://host:8000/api/v1``."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadURL(f"not an http(s) URL: {url!r} (give http://host:port)")
    path = parts.path.rstrip("/")
    if not path.endswith(API_PATH):
        path += API_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def site_root(url: str) -> str:
    """The site's root (``http://host:8000``) of a URL or an API base."""
    base = api_base(url)
    return base[: -len(API_PATH)]


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    data: Any
    attempts: int = 1  # 1: answered at the first try


@dataclass(slots=True)
class Transport:
    """Requests to one API, authenticated by a bearer token."""

    url: str
    token: str
    timeout_s: float = 30.0
    retries: int = 4  # extra tries after the first
    backoff_s: float = 0.5  # the first wait; doubles each try, up to max_backoff_s
    max_backoff_s: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    base: str = field(init=False)

    def __post_init__(self) -> None:
        self.base = api_base(self.url)

    def get(self, path: str, params: Any = None) -> Any:
        return self.request("GET", path, params=params).data

    def post(self, path: str, body: Any = None, *, headers: dict[str, str] | None = None
             ) -> Response:
        return self.request("POST", path, body=body, headers=headers)

    def pages(self, path: str, params: Any = None) -> Iterator[dict[str, Any]]:
        """Every row of a cursor-paginated list, following ``next`` until it is null."""
        data = self.get(path, params)
        while True:
            if isinstance(data, list):  # an unpaginated list (tenants)
                yield from data
                return
            yield from data.get("results", [])
            following = data.get("next")
            if not following:
                return
            data = self.get(self.relative(following))

    def relative(self, link: str) -> str:
        """A link the API gave (absolute) as a path under :attr:`base`, with its query."""
        parts = urllib.parse.urlsplit(link)
        path = parts.path
        prefix = urllib.parse.urlsplit(self.base).path
        at = path.find(API_PATH + "/")
        if path.startswith(prefix):
            path = path[len(prefix):]
        elif at >= 0:
            path = path[at + len(API_PATH):]
        return path + (f"?{parts.query}" if parts.query else "")

    def request(self, method: str, path: str, *, body: Any = None, params: Any = None,
                headers: dict[str, str] | None = None) -> Response:
        url = self.base + path
        if params:
            query = urllib.parse.urlencode(params, doseq=True)
            url += ("&" if "?" in url else "?") + query
        data = None if body is None else json.dumps(body).encode()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._once(method, url, data, headers or {})
            except ConnectionFailed:
                if attempt > self.retries:
                    raise
                self.sleep(self._delay(attempt, None))
                continue
            if response.status in RETRY_STATUSES and attempt <= self.retries:
                self.sleep(self._delay(attempt, response.headers.get("retry-after")))
                continue
            response.attempts = attempt
            if response.status >= 400:
                raise api_error(response.status, _errors(response), method=method,
                                path=path, headers=response.headers, attempts=attempt)
            return response

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        # exponential, with jitter so that many clients retrying after one outage spread
        # out instead of arriving together
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        delay *= 0.75 + random.random() / 2
        try:
            return max(delay, float(retry_after)) if retry_after else delay
        except ValueError:
            return delay

    def _once(self, method: str, url: str, data: bytes | None,
              headers: dict[str, str]) -> Response:
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                status, raw, got = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as error:
            status, got = error.code, error.headers
            try:
                raw = error.read()
            except (OSError, http.client.HTTPException):
                raw = b""
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", error)
            raise ConnectionFailed(f"cannot reach {self.base}: {reason}") from error
        header_map = {k.lower(): v for k, v in (got.items() if got else [])}
        return Response(status=status, headers=header_map, data=_decode(raw, status))


def _decode(raw: bytes, status: int) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        if status < 400:
            raise ApiError(status, [{"field": None, "code": "not_json", "message":
                                     "the server answered something other than JSON: is "
                                     "the URL the scheduler's?"}]) from None
        return {"errors": [{"field": None, "code": "error", "message": _not_json(raw, status)}]}


def _not_json(raw: bytes, status: int) -> str:
    """A refusal that is not the API's JSON (a web page): one line, not the page (a
    Django debug page of 80 KB was printed whole: 2026-12-07)."""
    text = raw[:2000].decode(errors="replace")
    title = ""
    start = text.lower().find("<title>")
    if start >= 0:
        end = text.lower().find("</title>", start)
        title = " ".join(text[start + 7:end if end > 0 else None].split())[:200]
    if status == 404:
        return (f"HTTP 404{': ' + title if title else ''}: no such endpoint here; is the "
                "URL the scheduler's address (http://host:port, without a path)?")
    if status >= 500:
        return (f"the server failed (HTTP {status}{': ' + title if title else ''}); its log "
                "says why")
    if title:
        return f"HTTP {status}: {title}"
    return " ".join(text[:300].split()) or f"HTTP {status}"


def _errors(response: Response) -> list[dict[str, Any]]:
    data = response.data
    if isinstance(data, dict) and isinstance(data.get("errors"), list):
        return [e for e in data["errors"] if isinstance(e, dict)]
    return [{"field": None, "code": "error", "message": f"HTTP {response.status}"}]
