"""Throttles: per user, per node agent, and per address for anonymous callers.

Rates come from settings (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], set from the
API_THROTTLE_* environment variables). Counters live in Django's cache: the default
local-memory cache counts per process; point CACHES at Redis to count across
gunicorn workers.
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from scheduler_app.breaker import cache_breaker

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


class AnonThrottle(FailOpenThrottle):
    scope = "anon"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
