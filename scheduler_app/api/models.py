"""API tokens: bearer credentials for pipelines (bound to a user) and node agents
(bound to a node).

Only a SHA-256 of the key is stored: the key is shown once, when it is issued, and a
database dump leaks no usable credential. Keys are 256 random bits, so a plain hash (not
a slow password hash) is enough and keeps authentication cheap at submit rates.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler_app.models import Node


class ApiToken(models.Model):
    """A user's token (``user`` set) or a node agent's token (``node`` set), never both."""

    name = models.CharField(max_length=100, blank=True, default="")
    #: The first characters of the key, to recognise a token in a list.
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
    )
    node = models.ForeignKey(
        Node, on_delete=models.CASCADE, null=True, blank=True, related_name="agent_tokens"
    )
    created_at = models.DateTimeField()
    #: Refreshed at most once a minute (a write per request would cost the submit rate).
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(node__isnull=True))
                | (Q(user__isnull=True) & Q(node__isnull=False)),
                name="api_token_user_xor_node",
            ),
        ]

    def __str__(self) -> str:
        whose = f"node {self.node_id}" if self.node_id else f"user {self.user_id}"
        return f"token {self.prefix}... for {whose}"

    @property
    def is_agent(self) -> bool:
        return self.node_id is not None
