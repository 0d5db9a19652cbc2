"""A whole scheduler on this machine, for the agent's end-to-end tests: a SQLite database
in a temporary directory, the API server (gunicorn), the scheduler loop
(``run_scheduler``) and node agents (``python -m scheduler_app.agent``), every one a real
process. The test talks to it through the REST API only, as a pipeline would.

Timings are short (ticks every 0.3 s, heartbeats every 0.5 s, a heartbeat timeout of a few
seconds) so a preemption story takes seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.production.procs import REPO, Proc, free_port, poll

PYTHON = sys.executable
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))

#: Run with Django set up: the cluster, an operator with a token, an agent token per node.
SETUP = """
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from scheduler_app.api.tokens import token_issue
from scheduler_app.services.agents import agent_register
from scheduler_app.services.cluster import tenant_create

spec = json.loads(sys.argv[1])
keys = {}
for name, pod, gpus in spec["nodes"]:  # first: the guarantees must fit the cluster
    node = agent_register(name=name, pod=pod, gpus=gpus)
    keys[name] = token_issue(node=node, name="e2e")[1]
for name, guaranteed, borrow in spec["tenants"]:
    tenant_create(name=name, guaranteed_gpus=guaranteed, borrow_limit_gpus=borrow,
                  actor_name="test")
op = get_user_model().objects.create_user("op", is_staff=True)
keys["operator"] = token_issue(user=op, name="e2e")[1]
print(json.dumps(keys))
"""


def demo_command(*args: str) -> str:
    return " ".join([PYTHON, "-m", "scheduler_app.agent.demo_job", *args])


def migrated_template(folder: Path) -> Path:
    """A migrated, empty SQLite database; each test copies it."""
    db = folder / "template.sqlite3"
    subprocess.run([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=REPO,
                   env=base_env(db), check=True, timeout=300)
    return db


def base_env(db: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST", "PROMETHEUS", "DATABASE_URL", "SCHED_AGENT"))}
    env.update(
        DJANGO_SETTINGS_MODULE="scheduler_app.settings",
        DATABASE_URL=f"sqlite:///{db}",
        DEBUG="false",
        LOG_FORMAT="text",
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
        CELERY_BROKER_URL="",
        CACHE_URL="locmemcache://",
        API_THROTTLE_AGENT="",
        API_THROTTLE_USER="",
    )
    env.update(extra)
    return env


class Stack:
    def __init__(self, tmp: Path, template: Path, *, heartbeat_timeout_s: int = 5,
                 tick_s: float = 0.3) -> None:
        self.tmp = tmp
        self.db = tmp / "db.sqlite3"
        shutil.copy(template, self.db)
        self.env = base_env(self.db, SCHEDULER_HEARTBEAT_TIMEOUT_S=str(heartbeat_timeout_s),
                            SCHEDULER_LEASE_TTL_S="5")
        self.tick_s = tick_s
        self.procs: list[Proc] = []
        self.keys: dict[str, str] = {}
        self.url = ""

    # ------------------------------------------------------------------ processes
    def setup(self, *, tenants: list[tuple[str, int, int]],
              nodes: list[tuple[str, str, int]]) -> None:
        self.keys = self.django(SETUP, {"tenants": tenants, "nodes": nodes})

    def django(self, code: str, payload: Any) -> Any:
        """Run ``code`` (it sets Django up itself) on the stack's database with
        ``payload`` as JSON in ``sys.argv[1]``; returns its last line of output, as JSON."""
        done = subprocess.run(
            [PYTHON, "-c", code, json.dumps(payload)],
            cwd=REPO, env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(name, args, env or self.env)
        self.procs.append(proc)
        return proc

    def server(self) -> Proc:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        # one worker: the log tails live in its (per-process) memory cache
        proc = self.start("gunicorn", [GUNICORN, "scheduler_app.wsgi", "--bind",
                                       f"127.0.0.1:{port}", "--workers", "1", "--threads", "8",
                                       "--timeout", "60", "--http-parser", "fast"])
        poll(lambda: self._up(), 60, every=0.1, what="the API server")
        return proc

    def _up(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/api/schema/", timeout=2).close()
        except (urllib.error.URLError, OSError):
            return False
        return True

    def scheduler(self) -> Proc:
        return self.start("run_scheduler", [PYTHON, "manage.py", "run_scheduler", "--holder",
                                            "e2e", "--interval", str(self.tick_s), "-v", "2"])

    def agent(self, node: str, *extra: str) -> Proc:
        token = self.tmp / f"token-{node}"
        token.write_text(self.keys[node])
        token.chmod(0o600)
        return self.start(f"agent[{node}]", [
            PYTHON, "-m", "scheduler_app.agent", "--node", node, "--api", self.url,
            "--token-file", str(token), "--work-dir", str(self.work_dir(node)),
            "--heartbeat", "0.5", "--poll", "0.3", "--loop", "0.1", *extra])

    def work_dir(self, node: str) -> Path:
        return self.tmp / f"agent-{node}"

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=10)
        # jobs outlive agents on purpose (a restarted agent adopts them): end them here
        for state in self.tmp.glob("agent-*/agent-state.json"):
            for run in json.loads(state.read_text())["runs"]:
                if run["pid"] > 1:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(run["pid"], 9)

    # ------------------------------------------------------------------ the API
    def api(self, method: str, path: str, body: dict[str, Any] | None = None,
            who: str = "operator") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}/api/v1{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.keys[who]}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()[:500]!r}") from None

    def submit(self, tenant: str, name: str, gpus: int, command: str, **spec: Any) -> int:
        job = self.api("POST", "/jobs/", {"tenant": tenant, "name": name, "gpus": gpus,
                                          "command": command, **spec})
        return int(job["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return self.api("GET", f"/jobs/{job_id}/")

    def wait_job(self, job_id: int, pred, timeout: float = 60, what: str = "") -> dict[str, Any]:
        """Poll the job's detail until ``pred(detail)`` holds; returns the detail."""
        found: dict[str, Any] = {}

        def check() -> bool:
            found.clear()
            found.update(self.job(job_id))
            return bool(pred(found))

        try:
            poll(check, timeout, every=0.2, what=what or f"job {job_id}")
        except AssertionError as error:
            moves = [(h["to_state"], h["reason"]) for h in found.get("history", [])]
            raise AssertionError(f"{error}; job is {found.get('state')}, history {moves}"
                                 f"\n{self.tails()}") from None
        return found

    def node(self, name: str) -> dict[str, Any]:
        return self.api("GET", f"/nodes/{name}/")

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(25)}" for p in self.procs)


def run_dirs(stack: Stack, node: str, job_id: int) -> list[Path]:
    root = stack.work_dir(node) / "jobs" / str(job_id) / "runs"
    return sorted(root.iterdir(), key=lambda p: int(p.name)) if root.exists() else []


def first_log(stack: Stack, node: str, job_id: int) -> Path | None:
    """The job's first run's stdout on ``node``, or None while the agent has not made its
    run directory yet (the job may show RUNNING a moment before it exists)."""
    runs = run_dirs(stack, node, job_id)
    return runs[0] / "stdout.log" if runs else None


def wait_text(path_fn, needle: str, timeout: float = 60) -> str:
    """Wait until the file ``path_fn()`` names holds ``needle``; returns the text."""
    box: dict[str, str] = {}

    def check() -> bool:
        path = path_fn()
        if path is None or not Path(path).exists():
            return False
        box["text"] = Path(path).read_text()
        return needle in box["text"]

    poll(check, timeout, every=0.1, what=f"{needle!r} in a log")
    return box["text"]


def now() -> float:
    return time.time()
