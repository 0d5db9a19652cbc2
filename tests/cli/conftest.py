"""A live scheduler for the ``gpuq`` tests, over real HTTP: ``tests/agent/stack.py``'s
:class:`Stack` (gunicorn on a free port, a SQLite database of its own, optionally the
scheduler loop and node agents), plus users who sign in with a password, each with a
token. The tests run the installed ``gpuq`` command (``.venv/bin/gpuq``) as a user
would, and the SDK in this process.

The cluster: two 8-GPU H100 nodes (n0, n1); team vision guarantees 8 and may borrow 8, team
nlp guarantees 8. Users: vision's lead, two vision researchers, an nlp researcher, one
member of both teams, the operator (``op``).
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpuq
import pytest

from tests.agent.stack import Stack, migrated_template

GPUQ = Path(sys.executable).with_name("gpuq")
TEAMS = [("vision", 8, 8), ("nlp", 8, 0)]
NODES = [("n0", "pod-1", 8), ("n1", "pod-1", 8)]
#: username -> (tenant, role) memberships; every one signs in with password PASSWORD.
USERS = {
    "vision-lead": [("vision", "lead")],
    "vision-r1": [("vision", "researcher")],
    "vision-r2": [("vision", "researcher")],
    "nlp-r1": [("nlp", "researcher")],
    "both-r1": [("vision", "researcher"), ("nlp", "researcher")],
}
PASSWORD = "gpuq-test-pass-1"

#: Users with passwords and memberships, a token each.
MAKE_USERS = """
import json, sys
import django
django.setup()
from django.contrib.auth import get_user_model
from scheduler_app.api.tokens import token_issue
from scheduler_app.models import Membership, Node, Tenant
from scheduler_app.services.agents import agent_register

spec = json.loads(sys.argv[1])
for node in Node.objects.all():  # the same nodes, of a known GPU type
    agent_register(name=node.name, pod=node.pod.name, gpus=node.gpu_count, gpu_type="H100")
keys = {}
for username, memberships in spec["users"].items():
    user = get_user_model().objects.create_user(username, password=spec["password"])
    for tenant, role in memberships:
        Membership.objects.create(user=user, tenant=Tenant.objects.get(name=tenant), role=role)
    keys[username] = token_issue(user=user, name="test")[1]
print(json.dumps(keys))
"""


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not GPUQ.exists():
        pytest.fail(f"{GPUQ} is missing: `make venv` installs clients/python")
    return migrated_template(tmp_path_factory.mktemp("gpuq-db"))


@dataclass
class Live:
    """The running stack, and ways in: the ``gpuq`` command and the SDK."""

    stack: Stack
    home: Path
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.stack.url

    def env(self, who: str | None = "vision-r1", *, columns: int = 80, **extra: str
            ) -> dict[str, str]:
        """A user's environment: their token in GPUQ_TOKEN, an empty home of their own
        (no config file), an 80-column terminal."""
        self.home.mkdir(parents=True, exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix=f"{who or 'nobody'}-", dir=self.home))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
               "LANG": "C.UTF-8", "COLUMNS": str(columns), "GPUQ_URL": self.url,
               "PYTHONUNBUFFERED": "1"}
        if who is not None:
            env["GPUQ_TOKEN"] = self.keys[who]
        env.update(extra)
        return env

    def gpuq(self, *args: str, who: str | None = "vision-r1", stdin: str | None = None,
             columns: int = 80, env: dict[str, str] | None = None, timeout: float = 60
             ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GPUQ), *args], input=stdin if stdin is not None else "",
                              env=env or self.env(who, columns=columns), capture_output=True,
                              text=True, timeout=timeout)

    def client(self, who: str = "vision-r1", **kwargs: Any) -> gpuq.Client:
        return gpuq.Client(url=self.url, token=self.keys[who], **kwargs)


def start_live(tmp: Path, template: Path, *, heartbeat_timeout_s: int = 3600) -> Live:
    # the heartbeat timeout is long: without agents, the nodes stay up for every tick
    stack = Stack(tmp, template, heartbeat_timeout_s=heartbeat_timeout_s)
    stack.setup(tenants=TEAMS, nodes=NODES)
    live = Live(stack=stack, home=tmp / "homes")
    live.keys = {**stack.django(MAKE_USERS, {"users": USERS, "password": PASSWORD}),
                 "op": stack.keys["operator"]}
    stack.server()
    return live


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, template: Path) -> Iterator[Live]:
    started = start_live(tmp_path_factory.mktemp("gpuq-live"), template)
    try:
        yield started
    finally:
        started.stack.stop_all()


# ---------------------------------------------------------------------------- a terminal
def _as_a_foreground_job() -> None:
    """In the child before exec: the terminal becomes the new session's controlling
    terminal (Ctrl-C typed into it is a SIGINT to the program, and getpass reads it from
    /dev/tty), and SIGINT and SIGQUIT are at their defaults, as a shell gives a job it runs
    in the foreground. Without the reset, a test run started in the background of a
    non-interactive shell (``pytest &``: both ignored) hands its ignore down, and Python
    then never turns Ctrl-C into KeyboardInterrupt."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


class Terminal:
    """A program on a pseudo-terminal of its own (its controlling terminal), as a person
    runs it: what it writes is read back, keys are typed into it (``\\x03`` is Ctrl-C)."""

    def __init__(self, args: list[str], env: dict[str, str], *, columns: int = 80,
                 rows: int = 24) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.master = master
        self.text = ""
        self.popen = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
            preexec_fn=_as_a_foreground_job)
        os.close(slave)

    def read_until(self, needle: str, timeout: float = 30, *, after: int = 0) -> str:
        """Read until ``needle`` shows (after ``after`` characters); the whole text."""
        deadline = time.monotonic() + timeout
        while needle not in self.text[after:]:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"{needle!r} never came; the terminal shows:\n{self.text}")
        return self.text

    def _read(self, timeout: float) -> bool:
        """Read what is there; False once the program has closed the terminal."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            return False
        self.text += chunk.decode(errors="replace")
        return bool(chunk)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait(self, timeout: float = 30) -> int:
        """The program's exit status, once it has ended (everything it wrote read)."""
        deadline = time.monotonic() + timeout
        while self._read(0.1) and time.monotonic() < deadline:
            pass
        try:
            return self.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.text}") from None

    def close(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        os.close(self.master)


@pytest.fixture
def terminal() -> Iterator[Any]:
    opened: list[Terminal] = []

    def open_(args: list[str], env: dict[str, str], **kwargs: Any) -> Terminal:
        term = Terminal(args, env, **kwargs)
        opened.append(term)
        return term

    yield open_
    for term in opened:
        term.close()


def lines_fit(text: str, width: int = 80) -> list[str]:
    """The lines of ``text`` wider than ``width`` (none, when it fits)."""
    from gpuq.output import cell_width

    return [line for line in text.splitlines() if cell_width(line) > width]
