"""Throttles: per user, per node agent, and per address for anonymous callers.

DRF checks a view's permissions before its throttles, and every endpoint but the schema
needs credentials: a request without them (or with a token that is not one) was answered
401 before the anonymous throttle ran, so it never applied. The anonymous budget is
therefore counted while authenticating (:func:`count_anonymous`): by
``authentication.AnonymousThrottleAuthentication``, the last authenticator, when no
other found credentials, and by the token authenticator before it refuses an unknown
token. Past the rate such a request is 429, not 401.

Rates come from settings (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], set from the
API_THROTTLE_* environment variables). Counters live in Django's cache: the default
local-memory cache counts per process; point CACHES at Redis to count across
gunicorn workers.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from scheduler_app.breaker import cache_breaker
from scheduler_app.security import client_ip

from .access import is_agent

log = logging.getLogger("scheduler_app.api")


class FailOpenThrottle(SimpleRateThrottle):
    """A throttle that lets the request through when its cache fails (a Redis that is
    down or frozen, with CACHE_URL's timeouts), and leaves the cache alone for a while
    after (``breaker.cache_breaker``): a rate limit is not worth an outage of the API,
    which answered every request 500, or waited on a frozen Redis (docs/operations.md,
    "A frozen broker")."""

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None or not cache_breaker.allow():
            return True
        try:
            allowed = super().allow_request(request, view)
        except Exception:  # noqa: BLE001 - whatever the cache raised: count nothing
            cache_breaker.record(ok=False)
            log.warning("throttle %s not applied: its cache failed", self.scope,
                        exc_info=True)
            return True
        cache_breaker.record(ok=True)
        return allowed


class UserThrottle(FailOpenThrottle):
    scope = "user"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user = request.user
        if not user or not user.is_authenticated or is_agent(user):
            return None
        return self.cache_format % {"scope": self.scope, "ident": user.pk}


class AgentThrottle(FailOpenThrottle):
    scope = "agent"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not is_agent(request.user):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.node.pk}


#: Set on a request counted against its address's anonymous budget while authenticating.
ANON_COUNTED = "_anon_throttle_counted"


class AnonThrottle(FailOpenThrottle):
    scope = "anon"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if getattr(request, ANON_COUNTED, False):
            return None  # counted once already, while it authenticated as nobody
        if request.user and request.user.is_authenticated:
            return None
        return self.address_key(request)

    def get_ident(self, request: Request) -> str:
        # the sign-in throttle's address (LOGIN_CLIENT_IP_HEADER behind a proxy), not
        # DRF's, which takes X-Forwarded-For from any client: a made-up header per
        # request would have been a fresh budget per request
        return client_ip(request)

    def address_key(self, request: Request) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class _AnonCount(AnonThrottle):
    """The anonymous throttle while authenticating: ``request.user`` is not known yet (and
    reading it there would authenticate again)."""

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        return self.address_key(request)


def count_anonymous(request: Request) -> None:
    """Count ``request``, which has no valid credentials, against its address's anonymous
    budget (once); raise 429 (Throttled, with the wait) past it."""
    if getattr(request, ANON_COUNTED, False):
        return
    setattr(request, ANON_COUNTED, True)
    throttle = _AnonCount()
    if not throttle.allow_request(request, None):
        raise exceptions.Throttled(throttle.wait())
