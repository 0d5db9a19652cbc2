"""A real Celery worker (and beat) on Redis and PostgreSQL drive the tick.

The worker and beat are subprocesses on the test database, with a queue of their own on
our database number of the shared Redis (procs.SHARED_REDIS_DB), so parallel runs never
take each other's ticks.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from datetime import datetime

import pytest

from scheduler_app.core.states import JobState
from scheduler_app.core.types import Actor
from scheduler_app.models import Lease, Transition
from scheduler_app.services import job_submit
from scheduler_app.services.lease import LEADER_LEASE

from .procs import SHARED_REDIS_DB, Proc, free_port, poll, shared_redis_base

pytestmark = [
    pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_early_ticks_from_this_process"),
]

S = JobState




@pytest.fixture
def broker() -> str:
    return f"redis://{shared_redis_base()}/{SHARED_REDIS_DB}"


def placing_row(job_id: int) -> Transition | None:
    return Transition.objects.filter(job_id=job_id, to_state=S.PLACING).first()


def test_a_job_submitted_through_the_service_is_placed_by_a_beat_driven_tick(
    cluster, procs, broker
):
    port = free_port()
    worker = procs.worker(broker, SCHEDULER_METRICS_PORT=str(port))
    beat = procs.beat(broker, interval_s=1)
    # this process asks for no early tick (fixture above): only beat ticks can place it
    job = job_submit(tenant=cluster["vision"], name="beat-placed", gpus=8)

    row = poll(lambda: placing_row(job.pk), 30, every=0.1, what="the PLACING row")

    assert row.actor == Actor.SCHEDULER
    # the holder names the worker (its Celery node name) and its process
    assert row.actor_name == f"w1-{procs.queue}@{socket.gethostname()}:{worker.pid}"
    _i, _at, line = worker.wait_for(lambda line: f'"tick_id": "{row.tick_id}"' in line, 10)
    assert json.loads(line)["tick"]["decisions"] >= 1
    beat.wait_for(lambda line: "scheduler-tick" in line and "Sending due task" in line, 5)
    # the worker's pool process serves the metrics it recorded (SCHEDULER_METRICS_PORT)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    text = metrics.decode()
    assert 'scheduler_decisions_total{reason="Placed"} 1.0' in text
    assert f'scheduler_leader{{holder="{row.actor_name}"}} 1.0' in text
    assert 'scheduler_queue_depth{size_class="2-8",tenant="vision"} 0.0' in text
    # a clean worker shutdown gives the lease up: a standby need not wait for it to expire
    assert worker.stop() == 0
    assert Lease.objects.get(name=LEADER_LEASE).holder == ""


SUBMITTER = """
import json, time
from scheduler_app.models import Tenant, Transition
from scheduler_app.services import job_submit
from scheduler_app.services.lease import LEADER_LEASE

def placed(job):
    while not Transition.objects.filter(job=job, to_state="PLACING").exists():
        time.sleep(0.005)
    return time.time()

vision = Tenant.objects.get(name="vision")
cold = job_submit(tenant=vision, name="cold", gpus=4)   # the worker's first tick builds
placed(cold)
time.sleep(1.2)  # past this process's debounce window: the next submit asks again
before = time.time()
warm = job_submit(tenant=vision, name="warm", gpus=4)
seen = placed(warm)
print(json.dumps({"job": warm.pk, "before_submit": before, "placing_seen": seen}), flush=True)
"""


def test_an_early_tick_follows_a_submit_within_a_second(cluster, procs, broker):
    """No beat here: only the submit's early-tick request can place the job. The delay is
    measured from before the submit call (so it includes the commit) to the PLACING row,
    seen by polling every 5 ms and in the worker's own log line of that tick."""
    worker = procs.worker(broker)
    submitter = procs.python("submitter", SUBMITTER, procs.celery_env(broker))

    _i, _at, line = submitter.wait_for(lambda line: line.startswith('{"job"'), 60)
    result = json.loads(line)

    rows = list(Transition.objects.filter(job_id=result["job"]).order_by("id"))
    assert [r.to_state for r in rows] == [S.SUBMITTED, S.QUEUED, S.PLACING]
    admitted, placing = rows[1], rows[2]
    assert admitted.id < placing.id and placing.actor == Actor.SCHEDULER
    # the worker logs the tick after its commit: the row may be seen before the line is
    _i, _at, line = worker.wait_for(lambda line: f'"tick_id": "{placing.tick_id}"' in line, 10)
    tick = json.loads(line)
    tick_logged = datetime.fromisoformat(tick["ts"]).timestamp()
    polled_delay = result["placing_seen"] - result["before_submit"]
    logged_delay = tick_logged - result["before_submit"]
    assert 0 < logged_delay <= 1.0, (logged_delay, tick)
    assert polled_delay <= 1.0, result



def leader_ticks(proc: Proc, since: float) -> int:
    """The ticks ``proc`` ran as the leader after ``since`` (its JSON tick lines)."""
    return sum(1 for at, _s, line in proc.lines if at > since and '"leader": true' in line
               and '"tick"' in line)



SEND_TICKS = """
import time
from celery.utils import worker_direct
from scheduler_app.tasks import scheduler_tick
for _ in range({count}):
    scheduler_tick.apply_async(kwargs={{"forwarded": {forwarded}}}, queue=worker_direct({node!r}))
    time.sleep(0.3)
print("sent", flush=True)
"""


def send_ticks(procs, broker: str, node: str, count: int, *, forwarded: bool = False) -> None:
    """Send ``count`` ticks to one worker's own queue (Celery's worker_direct)."""
    code = SEND_TICKS.format(count=count, forwarded=forwarded, node=node)
    procs.python(f"send-{count}", code, procs.celery_env(broker)).wait_for(
        lambda line: line == "sent", 60)


def test_a_standby_forwards_the_ticks_it_takes_to_the_leader_once(cluster, procs, broker):
    """Two tick workers share the beat's queue, and which one takes a tick is the
    broker's choice: a standby sends the ticks it takes to the leader's own queue (without
    that, the leader ran only the ticks it happened to take: about every other one). The
    ticks here go to the standby's own queue, so that it takes every one."""
    workers = {name: procs.worker(broker, name=name) for name in ("w1", "w2")}
    nodes = {name: f"{name}-{procs.queue}@{socket.gethostname()}" for name in workers}
    send_ticks(procs, broker, nodes["w1"], 1)
    lease = poll(lambda: Lease.objects.filter(name=LEADER_LEASE, holder__contains="@").first(),
                 30, every=0.1, what="w1 holding the lease")
    leader, standby = workers["w1"], workers["w2"]
    assert lease.holder == f"{nodes['w1']}:{leader.pid}"  # the holder names the worker
    since = time.time()
    send_ticks(procs, broker, nodes["w2"], 5)
    poll(lambda: leader_ticks(leader, since) >= 5, 15, every=0.1,
         what=f"the leader running the 5 forwarded ticks:\n{standby.tail()}")
    forwarded = [line for at, _s, line in standby.lines
                 if at > since and f"tick forwarded to the leader {lease.holder}" in line]
    assert len(forwarded) == 5
    assert leader_ticks(standby, since) == 0
    # a forwarded tick is never forwarded again (a change of leader makes no loop)
    again, mark = time.time(), len(standby.lines)
    send_ticks(procs, broker, nodes["w2"], 1, forwarded=True)
    standby.wait_for(lambda line: "leader=0" in line and "succeeded" in line, 15, after=mark)
    time.sleep(1)
    assert not [line for at, _s, line in standby.lines
                if at > again and "tick forwarded" in line]
    assert leader_ticks(leader, again) == 0
