"""``gpuq login``: a username and password in, an API token out.

The API issues tokens to a caller who is signed in (``POST /api/v1/tokens/``, docs/api.md
"Authentication"), and a password signs in through the site's login page (``/login/``),
as the browser does. So:

1. ``GET /login/``: the CSRF cookie, and the form's CSRF token;
2. ``POST /login/`` with the username and password: a redirect (and a session) when they
   are right, the form again when they are not;
3. ``POST /api/v1/tokens/`` in that session (with its CSRF header): the new token's key,
   shown this once;
4. ``POST /logout/``: the session ends; only the token remains.

The password goes to the server once and is kept nowhere.
"""

from __future__ import annotations

import contextlib
import http.client
import http.cookiejar
import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .errors import ApiError, ConnectionFailed, GpuqError, api_error
from .http import USER_AGENT, site_root

_FORM_TOKEN = re.compile(r'name="csrfmiddlewaretoken"\s+value="([^"]+)"')
CSRF_COOKIE = "csrftoken"  # Django's default CSRF_COOKIE_NAME


class LoginRefused(GpuqError):
    """The username or password was refused."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # the login's redirect is its answer ("signed in"): following it would fetch the
    # dashboard's home page for nothing
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def default_token_name() -> str:
    return f"gpuq on {socket.gethostname()}"[:100]


def token_from_password(url: str, username: str, password: str, *,
                        token_name: str | None = None, timeout_s: float = 30.0) -> str:
    """A new API token of ``username``: the key, which the server shows only now."""
    root = site_root(url)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)

    def send(path: str, data: bytes | None = None, headers: dict[str, str] | None = None
             ) -> tuple[int, bytes]:
        request = urllib.request.Request(root + path, data=data, method="POST" if data
                                         is not None else "GET")
        request.add_header("User-Agent", USER_AGENT)
        # Django checks the Referer of an HTTPS POST against the host
        request.add_header("Referer", root + "/login/")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with opener.open(request, timeout=timeout_s) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            raise ConnectionFailed(f"cannot reach {root}: "
                                   f"{getattr(error, 'reason', error)}") from error

    status, page = send("/login/")
    if status != 200:
        raise GpuqError(f"{root}/login/ answered HTTP {status}: is this the scheduler's URL?")
    found = _FORM_TOKEN.search(page.decode(errors="replace"))
    form_token = found.group(1) if found else _cookie(jar, CSRF_COOKIE)
    status, _ = send("/login/", urllib.parse.urlencode({
        "username": username, "password": password, "csrfmiddlewaretoken": form_token or "",
        "next": "/",
    }).encode(), {"Content-Type": "application/x-www-form-urlencoded"})
    if status == 200:
        raise LoginRefused("the username or password was refused")
    if status not in (301, 302, 303):
        raise GpuqError(f"signing in answered HTTP {status}")
    # the CSRF secret is rotated at sign-in: the header must carry the new one
    csrf = {"X-CSRFToken": _cookie(jar, CSRF_COOKIE) or form_token or ""}
    status, body = send("/api/v1/tokens/", json.dumps(
        {"name": token_name or default_token_name()}).encode(),
        {**csrf, "Content-Type": "application/json", "Accept": "application/json"})
    data = _json(body)
    if status != 201 or not isinstance(data, dict) or "key" not in data:
        errors = data.get("errors") if isinstance(data, dict) else None
        raise api_error(status, errors or [], method="POST", path="/tokens/")
    # the token is what we came for: a failed sign-out leaves a session that expires
    with contextlib.suppress(ApiError, ConnectionFailed, GpuqError):
        send("/logout/", b"", csrf)
    return str(data["key"])


def _cookie(jar: http.cookiejar.CookieJar, name: str) -> str | None:
    for cookie in jar:
        if cookie.name == name:
            return cookie.value
    return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
