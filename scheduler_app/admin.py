"""Django admin for every model. The Transition log is read-only here as in the database.

Job state and the other projection fields are read-only too: they change only through the
services (use the dashboard or the API to cancel a job).
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import Allocation, Job, Lease, Membership, Node, Pod, Tenant, Transition


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the transition service writes (the log and its projection): view only."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "guaranteed_gpus", "borrow_limit_gpus", "held_gpus", "usage_gpu_s"]
    search_fields = ["name"]
    readonly_fields = ["held_gpus", "usage_gpu_s", "usage_at"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]


@admin.register(Pod)
class PodAdmin(admin.ModelAdmin):
    list_display = ["name"]
    search_fields = ["name"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "pod", "rail", "gpu_type", "gpu_count", "free_gpus", "health"]
    list_filter = ["health", "pod", "gpu_type", "rail"]
    search_fields = ["name"]
    readonly_fields = ["free_gpus", "last_heartbeat"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    can_delete = False
    fields = ["node", "gpu_indices", "start", "end", "preemptible"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


_JOB_PROJECTION = [
    "state",
    "pending_reason",
    "submitted_at",
    "started_at",
    "finished_at",
    "last_checkpoint_at",
    "resume_pointer",
    "preemption_times",
    "retry_count",
]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "tenant",
        "owner",
        "gpus",
        "state",
        "pending_reason",
        "submitted_at",
    ]
    list_filter = ["state", "pending_reason", "tenant", "checkpointable", "interactive"]
    search_fields = ["=id", "name", "owner__username", "idempotency_key"]
    date_hierarchy = "submitted_at"
    list_select_related = ["tenant", "owner"]
    inlines = [AllocationInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        if obj is None:
            return _JOB_PROJECTION
        # a job's spec is immutable after submit, and its state is the log's
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # submit through the dashboard or the API (job_submit)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ["id", "job", "node", "gpu_indices", "start", "end", "preemptible"]
    list_filter = ["preemptible", "node__pod"]
    search_fields = ["=job__id", "node__name"]
    list_select_related = ["job", "node"]


@admin.register(Transition)
class TransitionAdmin(ReadOnlyAdmin):
    list_display = [
        "id", "kind", "job", "node", "tenant", "from_state", "to_state", "reason", "actor", "at",
        "tick_id",
    ]
    list_filter = ["kind", "to_state", "reason", "actor"]
    search_fields = ["=id", "=job__id", "node__name", "tenant__name", "tick_id", "actor_name"]
    date_hierarchy = "at"
    list_select_related = ["job", "node", "tenant"]


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ["name", "holder", "fencing_token", "expires_at"]
    search_fields = ["name", "holder"]
    readonly_fields = ["fencing_token"]
