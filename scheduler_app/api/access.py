"""The API's access rules, in one place (docs/api.md, "Who may do what").

- Operators (staff users) do everything.
- A researcher submits to the tenants they belong to, sees and cancels the jobs they
  submitted there (Slurm's ``PrivateData=jobs``: a user sees their own jobs).
- A lead sees and cancels every job of the tenants they lead.
- Everyone signed in sees every tenant's quota, usage, fair share and queue depth, the
  nodes, the cluster summary and reservations, and the queue position of what they see.
- A node agent (agent token) sees and changes only its own node's jobs, through the
  agent endpoints; every other endpoint refuses it.

Something that exists but is not yours is refused with 403, never hidden behind a 404;
lists only ever contain what you may see.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from scheduler_app.models import Job, Membership, Tenant
from scheduler_app.selectors.redaction import OtherJobs

from .authentication import AgentPrincipal

LEAD = Membership.Role.LEAD.value


def is_agent(user: Any) -> bool:
    return isinstance(user, AgentPrincipal)


def is_operator(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff and not is_agent(user))


def roles(user: Any) -> dict[int, str]:
    """tenant id -> role, cached on the user object for the request."""
    cached = getattr(user, "_api_roles", None)
    if cached is None:
        cached = dict(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
        user._api_roles = cached
    return cached


def visible_jobs(user: Any) -> Q:
    """The jobs ``user`` may see, as a filter."""
    if is_operator(user):
        return Q()
    mine = roles(user)
    led = [t for t, role in mine.items() if role == LEAD]
    return Q(tenant_id__in=led) | Q(owner_id=user.pk, tenant_id__in=list(mine))


def can_see_job(user: Any, job: Job) -> bool:
    return sees(user, job.tenant_id, job.owner_id)


def sees(user: Any, tenant_id: int, owner_id: int | None) -> bool:
    """May ``user`` see a job of this tenant and owner? (``can_see_job`` without the job.)"""
    if is_operator(user):
        return True
    role = roles(user).get(tenant_id)
    return role == LEAD or (role is not None and owner_id == user.pk)


def other_jobs(user: Any) -> OtherJobs:
    """Names the jobs ``user`` may not see as "a job of team X" (selectors.redaction)."""
    if is_operator(user):
        return OtherJobs(None)
    return OtherJobs(lambda tenant_id, owner_id: sees(user, tenant_id, owner_id))


# Whoever sees a job may cancel it: the owner, the tenant's leads, operators.
can_cancel_job = can_see_job


def can_submit_to(user: Any, tenant: Tenant) -> bool:
    return is_operator(user) or tenant.pk in roles(user)


def can_list_tenant_jobs(user: Any, tenant: Tenant) -> bool:
    """May ``user`` ask for the jobs of ``tenant`` (``?tenant=``)? Members may: a
    researcher gets their own jobs there, a lead all of them."""
    return is_operator(user) or tenant.pk in roles(user)


class IsUser(BasePermission):
    """A signed-in person (not a node agent)."""

    message = "This endpoint is for users; node agents may only use /api/v1/agent/."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and not is_agent(request.user))


class IsOperator(BasePermission):
    message = "Only operators (staff users) may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_operator(request.user)


class IsAgent(BasePermission):
    message = "This endpoint is for node agents: authenticate with the node's agent token."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_agent(request.user)


class IsAgentOrOperator(BasePermission):
    message = "Only a node agent (its agent token) or an operator may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_agent(request.user) or is_operator(request.user)


def leads_any(user: Any) -> bool:
    return LEAD in roles(user).values()
