from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Tenant(models.Model):
    """A team's queue: its guarantee, how far it may borrow, and its decayed usage.

    ``usage_gpu_s`` is the decayed GPU-second usage as of ``usage_at``, accrued exactly as
    the core does (``core.fairshare.accrue``) each time ``held_gpus`` changes; fair share
    is usage / guarantee. ``held_gpus`` (GPUs of open allocations) is a projection too.
    """

    name = models.SlugField(max_length=64, unique=True)
    guaranteed_gpus = models.PositiveIntegerField(default=0)
    borrow_limit_gpus = models.PositiveIntegerField(default=0)
    usage_gpu_s = models.FloatField(default=0.0)
    usage_at = models.DateTimeField(null=True, blank=True)
    held_gpus = models.PositiveIntegerField(default=0)
    #: Team limits beyond the quota (null: none), set by operators through the logged
    #: quota service. GPUs one owner may hold at once (a job past it waits: UserLimit);
    #: the limit given at submit to a job that declares none; the longest limit a job
    #: may declare (a job asking for more is refused at submit).
    max_gpus_per_user = models.PositiveIntegerField(null=True, blank=True)
    default_runtime_s = models.PositiveIntegerField(null=True, blank=True)
    max_runtime_s = models.PositiveIntegerField(null=True, blank=True)
    #: Written by the leader after each tick: the fair-share key of that tick (usage /
    #: guarantee; null for a tenant without a guarantee that has used GPUs: infinite) and
    #: the tenant's place in the tick's order (1 = served first; equal keys share a rank);
    #: ``share_at``: the tick that last changed them.
    share = models.FloatField(null=True, blank=True)
    share_rank = models.PositiveIntegerField(null=True, blank=True)
    share_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(usage_gpu_s__gte=0), name="tenant_usage_gte_0"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def quota_limit_gpus(self) -> int:
        """The most GPUs the team may hold at once: guarantee plus borrow limit."""
        return self.guaranteed_gpus + self.borrow_limit_gpus


class Membership(models.Model):
    """A user belongs to tenants as a researcher or a lead. Staff users are operators."""

    class Role(models.TextChoices):
        RESEARCHER = "researcher", "Researcher"
        LEAD = "lead", "Lead"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.RESEARCHER)

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"
