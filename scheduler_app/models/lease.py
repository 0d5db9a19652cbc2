from __future__ import annotations

from django.db import models


class Lease(models.Model):
    """A named lease (the scheduler leader's). A holder whose fencing token is stale
    writes nothing: every lease change increments ``fencing_token``."""

    name = models.CharField(max_length=64, unique=True)
    holder = models.CharField(max_length=128, blank=True, default="")
    fencing_token = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)
    #: the holder's scheduler settings (setting -> value), written when its term starts:
    #: a what-if plays the live state forward with the settings the scheduler runs with,
    #: not those of the process that asks
    settings = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'} (token {self.fencing_token})"
