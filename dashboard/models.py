"""The dashboard's own table: the what-if runs operators start from the "What if" page.

Kept apart from the scheduler's tables (``scheduler_app.models``): a what-if reads the
live state and writes only here, never a job, a node, a tenant or a row of the log.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    """One what-if (``scheduler_app.sim.whatif``), run in the background: its changes,
    how far it has got, and its answer (``WhatIf.to_json()``) once done."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    #: the flags, by name: {"set_quota": ["team=64"], "add_nodes": [...], ...}
    changes = models.JSONField(default=dict)
    hours = models.FloatField(default=24.0)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    #: 0..1, and what it is doing ("snapshot", "runs", "baseline", "what if", "both runs", "done")
    progress = models.FloatField(default=0.0)
    stage = models.CharField(max_length=32, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)
    #: written with every change of status or progress (``whatif_runs._update``): a run
    #: silent for long, whose thread no longer exists, died with its process
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    #: run by a thread of the web process (no broker: the embedded mode), not a worker
    in_thread = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def percent(self) -> int:
        return 100 if self.status == self.Status.DONE else int(self.progress * 100)
