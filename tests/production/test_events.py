"""Cluster events in the log: node health and tenant quotas are Transition rows too (kind
"node" / "tenant"), append-only like job rows, replayed by `replay --verify`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.forms.models import model_to_dict

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor, NodeHealth
from scheduler_app.models import Job, Node, Tenant, Transition
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from scheduler_app.services.cluster import (
    NODE_MOVES,
    node_drain,
    node_mark_down,
    node_mark_up,
    node_move,
    node_undrain,
    nodes_mark_silent_down,
    tenant_create,
    tenant_set_quota,
)
from scheduler_app.services.early_tick import wakes_the_scheduler
from scheduler_app.services.errors import Conflict, Invalid
from tests.foundation.factories import T0, NodeFactory, TenantFactory, job_in_state
from tests.foundation.test_replay import raw, replay_verify

pytestmark = pytest.mark.django_db

H = NodeHealth


def snapshot() -> dict[str, object]:
    return {
        "log": list(Transition.objects.order_by("pk").values()),
        "nodes": list(Node.objects.order_by("pk").values()),
        "tenants": [model_to_dict(t) for t in Tenant.objects.order_by("pk")],
        "jobs": [model_to_dict(j) for j in Job.objects.order_by("pk")],
    }


# --------------------------------------------------------------------------- the table
@pytest.mark.parametrize(
    ("kind", "keys"),
    [
        ("node", {}),  # no node
        ("job", {"node": True}),  # a job row about a node
        ("tenant", {"tenant": True, "node": True}),  # two keys
        ("node", {"node": True, "job": True}),
    ],
)
def test_a_row_whose_key_does_not_match_its_kind_is_refused_by_the_database(kind, keys):
    node = NodeFactory()
    tenant = TenantFactory()
    job = job_in_state(JobState.QUEUED, tenant=tenant, node=node)
    fields = {
        "node": node if keys.get("node") else None,
        "tenant": tenant if keys.get("tenant") else None,
        "job": job if keys.get("job") else None,
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        Transition.objects.create(
            kind=kind, to_state="down", at=T0, reason=Reason.NODE_HEALTH, actor=Actor.OPERATOR,
            **fields,
        )


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE scheduler_app_transition SET to_state = 'healthy' WHERE id = %s",
        "UPDATE scheduler_app_transition SET detail = '{}' WHERE id = %s",
        "DELETE FROM scheduler_app_transition WHERE id = %s",
    ],
)
def test_node_and_tenant_rows_are_append_only_too(sql):
    node_row = node_drain(node=NodeFactory(), actor_name="ops", at=T0)
    tenant_row = tenant_set_quota(
        tenant=TenantFactory(), guaranteed_gpus=8, borrow_limit_gpus=0, actor_name="ops", at=T0
    )
    before = list(Transition.objects.order_by("pk").values())
    for row in (node_row, tenant_row):
        with (
            pytest.raises(IntegrityError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [row.pk])
    assert list(Transition.objects.order_by("pk").values()) == before


def test_the_migrations_leave_the_triggers_in_place_on_sqlite():
    # altering the job column rebuilds the table on SQLite, which drops its triggers:
    # migration 0003 must put them back
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's table rebuild is what this guards against")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' "
            "AND tbl_name = 'scheduler_app_transition' ORDER BY name"
        )
        assert [name for (name,) in cursor.fetchall()] == [
            "transition_no_delete",
            "transition_no_update",
        ]


# --------------------------------------------------------------------------- tenants
def test_a_quota_change_is_one_tenant_row_with_before_and_after():
    tenant = TenantFactory(guaranteed_gpus=16, borrow_limit_gpus=16)
    for i in range(4):  # 32 GPUs: the guarantees must fit the cluster
        NodeFactory(name=f"q{i}")
    row = tenant_set_quota(
        tenant=tenant, guaranteed_gpus=32, borrow_limit_gpus=8, actor_name="ops", at=T0
    )
    assert Transition.objects.count() == 1
    row.refresh_from_db()
    assert (row.kind, row.tenant_id, row.job_id, row.node_id) == ("tenant", tenant.pk, None, None)
    assert (row.reason, row.actor, row.actor_name, row.at) == (
        Reason.QUOTA_CHANGED, Actor.OPERATOR, "ops", T0
    )
    assert row.detail == {
        "action": "set_quota",
        "before": {"guaranteed_gpus": 16, "borrow_limit_gpus": 16},
        "after": {"guaranteed_gpus": 32, "borrow_limit_gpus": 8},
    }
    tenant.refresh_from_db()
    assert (tenant.guaranteed_gpus, tenant.borrow_limit_gpus) == (32, 8)


def test_a_new_team_is_logged_with_the_usage_it_carries_in_and_replays_from_it():
    node = NodeFactory(gpu_count=16)  # the guarantees must fit the cluster
    tenant = tenant_create(name="vision", guaranteed_gpus=16, borrow_limit_gpus=8,
                           usage_gpu_s=7200.0, usage_at=T0 - timedelta(hours=2),
                           actor_name="ops", at=T0)
    row = Transition.objects.get()
    assert (row.kind, row.tenant_id, row.detail["action"]) == ("tenant", tenant.pk, "register")
    assert row.detail["after"] == {
        "guaranteed_gpus": 16, "borrow_limit_gpus": 8, "usage_gpu_s": 7200.0,
        "usage_at_s": int((T0 - timedelta(hours=2)).timestamp()),
    }
    job_in_state(JobState.COMPLETED, tenant=tenant, node=node, gpus=4)  # accrues usage
    tenant.refresh_from_db()
    assert tenant.usage_gpu_s != 7200.0
    ok, output = replay_verify()
    assert ok, output
    with pytest.raises(Conflict):
        tenant_create(name="vision", guaranteed_gpus=0, borrow_limit_gpus=0, actor_name="ops")
    with pytest.raises(Invalid) as refused:
        tenant_create(name="x", guaranteed_gpus=0, borrow_limit_gpus=0, usage_gpu_s=-1.0,
                      actor_name="ops")
    assert refused.value.field == "usage_gpu_s"
    assert Transition.objects.filter(kind="tenant").count() == 1


@pytest.mark.parametrize(
    ("guaranteed", "borrow", "field"),
    [(-1, 0, "guaranteed_gpus"), (8, -4, "borrow_limit_gpus"), ("8", 0, "guaranteed_gpus"),
     (True, 0, "guaranteed_gpus"), (8, 10**9, "borrow_limit_gpus")],
)
def test_an_invalid_quota_names_the_field_and_writes_nothing(guaranteed, borrow, field):
    tenant = TenantFactory()
    before = snapshot()
    with pytest.raises(Invalid) as refused:
        tenant_set_quota(tenant=tenant, guaranteed_gpus=guaranteed, borrow_limit_gpus=borrow,
                         actor_name="ops")
    assert refused.value.field == field and refused.value.code == "invalid"
    assert snapshot() == before


# --------------------------------------------------------------------------- nodes
@pytest.mark.parametrize("health", list(H))
@pytest.mark.parametrize("action", sorted(NODE_MOVES))
def test_every_node_move_from_every_health_is_logged_or_refused(action, health):
    node = NodeFactory(health=health.value, last_heartbeat=T0)
    allowed, to = NODE_MOVES[action]
    before = snapshot()
    if health not in allowed:
        with pytest.raises(Conflict) as refused:
            node_move(node=node, action=action, actor=Actor.OPERATOR, actor_name="ops", at=T0)
        assert refused.value.code == f"node_{health}"
        assert snapshot() == before
        return
    row = node_move(node=node, action=action, actor=Actor.OPERATOR, actor_name="ops",
                    at=T0 + timedelta(seconds=5), why="because")
    assert Transition.objects.count() == 1
    row.refresh_from_db()
    assert (row.kind, row.node_id, row.job_id, row.tenant_id) == ("node", node.pk, None, None)
    assert (row.from_state, row.to_state, row.reason) == (health, to, Reason.NODE_HEALTH)
    assert row.detail == {"action": action, "before": {"health": health.value},
                          "after": {"health": to.value}, "why": "because"}
    node.refresh_from_db()
    assert node.health == to


def test_the_named_node_services_move_health_as_documented():
    node = NodeFactory()
    node_drain(node=node, actor_name="ops")
    assert node.health == H.DRAINING
    node_undrain(node=node, actor_name="ops")
    assert node.health == H.HEALTHY
    node_mark_down(node=node, actor_name="ops", why="PSU failure")
    assert node.health == H.DOWN
    node_mark_up(node=node, actor_name="ops")
    assert node.health == H.HEALTHY
    rows = list(Transition.objects.values_list("from_state", "to_state", "detail__action"))
    assert rows == [
        ("healthy", "draining", "drain"), ("draining", "healthy", "undrain"),
        ("healthy", "down", "down"), ("down", "healthy", "up"),
    ]
    assert Transition.objects.filter(detail__why="PSU failure").count() == 1


def test_silent_nodes_are_marked_down_and_quiet_or_new_ones_are_not():
    now = T0 + timedelta(seconds=100)
    silent = NodeFactory(name="silent", last_heartbeat=now - timedelta(seconds=31))
    draining = NodeFactory(name="draining-silent", health=H.DRAINING,
                           last_heartbeat=now - timedelta(seconds=300))
    NodeFactory(name="talking", last_heartbeat=now - timedelta(seconds=30))
    NodeFactory(name="never-spoke", last_heartbeat=None)
    NodeFactory(name="already-down", health=H.DOWN, last_heartbeat=now - timedelta(hours=1))
    marked = nodes_mark_silent_down(now=now, timeout_s=30)
    assert [n.name for n in marked] == ["draining-silent", "silent"]
    health = dict(Node.objects.values_list("name", "health"))
    assert health == {"silent": "down", "draining-silent": "down", "talking": "healthy",
                      "never-spoke": "healthy", "already-down": "down"}
    rows = Transition.objects.order_by("pk")
    assert [(r.node_id, r.detail["action"], r.actor, r.at) for r in rows] == [
        (draining.pk, "heartbeat_timeout", Actor.SCHEDULER, now),
        (silent.pk, "heartbeat_timeout", Actor.SCHEDULER, now),
    ]
    assert rows[1].detail["why"] == "no heartbeat for 31 s (timeout 30 s)"
    assert nodes_mark_silent_down(now=now, timeout_s=30) == []  # nothing twice


def test_when_every_node_that_heartbeats_goes_silent_at_once_none_is_marked_down(caplog):
    """The web API stopped for 45 s: every agent's heartbeat failed, every node was marked
    down and every running job requeued, a lost run each for those that cannot
    checkpoint (an agent author's session, 2026-12-07). All silent at once is the path to
    the API failing, not every node: held off, and said in the log."""
    now = T0 + timedelta(seconds=100)
    quiet = [NodeFactory(name=f"q{i}", last_heartbeat=now - timedelta(seconds=45))
             for i in range(3)]
    NodeFactory(name="never-spoke", last_heartbeat=None)  # not run by an agent: not counted
    NodeFactory(name="already-down", health=H.DOWN, last_heartbeat=now - timedelta(hours=1))
    with caplog.at_level("WARNING", logger="scheduler_app.services.cluster"):
        assert nodes_mark_silent_down(now=now, timeout_s=30) == []
    assert "all 3 nodes that heartbeat are silent" in caplog.text
    assert not Transition.objects.exists()
    # one comes back and the others stay silent: those are marked down
    Node.objects.filter(pk=quiet[0].pk).update(last_heartbeat=now)
    marked = nodes_mark_silent_down(now=now + timedelta(seconds=1), timeout_s=30)
    assert [n.name for n in marked] == ["q1", "q2"]
    # the last node that heartbeats: its silence is its own (a cluster of one agent-run node)
    later = now + timedelta(seconds=60)
    assert [n.name for n in nodes_mark_silent_down(now=later, timeout_s=30)] == ["q0"]


def test_a_node_marked_up_gets_a_fresh_heartbeat_window():
    node = NodeFactory(health=H.DOWN, last_heartbeat=T0)
    up_at = T0 + timedelta(hours=1)
    node_mark_up(node=node, actor_name="ops", at=up_at)
    assert nodes_mark_silent_down(now=up_at + timedelta(seconds=30), timeout_s=30) == []
    assert [n.pk for n in nodes_mark_silent_down(now=up_at + timedelta(seconds=31),
                                                 timeout_s=30)] == [node.pk]


def test_cluster_rows_by_people_ask_for_an_early_tick_and_the_schedulers_do_not():
    node = NodeFactory(last_heartbeat=T0)
    drained = node_drain(node=node, actor_name="ops")
    quota = tenant_set_quota(tenant=TenantFactory(), guaranteed_gpus=1, borrow_limit_gpus=0,
                             actor_name="ops")
    assert wakes_the_scheduler(drained) and wakes_the_scheduler(quota)
    nodes_mark_silent_down(now=T0 + timedelta(minutes=5), timeout_s=30)
    assert not wakes_the_scheduler(Transition.objects.last())


# --------------------------------------------------------------------------- replay
@pytest.fixture
def cluster_history():
    nodes = [NodeFactory(name=f"n{i}") for i in range(4)]  # 32 GPUs: room for the raises
    tenant = TenantFactory(name="vision", guaranteed_gpus=16, borrow_limit_gpus=16)
    job_in_state(JobState.RUNNING, tenant=tenant, node=nodes[0])
    node_drain(node=nodes[1], actor_name="ops")
    node_mark_down(node=nodes[2], actor_name="ops", why="dead")
    node_mark_up(node=nodes[2], actor_name="ops")
    node_mark_down(node=nodes[2], actor_name="ops", why="dead again")
    tenant_set_quota(tenant=tenant, guaranteed_gpus=24, borrow_limit_gpus=8, actor_name="ops")
    tenant_set_quota(tenant=tenant, guaranteed_gpus=32, borrow_limit_gpus=0, actor_name="ops")
    return {"nodes": nodes, "tenant": tenant}


def test_replay_rebuilds_node_health_and_tenant_quotas_from_the_log(cluster_history):
    rebuilt = rebuild_from_log()
    n0, n1, n2, _n3 = cluster_history["nodes"]
    assert rebuilt.node_health == {n1.pk: "draining", n2.pk: "down"}  # n0 has no row
    assert rebuilt.tenant_quota == {
        cluster_history["tenant"].pk: {"guaranteed_gpus": 32, "borrow_limit_gpus": 0}
    }
    assert rebuilt.cluster_rows == 6
    assert compare_with_tables(rebuilt) == []
    ok, output = replay_verify()
    assert ok, output
    assert "6 node/tenant rows: nodes with rows down 1, draining 1" in output


def test_replay_verify_reports_a_node_health_the_log_does_not_explain(cluster_history):
    n0, n1, *_ = cluster_history["nodes"]
    raw("UPDATE scheduler_app_node SET health = 'down' WHERE id IN (%s, %s)", [n0.pk, n1.pk])
    ok, output = replay_verify()
    assert not ok
    assert "node n0 health: log says 'healthy', tables say 'down'" in output
    assert "node n1 health: log says 'draining', tables say 'down'" in output


def test_replay_verify_reports_a_tampered_quota(cluster_history):
    tenant = cluster_history["tenant"]
    raw("UPDATE scheduler_app_tenant SET borrow_limit_gpus = 64 WHERE id = %s", [tenant.pk])
    ok, output = replay_verify()
    assert not ok
    assert "tenant vision borrow_limit_gpus: log says 0, tables say 64" in output


def test_replay_reports_node_and_tenant_rows_that_do_not_chain(cluster_history):
    n2, tenant = cluster_history["nodes"][2], cluster_history["tenant"]
    with transaction.atomic():  # rows written behind the services' back
        Transition.objects.create(kind="node", node=n2, from_state="healthy", to_state="down",
                                  at=T0, reason=Reason.NODE_HEALTH, actor=Actor.OPERATOR)
        Transition.objects.create(
            kind="tenant", tenant=tenant, to_state="", at=T0, reason=Reason.QUOTA_CHANGED,
            actor=Actor.OPERATOR,
            detail={"before": {"guaranteed_gpus": 1, "borrow_limit_gpus": 0},
                    "after": {"guaranteed_gpus": 32, "borrow_limit_gpus": 0}},
        )
    problems = [str(m) for m in compare_with_tables(rebuild_from_log())]
    assert len(problems) == 2, problems
    assert f"(node {n2.pk}) from_state: log says 'down', tables say 'healthy'" in problems[0]
    assert f"(tenant {tenant.pk}) before" in problems[1]
