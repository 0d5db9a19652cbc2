"""The browser's middleware, stepped over by token-authenticated API requests.

A request to ``/api/v1/`` whose ``Authorization`` header names a token scheme (``Bearer``
or ``Token``) is authenticated by ``ApiTokenAuthentication`` and nothing else: that class
either authenticates it or refuses it (401), and session authentication is never asked.
Every view under ``/api/v1/`` is a DRF view (CSRF-exempt; DRF enforces CSRF itself, for
session-authenticated requests only) or the CSRF-exempt JSON 404, and none uses the
session, ``request.user`` of Django's own request (DRF sets it when it authenticates) or
messages. So for such a request the session, CSRF, authentication and messages middleware
do nothing that changes its answer: no cookie is read or set, no ``Vary: Cookie`` is added
(nothing reads the session). They cost a few hundred function calls a request, on the
path pipelines submit thousands of jobs through, so these subclasses hand such a request
straight on. Every other request (the dashboard, the admin, ``/api/schema/``,
``/api/docs/``, the API with a session or no credentials) goes through them as before.
The security and clickjacking middleware (their headers) run for every request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware

from .authentication import SCHEMES

#: The path prefix of the token-authenticated API (scheduler_app/urls.py).
API_PREFIX = "/api/v1/"

_ATTR = "_token_api"


def token_api_request(request: HttpRequest) -> bool:
    """Is ``request`` one ``ApiTokenAuthentication`` alone decides: under ``/api/v1/``,
    with an Authorization header whose scheme it takes (split as DRF's
    ``get_authorization_header`` splits it). Remembered on the request."""
    known = request.__dict__.get(_ATTR)
    if known is None:
        known = False
        if request.path_info.startswith(API_PREFIX):
            header = request.META.get("HTTP_AUTHORIZATION")
            if header:
                try:
                    raw = header.encode("iso-8859-1") if isinstance(header, str) else header
                except UnicodeEncodeError:
                    raw = b""  # DRF refuses it its own way: leave it to the full path
                parts = raw.split(None, 1)
                known = bool(parts) and parts[0].lower() in SCHEMES
        request.__dict__[_ATTR] = known
    return known


class _BrowserOnly:
    """Run the middleware for every request but a token-authenticated API request."""

    get_response: Callable[[HttpRequest], HttpResponseBase]

    def __call__(self, request: HttpRequest) -> Any:
        if not getattr(self, "_is_coroutine", None) and token_api_request(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class SessionMiddleware(_BrowserOnly, SessionMiddleware):
    pass


class CsrfViewMiddleware(_BrowserOnly, CsrfViewMiddleware):
    # process_view still runs (Django calls it apart from __call__): for the CSRF-exempt
    # API views it returns at once, as it did.
    pass


class AuthenticationMiddleware(_BrowserOnly, AuthenticationMiddleware):
    pass


class MessageMiddleware(_BrowserOnly, MessageMiddleware):
    pass
