"""Throttles: per user, per node agent, and per address for anonymous callers.

Rates come from settings (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], set from the
API_THROTTLE_* environment variables). Counters live in Django's cache: the default
local-memory cache counts per process; point CACHES at Redis to count across
gunicorn workers.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from .access import is_agent


class UserThrottle(SimpleRateThrottle):
    scope = "user"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        user = request.user
        if not user or not user.is_authenticated or is_agent(user):
            return None
        return self.cache_format % {"scope": self.scope, "ident": user.pk}


class AgentThrottle(SimpleRateThrottle):
    scope = "agent"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not is_agent(request.user):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.node.pk}


class AnonThrottle(SimpleRateThrottle):
    scope = "anon"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
