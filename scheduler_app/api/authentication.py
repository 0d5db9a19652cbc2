"""Who is calling: a user (session or user token), or a node agent (agent token).

``Authorization: Bearer <key>`` (``Token <key>`` is accepted too, as DRF clients send
it). A user token authenticates as its user. An agent token authenticates as an
:class:`AgentPrincipal` bound to its node: authenticated, never staff, member of no
tenant, so every user endpoint refuses it and only the agent endpoints accept it.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from scheduler_app.models import Node

from .models import ApiToken
from .tokens import token_find


def count_anonymous(request: Request) -> None:
    """``throttling.count_anonymous`` (imported here when called: throttling needs this
    module's AgentPrincipal)."""
    from .throttling import count_anonymous as count

    count(request)

SCHEMES = (b"bearer", b"token")


class AgentPrincipal:
    """``request.user`` for a node agent."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, node: Node, token: ApiToken) -> None:
        self.node = node
        self.token = token

    @property
    def username(self) -> str:
        return f"agent:{self.node.name}"

    def get_username(self) -> str:
        return self.username

    def __str__(self) -> str:
        return self.username


class ApiTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in SCHEMES:
            return None  # not ours: let session authentication try
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: send 'Authorization: Bearer <token>'."
            )
        try:
            key = parts[1].decode()
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("The token is not valid text.") from error
        token = token_find(key=key)
        if token is None:
            count_anonymous(request)  # a made-up token is no credential: 429 past the rate
            raise exceptions.AuthenticationFailed("Unknown or revoked token.")
        if token.node_id is not None:
            return AgentPrincipal(token.node, token), token
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("The token's user is inactive.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        # Its presence turns "no credentials" into 401 (not 403) for every endpoint.
        return f'{self.keyword} realm="api"'


class AnonymousThrottleAuthentication(BaseAuthentication):
    """The last authenticator: reached only when no other found credentials. It
    authenticates nobody; it counts the request against its address's anonymous budget
    (``API_THROTTLE_ANON``) and answers 429 past it. As a throttle it never ran: DRF
    refuses an unauthenticated request (401) before its throttles."""

    def authenticate(self, request: Request) -> None:
        count_anonymous(request)
        return None
