from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from scheduler_app.core.types import NodeHealth

from .choices import NODE_HEALTH_CHOICES


class Pod(models.Model):
    """A group of nodes on one fabric: gangs prefer to stay inside one pod."""

    name = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    name = models.CharField(max_length=128, unique=True)
    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="nodes")
    rail = models.PositiveSmallIntegerField(default=0)
    gpu_type = models.CharField(max_length=32, blank=True, default="")
    gpu_count = models.PositiveSmallIntegerField()
    #: Projection: gpu_count minus the GPUs of open allocations. Written by the services.
    free_gpus = models.PositiveSmallIntegerField()
    health = models.CharField(
        max_length=16, choices=NODE_HEALTH_CHOICES, default=NodeHealth.HEALTHY.value
    )
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        indexes = [
            # the capacity snapshot: healthy nodes with room, per pod and GPU type
            models.Index(fields=["health", "pod", "gpu_type"], name="node_health_pod_type"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(free_gpus__gte=0) & Q(free_gpus__lte=F("gpu_count")),
                name="node_free_gpus_within_count",
            ),
        ]

    def __str__(self) -> str:
        return self.name
