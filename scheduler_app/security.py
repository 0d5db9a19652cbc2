"""Security headers and the client's address.

The Content-Security-Policy header (Django 5.2 has none of its own; 6.0 adds one): set
on every answer when ``settings.CONTENT_SECURITY_POLICY`` is not empty (the production
default, settings.py), unless a view set its own. Static files served by WhiteNoise come
before this middleware answers, and need none: they are not documents.

:func:`client_ip`: the address sign-in throttling counts (django-axes).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

HEADER = "Content-Security-Policy"


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        # read at each answer (an attribute lookup), so that the browser tests can run
        # the dashboard under the production policy (tests/browser/conftest.py)
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", "")
        if policy and HEADER not in response:
            response[HEADER] = policy
        return response


def client_ip(request: HttpRequest) -> str:
    """The client's address: ``REMOTE_ADDR``, or with ``LOGIN_CLIENT_IP_HEADER`` set (a
    proxy in front, which appends the address it saw), that header's last address: the
    one our proxy wrote, where the earlier ones are the client's to choose."""
    header = getattr(settings, "LOGIN_CLIENT_IP_HEADER", "")
    if header:
        meta = "HTTP_" + header.upper().replace("-", "_")
        forwarded = request.META.get(meta, "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return request.META.get("REMOTE_ADDR", "")
