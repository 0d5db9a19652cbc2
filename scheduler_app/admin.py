"""Django admin for every model: a window on the log and its projection, never a way round it.

The Transition log, the projection (jobs, allocations), and the rows the scheduler reads
(nodes, pods, tenants, the leader lease) are read-only here. An edit made here would not
be in the log: ``replay --verify`` would disagree with the tables, and the leader would
rebuild from rows that no longer add up (a node whose ``gpu_count`` is cut below the GPUs
its jobs hold, a lease held until 2099). What an operator may change goes through the
same services as the API, each change a row of the log:

- nodes: the actions drain, undrain, mark down, mark up (``services.cluster``);
- tenants: "Change quota" (``tenant_set_quota``) and "Add team" (``tenant_create``);
- jobs: the action cancel (``job_cancel``);
- the lease: the action release (``lease_force_release``, as ``manage.py lease --release``).

Memberships (who is in which team) and API tokens (revoke) are not part of the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from .core.types import TENANT_LIMITS, Actor
from .models import Allocation, Job, Lease, Membership, Node, Pod, Tenant, Transition
from .services import job_cancel
from .services.cluster import (
    LIMIT_MAXIMUMS,
    MAX_GPUS_QUOTA,
    node_drain,
    node_mark_down,
    node_mark_up,
    node_undrain,
    tenant_create,
    tenant_set_quota,
)
from .services.errors import Invalid, ServiceError
from .services.lease import lease_force_release


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the services write: view only (changes are this class's actions)."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def _each(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    act: Callable[[Any], object],
    done: str,
) -> None:
    """Run ``act`` on each selected row through its service; one message for what was
    done, one per refusal (the service's own words: "node n1 is down: cannot drain it")."""
    if not request.user.is_staff:
        raise PermissionDenied
    ok = 0
    for obj in queryset:
        try:
            act(obj)
        except ServiceError as error:
            modeladmin.message_user(request, f"{obj}: {error}", messages.ERROR)
        else:
            ok += 1
    if ok:
        modeladmin.message_user(request, f"{ok} {done}.", messages.SUCCESS)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaForm(forms.Form):
    guaranteed_gpus = forms.IntegerField(min_value=0, max_value=MAX_GPUS_QUOTA)
    borrow_limit_gpus = forms.IntegerField(min_value=0, max_value=MAX_GPUS_QUOTA)
    # team limits: empty is no limit
    max_gpus_per_user = forms.IntegerField(
        min_value=1, max_value=LIMIT_MAXIMUMS["max_gpus_per_user"], required=False,
        help_text="GPUs one person may hold at once (empty: no cap).")
    default_runtime_s = forms.IntegerField(
        min_value=1, max_value=LIMIT_MAXIMUMS["default_runtime_s"], required=False,
        help_text="Seconds; the time limit of a job that declares none (empty: none).")
    max_runtime_s = forms.IntegerField(
        min_value=1, max_value=LIMIT_MAXIMUMS["max_runtime_s"], required=False,
        help_text="Seconds; the longest time limit a job may ask for (empty: any).")

    def service_kwargs(self) -> dict[str, Any]:
        """The cleaned data as tenant_create / tenant_set_quota take it."""
        data = dict(self.cleaned_data)
        data["limits"] = {key: data.pop(key) for key in TENANT_LIMITS}
        return data


class TeamForm(QuotaForm):
    name = forms.SlugField(max_length=64)
    field_order = ["name", "guaranteed_gpus", "borrow_limit_gpus", *TENANT_LIMITS]


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ["name", "guaranteed_gpus", "borrow_limit_gpus", "max_gpus_per_user",
                    "max_runtime_s", "held_gpus", "usage_gpu_s", "quota_link"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    @admin.display(description="quota")
    def quota_link(self, tenant: Tenant) -> str:
        url = reverse("admin:scheduler_app_tenant_quota", args=[tenant.pk])
        return format_html('<a href="{}">Change quota…</a>', url)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_staff)  # through tenant_create: see add_view

    def get_inline_instances(self, request: HttpRequest, obj: Tenant | None = None) -> list:
        # memberships are edited on their own page (MembershipAdmin); here they are shown
        return super().get_inline_instances(request, obj) if obj is not None else []

    def get_urls(self) -> list:
        quota = path("<int:pk>/quota/", self.admin_site.admin_view(self.quota_view),
                     name="scheduler_app_tenant_quota")
        return [quota, *super().get_urls()]

    def add_view(self, request: HttpRequest, form_url: str = "",
                 extra_context: dict | None = None) -> HttpResponse:
        """A team is created by ``tenant_create`` (a ``register`` row in the log)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = TeamForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                tenant = tenant_create(actor_name=request.user.get_username(),
                                       **form.service_kwargs())
            except ServiceError as error:
                _form_errors(form, error)
            else:
                self.log_addition(request, tenant, "tenant_create")
                self.message_user(request, f"Team {tenant.name} created.", messages.SUCCESS)
                return HttpResponseRedirect(
                    reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]))
        return self._form_page(request, form, title="Add team", tenant=None)

    def quota_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The quota, changed by ``tenant_set_quota`` (a ``set_quota`` row in the log)."""
        if not request.user.is_staff:
            raise PermissionDenied
        tenant = get_object_or_404(Tenant, pk=pk)
        form = QuotaForm(request.POST or None, initial={
            "guaranteed_gpus": tenant.guaranteed_gpus,
            "borrow_limit_gpus": tenant.borrow_limit_gpus,
            **{key: getattr(tenant, key) for key in TENANT_LIMITS},
        })
        if request.method == "POST" and form.is_valid():
            try:
                tenant_set_quota(tenant=tenant, actor_name=request.user.get_username(),
                                 **form.service_kwargs())
            except ServiceError as error:
                _form_errors(form, error)
            else:
                self.log_change(request, tenant, "tenant_set_quota")
                self.message_user(
                    request, f"Team {tenant.name}: {tenant.guaranteed_gpus} guaranteed + "
                    f"{tenant.borrow_limit_gpus} borrow limit.", messages.SUCCESS)
                return HttpResponseRedirect(
                    reverse("admin:scheduler_app_tenant_change", args=[tenant.pk]))
        return self._form_page(request, form, title=f"Quota of {tenant.name}", tenant=tenant)

    def _form_page(self, request: HttpRequest, form: forms.Form, *, title: str,
                   tenant: Tenant | None) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "form": form,
            "original": tenant,
        }
        status = 400 if request.method == "POST" else 200
        return TemplateResponse(request, "admin/scheduler_app/service_form.html", context,
                                status=status)


def _form_errors(form: forms.Form, error: ServiceError) -> None:
    """A service's refusal at the fields it names (``Invalid.errors``), else on the form."""
    errors = error.errors if isinstance(error, Invalid) and error.errors else {
        error.field: error.message}
    for name, message in errors.items():
        form.add_error(name if name in form.fields else None, message)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]


@admin.register(Pod)
class PodAdmin(ReadOnlyAdmin):
    """Pods come with their nodes' registration (``agent_register``)."""

    list_display = ["name"]
    search_fields = ["name"]


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    """Nodes register through their agent (``agent_register``); their health changes by
    the actions below, each a node row of the log."""

    list_display = ["name", "pod", "rail", "gpu_type", "gpu_count", "free_gpus", "health"]
    list_filter = ["health", "pod", "gpu_type", "rail"]
    search_fields = ["name"]
    actions = ["drain", "undrain", "mark_down", "mark_up"]

    @admin.action(description="Drain the selected nodes (keep their jobs, place nothing new)")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset, lambda n: node_drain(node=n, actor_name=who), "drained")

    @admin.action(description="Undrain the selected nodes")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset, lambda n: node_undrain(node=n, actor_name=who),
              "undrained")

    @admin.action(description="Mark the selected nodes down (their jobs are requeued)")
    def mark_down(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset,
              lambda n: node_mark_down(node=n, actor_name=who, why=f"marked down in the "
                                       f"admin by {who}"), "marked down")

    @admin.action(description="Mark the selected nodes up")
    def mark_up(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset, lambda n: node_mark_up(node=n, actor_name=who),
              "marked up")


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    can_delete = False
    fields = ["node", "gpu_indices", "start", "end", "preemptible"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """A job's spec is immutable after submit and its state is the log's: view only, and
    cancel through ``job_cancel``. Submit through the dashboard or the API."""

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
    actions = ["cancel"]

    @admin.action(description="Cancel the selected jobs")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset, lambda job: job_cancel(
            job_id=job.pk, actor=Actor.OPERATOR, actor_name=who,
            why=f"cancelled in the admin by {who}"), "cancelled")


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
class LeaseAdmin(ReadOnlyAdmin):
    """Every scheduler stands by while another holds the lease: freeing it (logged) lets
    the next tick of any of them take it, with a new fencing token."""

    list_display = ["name", "holder", "fencing_token", "expires_at"]
    search_fields = ["name", "holder"]
    actions = ["release"]

    @admin.action(description="Release the selected leases (a scheduler takes it at its "
                              "next tick)")
    def release(self, request: HttpRequest, queryset: QuerySet[Lease]) -> None:
        who = request.user.get_username()
        _each(self, request, queryset, lambda lease: lease_force_release(
            name=lease.name, actor_name=who, why="released in the admin"), "released")
