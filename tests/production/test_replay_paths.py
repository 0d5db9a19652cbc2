"""Every way the replay can read the log rebuilds the same thing, to the last bit.

On PostgreSQL the log is one statement streamed in chunks (libpq 17 or later), or, with
an older libpq, keyset-paginated chunks; elsewhere (SQLite) keyset-paginated chunks
through the ORM, which also runs on PostgreSQL. Each path sends the detail differently
(a checkpoint's string pointer alone, as text, on PostgreSQL only), so a log with every
odd shape of row (pointers that are not strings, null, missing or unusual text, details
with more keys, cluster rows, rows out of order or illegal, a null from_state where a
state was expected) must give the same rebuild, the same log errors in the same order,
and the same mismatches with the tables, whatever the path and the chunk size.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Transition
from scheduler_app.selectors import replay
from scheduler_app.selectors.replay import compare_with_tables, rebuild_from_log
from scheduler_app.services import job_submit
from scheduler_app.services.cluster import node_drain, tenant_create, tenant_set_quota
from tests.foundation.factories import T0, NodeFactory, TenantFactory, job_in_state, move

pytestmark = pytest.mark.django_db

S, R = JobState, Reason


def at(minutes: int):
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def odd_log():
    """A log through the services with every shape of row the rules read, then rows
    written behind the services' back: out of order, illegal, with a null from_state."""
    node_a, node_b = NodeFactory(gpu_count=8), NodeFactory(gpu_count=8)
    team = tenant_create(name="carried", guaranteed_gpus=8, borrow_limit_gpus=8,
                         actor_name="admin", usage_gpu_s=1234.5, at=at(0))
    other = TenantFactory(guaranteed_gpus=0)  # the guarantees fit the 16 GPUs
    running = job_in_state(S.RUNNING, tenant=team, node=node_a, gpus=2, at=at(1))
    pointers = [{"resume_pointer": "s3://ckpt/1"}, {"resume_pointer": 7}, {},
                {"resume_pointer": None}, {"resume_pointer": "gs://b/é \"q\"\n\t\\", "step": 3},
                {"resume_pointer": ""}, {"resume_pointer": {"nested": [1, 2]}},
                {"resume_pointer": "s3://ckpt/last", "why": "periodic"}]
    for i, detail in enumerate(pointers):
        move(running, S.RUNNING, R.CHECKPOINTED, at=at(10 + i), detail=detail)
    elastic = job_submit(tenant=other, name="elastic", gpus=4, min_gpus=1, at=at(2),
                         preemptible=True)  # other is guaranteed nothing: it borrows
    move(elastic, S.PLACING, R.PLACED, at=at(20),
         alloc={node_b.name: [3, 1, 2, 0]}, detail={"why": "fits", "alloc_hint": [9]})
    move(elastic, S.RUNNING, R.STARTED, at=at(21))
    move(elastic, S.RUNNING, R.SHRUNK, at=at(22), alloc={node_b.name: [2]})
    move(elastic, S.QUEUED, R.NODE_FAILED, at=at(23))
    # other is guaranteed nothing: a job nothing may preempt borrows only with a limit
    fragile = job_in_state(S.RUNNING, tenant=other, node=node_b, gpus=4, at=at(3),
                           max_runtime_s=3600)
    move(fragile, S.PREEMPT_REQUESTED, R.PREEMPT_REQUESTED, at=at(30))
    move(fragile, S.CHECKPOINTING, R.CHECKPOINT_STARTED, at=at(31))
    move(fragile, S.PREEMPTED, R.PREEMPTED, at=at(32))
    move(fragile, S.QUEUED, R.REQUEUED, at=at(33))
    tenant_set_quota(tenant=team, guaranteed_gpus=4, borrow_limit_gpus=0, actor_name="admin",
                     at=at(40))
    node_drain(node=node_a, actor_name="admin", at=at(41))
    done = job_in_state(S.COMPLETED, tenant=team, node=node_b, gpus=1, at=at(4))

    def forged(job, from_state, to_state, reason, minutes, detail=None):
        Transition.objects.create(job=job, from_state=from_state, to_state=to_state,
                                  reason=reason, at=at(minutes), detail=detail or {},
                                  actor=Actor.SCHEDULER)

    forged(done, S.RUNNING, S.RUNNING, R.CHECKPOINTED, 50, {"resume_pointer": "after-the-end"})
    forged(done, S.COMPLETED, S.RUNNING, R.STARTED, 51)  # illegal
    forged(running, None, S.RUNNING, R.CHECKPOINTED, 52, {"resume_pointer": "from-null"})
    Transition.objects.create(kind=Transition.Kind.TENANT, tenant=other, to_state="",
                              reason=R.QUOTA_CHANGED, at=at(53), actor=Actor.USER,
                              detail={"after": "not a quota"})
    return {"jobs": [running, elastic, fragile, done]}


def dump(rebuilt: replay.Rebuilt) -> dict:
    """Everything a rebuild holds, with the usage's exact bits."""
    return {
        "jobs": {pk: (type(p.state), p.state, p.alloc, p.started_at, p.finished_at,
                      p.last_checkpoint_at, p.resume_pointer, p.preemption_times,
                      p.retry_count) for pk, p in rebuilt.jobs.items()},
        "job_order": list(rebuilt.jobs),
        "node_used": rebuilt.node_used,
        "tenants": {pk: (u.usage.hex(), u.since_s, u.held) for pk, u in rebuilt.tenants.items()},
        "node_health": rebuilt.node_health,
        "tenant_quota": rebuilt.tenant_quota,
        "log_errors": [str(m) for m in rebuilt.log_errors],
        "rows": (rebuilt.rows, rebuilt.cluster_rows),
    }


def paths() -> list[str]:
    found = ["orm keyset"]
    if connection.vendor == "postgresql":
        found += ["pg keyset"]
        if replay._pg_streams():
            found += ["pg stream"]
    return found


def rebuild(path: str, monkeypatch) -> tuple[dict, list[str], list[int]]:
    """The rebuild through ``path``, with the chunk sizes the reader gave."""
    with monkeypatch.context() as patch:
        if path == "orm keyset":
            patch.setattr(replay, "_log_chunks", replay._keyset_chunks)
        elif path == "pg keyset":
            patch.setattr(replay, "_pg_streams", lambda: False)
        sizes: list[int] = []
        rebuilt = rebuild_from_log(on_rows=sizes.append)
    return dump(rebuilt), [str(m) for m in compare_with_tables(rebuilt)], sizes


@pytest.mark.parametrize("chunk", [1, 3, 50_000])
def test_every_read_path_rebuilds_the_same_thing(odd_log, monkeypatch, chunk):
    monkeypatch.setattr(replay, "CHUNK", chunk)
    total = Transition.objects.count()
    results = {path: rebuild(path, monkeypatch) for path in paths()}
    default = rebuild("default", monkeypatch)
    reference, mismatches, _ = results["orm keyset"]
    for path, (rebuilt, found, sizes) in [*results.items(), ("default", default)]:
        assert rebuilt == reference, path
        assert found == mismatches, path
        assert sum(sizes) == total and all(0 < n <= chunk for n in sizes), path
    # the odd rows are seen, and reported, the same way on every path
    running, elastic, fragile, done = odd_log["jobs"]
    assert reference["jobs"][running.pk][6] == "from-null"  # the forged row is applied
    assert reference["jobs"][elastic.pk][1:3] == (S.QUEUED, {})
    assert reference["jobs"][done.pk][1] == S.RUNNING
    errors = "\n".join(reference["log_errors"])
    assert f"(job {done.pk}) from_state: log says 'COMPLETED', tables say 'RUNNING'" in errors
    assert f"(job {done.pk}) illegal move" in errors
    assert f"(job {running.pk}) from_state: log says 'RUNNING', tables say None" in errors
    assert "after: log says 'a quota', tables say 'not a quota'" in errors
    assert f"job {done.pk} state: log says 'RUNNING', tables say 'COMPLETED'" in mismatches


def test_a_clean_log_replays_clean_on_every_path(monkeypatch):
    nodes = [NodeFactory() for _ in range(4)]  # first: the guarantees must fit the cluster
    team = tenant_create(name="t", guaranteed_gpus=8, borrow_limit_gpus=0, actor_name="a",
                         usage_gpu_s=10.0, at=at(0))
    jobs = [job_in_state(state, tenant=team, node=nodes[i], gpus=1, at=at(i))
            for i, state in enumerate([S.RUNNING, S.PREEMPTED, S.COMPLETED, S.QUEUED])]
    move(jobs[0], S.RUNNING, R.CHECKPOINTED, at=at(9), detail={"resume_pointer": 5})
    monkeypatch.setattr(replay, "CHUNK", 2)
    for path in [*paths(), "default"]:
        rebuilt, found, _ = rebuild(path, monkeypatch)
        assert found == [], path
        assert rebuilt["jobs"][jobs[0].pk][6] == "5", path
    assert Job.objects.get(pk=jobs[0].pk).resume_pointer == "5"


@pytest.mark.django_db(False)
@pytest.mark.parametrize(
    "text",
    ['{"alloc": {"n1": [0, 1]}}', '{"resume_pointer": "a\\u00e9\\n"}', "{}", "[1, 2]", '"s"',
     "7", "null", ' {"a": 1}', '{"a": 1} ', '{"a": 1}\n', '{"a": 1} x', "", "{", '{"a": }',
     "\ufeff{}", "NaN", '{"a": 1, "a": 2}', '{"a": 1e400}'],
)
def test_the_detail_decoder_is_json_loads(text):
    try:
        expected: object = json.loads(text)
    except json.JSONDecodeError as error:
        with pytest.raises(json.JSONDecodeError) as raised:
            replay._loads(text)
        assert (raised.value.msg, raised.value.pos) == (error.msg, error.pos)
    else:
        assert repr(replay._loads(text)) == repr(expected)
