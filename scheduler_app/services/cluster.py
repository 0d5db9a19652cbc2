"""Cluster services: node health and tenant quotas, logged as rows of the Transition table.

Tenant rows: ``tenant_create`` (action ``register``: quota and carried-in usage) and
``tenant_set_quota`` (action ``set_quota``).

Each call locks the node or tenant row, appends one row to the log (kind ``node`` or
``tenant``, reason NodeHealth or QuotaChanged, before/after in ``detail``) and updates the
projection (Node.health, Tenant quota) in one durable transaction; the early tick follows
on commit. The leader follows the rows into the core (``Scheduler.node_down/up/drain/
undrain/set_quota``): a node going down requeues or fails what ran there, a draining node
keeps its jobs and takes nothing new.

Node health moves (anything else raises Conflict and writes nothing):

    drain              healthy            -> draining
    undrain            draining           -> healthy
    down               healthy | draining -> down
    up                 down | draining    -> healthy   (as the core's node_up)
    heartbeat_timeout  healthy | draining -> down      (nodes_mark_silent_down)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum

from scheduler_app.core.states import Reason
from scheduler_app.core.types import MAX_GPUS, TENANT_LIMITS, Actor, NodeHealth
from scheduler_app.models import Node, Tenant, Transition

from .errors import Conflict, Invalid, NotFound
from .jobs import UNPRINTABLE_WORDS, unprintable
from .transitions import append_cluster_row, append_lock, now_s

H = NodeHealth
log = logging.getLogger(__name__)

#: action -> (health it may start from, health it leads to)
NODE_MOVES: dict[str, tuple[frozenset[NodeHealth], NodeHealth]] = {
    "drain": (frozenset({H.HEALTHY}), H.DRAINING),
    "undrain": (frozenset({H.DRAINING}), H.HEALTHY),
    "down": (frozenset({H.HEALTHY, H.DRAINING}), H.DOWN),
    "up": (frozenset({H.DOWN, H.DRAINING}), H.HEALTHY),
    "heartbeat_timeout": (frozenset({H.HEALTHY, H.DRAINING}), H.DOWN),
}

#: each move as a refusal says it ("cannot up it" read as a slip: an operator's session)
_MOVE_WORDS = {"drain": "drain it", "undrain": "undrain it", "down": "mark it down",
               "up": "mark it up", "heartbeat_timeout": "mark it down for a heartbeat timeout"}

MAX_GPUS_QUOTA = MAX_GPUS
#: What a guarantee or a borrow limit may be, in the operator's words (the API, the form)
QUOTA_GPUS_WORDS = f"Must be a whole number of GPUs, 0 or more (at most {MAX_GPUS_QUOTA:,})."


def tenant_create(
    *,
    name: str,
    guaranteed_gpus: int,
    borrow_limit_gpus: int,
    actor_name: str,
    usage_gpu_s: float = 0.0,
    usage_at: datetime | None = None,
    at: datetime | None = None,
    limits: Mapping[str, int | None] | None = None,
) -> Tenant:
    """Create a team, logged (tenant row, action ``register``) with its quota and the
    decayed usage it carries in (as of ``usage_at``, default ``at``), so that a replay of
    the log rebuilds its usage from the same starting point as the services."""
    _check_quota(guaranteed_gpus, borrow_limit_gpus)
    limits = check_limits(limits or {})
    _check_default_within(Tenant(**limits))
    if not isinstance(name, str) or not name or len(name) > 64:
        raise Invalid("A team name of 1 to 64 characters is needed.", field="name")
    if isinstance(usage_gpu_s, bool) or not isinstance(usage_gpu_s, int | float) \
            or usage_gpu_s < 0:
        raise Invalid("Usage is 0 or more GPU-seconds.", field="usage_gpu_s")
    at = at or now_s()
    usage_at = usage_at or at
    with transaction.atomic(durable=True), append_lock():
        _check_within_cluster(guaranteed_gpus, besides=None)
        if Tenant.objects.filter(name=name).exists():
            raise Conflict(f"team {name} exists already", field="name", code="exists")
        tenant = Tenant.objects.create(
            name=name, guaranteed_gpus=guaranteed_gpus, borrow_limit_gpus=borrow_limit_gpus,
            usage_gpu_s=float(usage_gpu_s), usage_at=usage_at, **limits,
        )
        append_cluster_row(
            tenant=tenant,
            from_state=None,
            to_state="",
            reason=Reason.QUOTA_CHANGED,
            actor=Actor.OPERATOR,
            at=at,
            detail={
                "action": "register",
                "before": {},
                "after": {
                    **_quota(tenant),
                    "usage_gpu_s": float(usage_gpu_s),
                    "usage_at_s": int(usage_at.timestamp()),
                },
            },
            actor_name=actor_name,
        )
    return tenant


def tenant_set_quota(
    *,
    tenant: Tenant,
    guaranteed_gpus: int,
    borrow_limit_gpus: int,
    actor_name: str,
    at: datetime | None = None,
    limits: Mapping[str, int | None] | None = None,
) -> Transition:
    """Set a team's guarantee and borrow limit, and any of its ``limits``
    (``max_gpus_per_user``, ``default_runtime_s``, ``max_runtime_s``; None clears one, a
    key left out keeps its value). Always logged, even when unchanged (an operator's
    decision is worth a row, and the core re-reads the quota either way)."""
    _check_quota(guaranteed_gpus, borrow_limit_gpus)
    limits = check_limits(limits or {})
    at = at or now_s()
    # the log's append lock before the row lock, as the leader takes them (no deadlock);
    # every quota change holds it, so two raises cannot both pass the capacity check
    with transaction.atomic(durable=True), append_lock():
        locked = _locked(Tenant, tenant.pk, "tenant")
        if guaranteed_gpus > locked.guaranteed_gpus:
            # only a raise is checked: where the guarantees already exceed the cluster (a
            # node removed), lowering one, or changing only the borrow limit or a
            # limit, must go through: it is how the operator gets back within it
            _check_within_cluster(guaranteed_gpus, besides=locked.pk)
        before = _quota(locked)
        locked.guaranteed_gpus = guaranteed_gpus
        locked.borrow_limit_gpus = borrow_limit_gpus
        for key, value in limits.items():
            setattr(locked, key, value)
        _check_default_within(locked, limits)
        row = append_cluster_row(
            tenant=locked,
            from_state=None,
            to_state="",
            reason=Reason.QUOTA_CHANGED,
            actor=Actor.OPERATOR,
            at=at,
            detail={"action": "set_quota", "before": before, "after": _quota(locked)},
            actor_name=actor_name,
        )
        locked.save(update_fields=["guaranteed_gpus", "borrow_limit_gpus", *TENANT_LIMITS])
    tenant.guaranteed_gpus, tenant.borrow_limit_gpus = guaranteed_gpus, borrow_limit_gpus
    for key in TENANT_LIMITS:
        setattr(tenant, key, getattr(locked, key))
    return row


def node_drain(
    *, node: Node, actor_name: str, why: str = "", at: datetime | None = None
) -> Transition:
    """Stop placing new work on ``node``; what runs there keeps running. ``why`` (the
    operator's reason) is kept in the log row, for whoever wonders later."""
    return node_move(node=node, action="drain", actor=Actor.OPERATOR, actor_name=actor_name,
                     why=why, at=at)


def node_undrain(
    *, node: Node, actor_name: str, why: str = "", at: datetime | None = None
) -> Transition:
    return node_move(
        node=node, action="undrain", actor=Actor.OPERATOR, actor_name=actor_name, why=why,
        at=at,
    )


def node_mark_down(
    *, node: Node, actor_name: str, why: str, at: datetime | None = None
) -> Transition:
    """The node is gone: the leader requeues (or fails) every job holding GPUs on it."""
    return node_move(
        node=node, action="down", actor=Actor.OPERATOR, actor_name=actor_name, why=why, at=at
    )


def node_mark_up(
    *, node: Node, actor_name: str, why: str = "", at: datetime | None = None
) -> Transition:
    """The node is back (or a drain is lifted). A node that has been heartbeating gets a
    fresh timeout window from now, so it is not marked down again before it can speak."""
    return node_move(
        node=node, action="up", actor=Actor.OPERATOR, actor_name=actor_name, why=why, at=at
    )


def nodes_mark_silent_down(
    *, now: datetime, timeout_s: int, actor_name: str = "heartbeat-timeout"
) -> list[Node]:
    """Mark down every node whose last heartbeat is older than ``timeout_s`` at ``now``.

    Nodes that never sent a heartbeat (``last_heartbeat`` null: seeded, or not run by an
    agent) are exempt. One log row per node, all in one transaction.

    When every node that heartbeats (two or more) went silent at once, none is marked
    down: what failed is more likely the path from the agents to the database (the web
    API down, a proxy, the network in front of it) than every node together, and marking
    them down requeued every running job, a lost run each for the jobs that cannot
    checkpoint (an agent author's session, 2026-12-07: the web server stopped for 45 s).
    Kubernetes' node lifecycle controller stops evicting in a full disruption likewise.
    The leader logs a warning each tick it holds off; the nodes are marked down once some
    of them heartbeat again while the others stay silent.
    """
    cutoff = now - timedelta(seconds=timeout_s)
    tracked = Node.objects.filter(last_heartbeat__isnull=False).exclude(health=H.DOWN)
    stale = tracked.filter(last_heartbeat__lt=cutoff)
    if not stale.exists():
        return []  # the usual case: no lock taken
    silent_n, tracked_n = stale.count(), tracked.count()
    if tracked_n >= 2 and silent_n == tracked_n:
        log.warning(
            "all %d nodes that heartbeat are silent (the latest heartbeat %s s ago, timeout "
            "%s s): none is marked down, since the agents' path to the API is the likelier "
            "failure; check the web servers and the network in front of them",
            tracked_n, int((now - max(n for n in tracked.values_list("last_heartbeat",
                                                                         flat=True))
                            ).total_seconds()), timeout_s)
        return []
    # the log's append lock before the row locks, as the leader takes them (no deadlock)
    with transaction.atomic(durable=True), append_lock():
        silent = list(stale.select_for_update().order_by("name"))
        for node in silent:
            quiet_s = int((now - node.last_heartbeat).total_seconds())
            _apply_move(
                node,
                "heartbeat_timeout",
                actor=Actor.SCHEDULER,
                actor_name=actor_name,
                at=now,
                why=f"no heartbeat for {quiet_s} s (timeout {timeout_s} s)",
            )
    return silent


def node_move(
    *,
    node: Node,
    action: str,
    actor: Actor,
    actor_name: str,
    why: str = "",
    at: datetime | None = None,
) -> Transition:
    """One node health move of :data:`NODE_MOVES`, logged; Conflict if the node's health
    does not allow it."""
    if action not in NODE_MOVES:
        raise Invalid(f"unknown node action {action!r}", field="action")
    _check_node_why(why)
    at = at or now_s()
    # the log's append lock before the row lock, as the leader takes them (no deadlock)
    with transaction.atomic(durable=True), append_lock():
        locked = _locked(Node, node.pk, "node")
        row = _apply_move(locked, action, actor=actor, actor_name=actor_name, at=at, why=why)
    node.health, node.last_heartbeat = locked.health, locked.last_heartbeat
    return row


#: the longest reason an operator may give for a node move (a cancel's too)
NODE_WHY_MAX = 500


def _check_node_why(why: str) -> None:
    """One rule for the API, the dashboard and the commands: the API took a line break and
    a right-to-left override, which reversed the operator's transition stream after it,
    and 300 characters the dashboard refused (an operator's session, 2026-12-07)."""
    if len(why or "") > NODE_WHY_MAX:
        raise Invalid(f"A reason of at most {NODE_WHY_MAX} characters.", field="why")
    if unprintable(why or ""):
        raise Invalid(f"A node's reason is {UNPRINTABLE_WORDS}.", field="why")


def _apply_move(
    node: Node, action: str, *, actor: Actor, actor_name: str, at: datetime, why: str
) -> Transition:
    allowed, to = NODE_MOVES[action]
    health = H(node.health)
    if health not in allowed:
        raise Conflict(
            f"node {node.name} is {health}: cannot {_MOVE_WORDS.get(action, action)} "
            f"(only from {' or '.join(sorted(allowed))})",
            field="health",
            code=f"node_{health}",
        )
    detail: dict[str, Any] = {
        "action": action,
        "before": {"health": health.value},
        "after": {"health": to.value},
    }
    if why:
        detail["why"] = why
    row = append_cluster_row(
        node=node,
        from_state=health.value,
        to_state=to.value,
        reason=Reason.NODE_HEALTH,
        actor=actor,
        at=at,
        detail=detail,
        actor_name=actor_name,
    )
    node.health = to.value
    fields = ["health"]
    if action == "up" and node.last_heartbeat is not None:
        node.last_heartbeat = at
        fields.append("last_heartbeat")
    node.save(update_fields=fields)
    return row


def _check_quota(guaranteed_gpus: object, borrow_limit_gpus: object) -> None:
    errors = {
        name: QUOTA_GPUS_WORDS
        for name, value in (
            ("guaranteed_gpus", guaranteed_gpus),
            ("borrow_limit_gpus", borrow_limit_gpus),
        )
        if isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_GPUS_QUOTA
    }
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors)


def quota_problems(values: Mapping[str, object]) -> dict[str, str]:
    """What is wrong with the quota fields of ``values`` that are there (field -> message),
    by :func:`tenant_set_quota`'s value checks, nothing written: a form that could not
    read one field still says what is wrong with the others, as the API does."""
    errors: dict[str, str] = {}
    for name in ("guaranteed_gpus", "borrow_limit_gpus"):
        if name in values:
            try:
                _check_quota(values[name], 0)
            except Invalid as error:
                errors[name] = error.errors.get("guaranteed_gpus", str(error))
    try:
        check_limits({k: v for k, v in values.items() if k in LIMIT_MAXIMUMS})
    except Invalid as error:
        errors.update(error.errors)
    return errors


def guarantees_and_capacity(*, besides: int | None = None) -> tuple[int, int, int]:
    """(GPUs guaranteed to the teams, except team ``besides``; GPUs of every node, whatever
    its health; GPUs of the healthy nodes): what the guarantees must fit in, and what
    they fit in today."""
    guaranteed = (Tenant.objects.exclude(pk=besides) if besides else Tenant.objects.all()
                  ).aggregate(total=Sum("guaranteed_gpus"))["total"] or 0
    nodes = Node.objects.aggregate(
        total=Sum("gpu_count"),
        healthy=Sum("gpu_count", filter=Q(health=NodeHealth.HEALTHY.value)))
    return guaranteed, nodes["total"] or 0, nodes["healthy"] or 0


def _check_within_cluster(guaranteed_gpus: int, *, besides: int | None) -> None:
    """The guarantees add up to at most the cluster's GPUs: a guarantee the cluster cannot
    hold would make the scheduler preempt running work to honour it. Nodes drained or
    down count (they come back); the operator page says when the healthy ones fall short."""
    others, total, _healthy = guarantees_and_capacity(besides=besides)
    if others + guaranteed_gpus > total:
        raise Invalid(
            f"The guarantees would add up to {others + guaranteed_gpus:,} GPUs; the cluster "
            f"has {total:,} (the other teams are guaranteed {others:,}, so at most "
            f"{max(total - others, 0):,} is left for this one)."
            + (NO_NODES_YET if total == 0 else ""),
            field="guaranteed_gpus", code="over_capacity")


#: What a guarantee refused on a cluster with no node yet adds: the first start's order.
NO_NODES_YET = (" No node is registered yet: register the nodes first (start their agents, "
                "or POST /api/v1/agent/register/), then give the teams their guarantees; "
                "a team with a guarantee of 0 can be added now.")


def _quota(tenant: Tenant) -> dict[str, int]:
    """What a tenant row logs before and after: the quota, and the team limits that are set
    (a limit not set is left out: it reads as null, as in the rows older than limits)."""
    out = {
        "guaranteed_gpus": tenant.guaranteed_gpus,
        "borrow_limit_gpus": tenant.borrow_limit_gpus,
    }
    for key in TENANT_LIMITS:
        value = getattr(tenant, key)
        if value is not None:
            out[key] = value
    return out


#: The most a team's limits may say: GPUs as the quota, time limits as a job's (366 days).
LIMIT_MAXIMUMS = {"max_gpus_per_user": MAX_GPUS_QUOTA, "default_runtime_s": 366 * 24 * 3600,
                  "max_runtime_s": 366 * 24 * 3600}


def limit_words(name: str) -> str:
    """What the team limit ``name`` may be, in the operator's words (the API, the form)."""
    unit = "GPUs" if name == "max_gpus_per_user" else "seconds"
    return (f"Must be a whole number of {unit} from 1 to {LIMIT_MAXIMUMS[name]:,}, or empty "
            "(no limit).")


def check_limits(limits: Mapping[str, object]) -> dict[str, int | None]:
    """The team limits ``limits`` sets, checked: each a whole number from 1 to its maximum,
    or None (no limit); the default time limit no longer than the longest allowed. Raises
    ``Invalid`` naming the field."""
    errors: dict[str, str] = {}
    for key, value in limits.items():
        if key not in LIMIT_MAXIMUMS:
            errors[key] = "Not a team limit."
        elif value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                    or not 1 <= value <= LIMIT_MAXIMUMS[key]):
            errors[key] = limit_words(key)
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], field=first, errors=errors)
    return dict(limits)  # type: ignore[arg-type]


def _check_default_within(tenant: Tenant, changed: Mapping[str, Any] | None = None) -> None:
    """The team's default time limit within its longest. The error names the field the
    operator changed (``changed``): setting max_runtime_s below the team's default named
    default_runtime_s, which the request never sent (an operator's session, 2026-12-07)."""
    default, longest = tenant.default_runtime_s, tenant.max_runtime_s
    if default is not None and longest is not None and default > longest:
        field = ("max_runtime_s" if changed is not None and "max_runtime_s" in changed
                 and "default_runtime_s" not in changed else "default_runtime_s")
        raise Invalid(f"The default time limit ({default:,} s, default_runtime_s) is longer "
                      f"than the longest a job may ask for ({longest:,} s, max_runtime_s).",
                      field=field, code="over_max_runtime")


def _locked(model: type, pk: int | None, what: str) -> Any:
    found = model.objects.select_for_update().filter(pk=pk).first()
    if found is None:
        raise NotFound(f"{what} {pk} does not exist", field=what)
    return found


__all__ = [
    "NODE_MOVES",
    "node_drain",
    "node_mark_down",
    "node_mark_up",
    "node_move",
    "node_undrain",
    "nodes_mark_silent_down",
    "guarantees_and_capacity",
    "check_limits",
    "tenant_create",
    "tenant_set_quota",
]
