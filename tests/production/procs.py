"""Real processes for the integration and fault tests: run_scheduler, Celery worker and
beat, a private redis-server, a submitter; plus the consistency checks after a fault.

Every process runs against the test database (the tests are ``transaction=True``, so what
they commit is visible to the processes) and is stopped by the ``procs`` fixture, kill -9
if it does not stop on SIGTERM. A process's stdout and stderr lines are collected by a
reader thread so a test can wait for a line without blocking on the pipe.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from scheduler_app.core.states import HOLDING_STATES
from scheduler_app.models import Allocation, Job, Node
from tests.foundation.test_replay import replay_verify

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
CELERY = str(Path(sys.executable).with_name("celery"))


def database_url() -> str:
    """The test database (pytest-django's ``test_<name>``) as a DATABASE_URL."""
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    auth = f"{user}:{s['PASSWORD']}" if s.get("PASSWORD") else user
    return f"postgres://{auth}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def shared_redis_base() -> str:
    """host:port of the machine's Redis (CI's CELERY_BROKER_URL, else the default)."""
    url = os.environ.get("CELERY_BROKER_URL", "")
    found = re.match(r"redis://(?:[^@/]*@)?([^/]+)", url)
    return found.group(1) if found else "127.0.0.1:6379"


#: Our own database number on the shared Redis; each test also uses a queue of its own.
SHARED_REDIS_DB = 13


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PROMETHEUS"))}
    env.update(
        DJANGO_SETTINGS_MODULE="scheduler_app.settings",
        DATABASE_URL=database_url(),
        CONN_MAX_AGE="0",
        DEBUG="false",
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        CELERY_BROKER_URL="",
    )
    env.update(extra)
    return env


class Proc:
    """A child process whose output lines are collected as they come."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], *, stdin: bool = False
    ) -> None:
        self.name = name
        self.args = args
        self.lines: list[tuple[float, str, str]] = []  # (time.time(), stream, line)
        self._cond = threading.Condition()
        self.popen = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True, bufsize=1, start_new_session=True,
        )
        self._readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in ("stdout", "stderr")
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self, stream: str) -> None:
        for line in getattr(self.popen, stream):
            with self._cond:
                self.lines.append((time.time(), stream, line.rstrip("\n")))
                self._cond.notify_all()

    def wait_for(
        self, pred: Callable[[str], bool], timeout: float, *, after: int = 0
    ) -> tuple[int, float, str]:
        """The first line (index >= ``after``) matching ``pred``: (index, time, line)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(after, len(self.lines)):
                    at, _stream, line = self.lines[i]
                    if pred(line):
                        return i, at, line
                left = deadline - time.monotonic()
                ended = self.popen.poll() is not None and not any(
                    r.is_alive() for r in self._readers
                )
                if left <= 0 or ended:
                    raise AssertionError(
                        f"{self.name}: no matching line in {timeout} s "
                        f"(exit {self.popen.poll()}); output:\n{self.tail()}"
                    )
                self._cond.wait(min(left, 0.1))

    def tail(self, n: int = 40) -> str:
        with self._cond:
            return "\n".join(f"[{s}] {line}" for _t, s, line in self.lines[-n:])

    def json_lines(self) -> list[dict[str, Any]]:
        out = []
        with self._cond:
            lines = [line for _t, _s, line in self.lines]
        for line in lines:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def ticks(self) -> list[dict[str, Any]]:
        """The tick log lines (JSON) this process wrote, in order."""
        return [j for j in self.json_lines() if isinstance(j.get("tick"), dict)]

    def kill9(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited after ``timeout`` seconds."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.kill9()
        return self.popen.returncode

    def signal(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def go(self, *args: str) -> Proc:
        """A warm process (``Procs.warm_run_scheduler``): run the command now."""
        assert self.popen.stdin is not None
        self.args = [*self.args, *args]
        self.popen.stdin.write(" ".join(args) + "\n")
        self.popen.stdin.flush()
        return self


#: Django set up and the tick's modules imported, then ``run_scheduler`` with the arguments
#: of the first stdin line: the same command, without a second of start-up on the clock.
WARM_RUN_SCHEDULER = """
import sys
import django
django.setup()
from django.core.management import call_command
import scheduler_app.management.commands.run_scheduler, scheduler_app.services.leader
print("warm", flush=True)
call_command("run_scheduler", *sys.stdin.readline().split())
"""


class Procs:
    """Starts processes for one test and stops them all at its end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.all: list[Proc] = []
        self.redis: list[PrivateRedis] = []
        self.queue = f"sched-test-{uuid.uuid4().hex[:10]}"

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Proc:
        proc = Proc(name, args, env)
        self.all.append(proc)
        return proc

    def run_scheduler(
        self, holder: str, *, interval: float = 0.2, ttl_s: int = 3, verbosity: int = 3,
        **env: str,
    ) -> Proc:
        return self.start(
            f"run_scheduler[{holder}]",
            [PYTHON, "manage.py", "run_scheduler", "--holder", holder,
             "--interval", str(interval), "-v", str(verbosity)],
            base_env(SCHEDULER_LEASE_TTL_S=str(ttl_s), **env),
        )

    def warm_run_scheduler(self, *, ttl_s: int = 3, **env: str) -> Proc:
        """A process that will run ``run_scheduler`` once given its arguments (``go``)."""
        proc = Proc("run_scheduler[warm]", [PYTHON, "-c", WARM_RUN_SCHEDULER],
                    base_env(SCHEDULER_LEASE_TTL_S=str(ttl_s), **env), stdin=True)
        self.all.append(proc)
        return proc

    def celery_env(self, broker: str, **env: str) -> dict[str, str]:
        return base_env(CELERY_BROKER_URL=broker, CELERY_TASK_DEFAULT_QUEUE=self.queue, **env)

    def worker(self, broker: str, *, name: str = "w1", **env: str) -> Proc:
        proc = self.start(
            f"worker[{name}]",
            [CELERY, "-A", "scheduler_app.celery:app", "worker", "--pool", "solo",
             "--without-mingle", "--without-gossip", "--without-heartbeat",
             "-n", f"{name}-{self.queue}@%h", "--loglevel", "INFO"],
            self.celery_env(broker, **env),
        )
        proc.wait_for(lambda line: "ready." in line, 60)
        return proc

    def beat(self, broker: str, *, interval_s: int, **env: str) -> Proc:
        schedule = self.tmp / f"beat-{uuid.uuid4().hex[:6]}"
        return self.start(
            "beat",
            [CELERY, "-A", "scheduler_app.celery:app", "beat", "--schedule", str(schedule),
             "--loglevel", "INFO"],
            self.celery_env(broker, SCHEDULER_TICK_INTERVAL_S=str(interval_s), **env),
        )

    def python(self, name: str, code: str, env: dict[str, str]) -> Proc:
        """A Python process with Django set up, running ``code``."""
        return self.start(name, [PYTHON, "-c", "import django; django.setup()\n" + code], env)

    def private_redis(self) -> PrivateRedis:
        redis = PrivateRedis(self.tmp)
        self.redis.append(redis)
        return redis

    def stop_all(self) -> None:
        for proc in reversed(self.all):
            proc.stop(timeout=10)
        for redis in self.redis:
            redis.stop()
        self.forget_queue()

    def forget_queue(self) -> None:
        """Remove what our workers left on the shared Redis: the queue, its bindings and
        the workers' control-queue bindings (all named after our queue)."""
        import redis

        try:
            client = redis.Redis.from_url(f"redis://{shared_redis_base()}/{SHARED_REDIS_DB}")
            for key in client.scan_iter(f"*{self.queue}*"):
                client.delete(key)
            for key in client.scan_iter("_kombu.binding.*"):
                stale = [m for m in client.smembers(key) if self.queue.encode() in m]
                if stale:
                    client.srem(key, *stale)
            # ticks a killed worker took (acks late) and never acknowledged
            for tag, message in client.hgetall("unacked").items():
                if self.queue.encode() in message:
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
        except redis.RedisError:
            pass  # nothing to clean if the shared Redis is not there


class PrivateRedis:
    """A redis-server of the test's own on a free port (never the shared one), no
    persistence: stopping it loses the queued messages, as a crash would."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp / f"redis-{self.port}"
        self.dir.mkdir()
        self.popen: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.skip("redis-server is not installed")
        self.popen = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # a frozen server dies as well
            self.popen.kill()
            self.popen.wait(10)
        self.popen = None

    def freeze(self) -> None:
        """SIGSTOP: the port still accepts connections (the kernel's backlog), nothing
        answers: a hung broker, the worst case for a client without timeouts."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGCONT)

    def queued(self, queue: str = "celery") -> int:
        """Messages waiting in ``queue`` (db 0)."""
        import redis

        return int(redis.Redis(port=self.port, socket_timeout=2).llen(queue))


@contextmanager
def started_procs(tmp_path: Path) -> Iterator[Procs]:
    """The test modules' ``procs`` fixture: what it starts is stopped at the end."""
    started = Procs(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()
        connection.close()  # the flush after the test needs no stale connection state


def poll(pred: Callable[[], Any], timeout: float, every: float = 0.02, what: str = "") -> Any:
    """Wait until ``pred()`` is truthy (returns it) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or pred}")
        time.sleep(every)


def assert_consistent() -> None:
    """What must hold after any fault: the log replays to the tables, no node gives out
    more GPUs than it has or a GPU twice, every holding job has its whole allocation and
    nothing else holds GPUs."""
    ok, output = replay_verify()
    assert ok, output
    held: dict[int, list[int]] = {}
    by_job: dict[int, int] = {}
    for job_id, node_id, indices in Allocation.objects.filter(end__isnull=True).values_list(
        "job_id", "node_id", "gpu_indices"
    ):
        held.setdefault(node_id, []).extend(indices)
        by_job[job_id] = by_job.get(job_id, 0) + len(indices)
    for node in Node.objects.all():
        indices = held.get(node.pk, [])
        assert len(indices) == len(set(indices)), f"{node.name}: a GPU given twice {indices}"
        assert len(indices) <= node.gpu_count, f"{node.name} over-allocated: {indices}"
        assert node.free_gpus == node.gpu_count - len(indices), node
    holding = {s.value for s in HOLDING_STATES}
    for job in Job.objects.all():
        gpus = by_job.get(job.pk, 0)
        if job.state in holding:
            need = job.min_gpus or job.gpus
            assert need <= gpus <= job.gpus, f"{job} holds {gpus} GPUs"
        else:
            assert gpus == 0, f"{job} is {job.state} but holds {gpus} GPUs"
