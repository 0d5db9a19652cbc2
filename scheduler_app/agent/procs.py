"""Job processes on this node: start one (through ``runner.py``), tell whether it still
runs, signal its process group, read its exit.

A process is identified by its pid *and* its start time (``/proc/<pid>/stat`` field 22,
clock ticks since boot) plus the boot id, so an agent that restarts never mistakes an
unrelated process that got a recycled pid for its job. Without ``/proc`` (not Linux) only
the pid is checked.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .runner import STOP_SIGNALS

RUNNER = str(Path(__file__).with_name("runner.py"))

#: Characters that make a command need a shell; without them it is exec'd directly.
SHELL_CHARS = set("|&;<>()$`\\*?[]#~{}\n")
SHELL_WORDS = {"cd", "exec", "export", "source", ".", "set", "ulimit", "umask", "eval",
               "if", "for", "while", "case", "until", "unset", "trap"}


def command_argv(command: str) -> list[str]:
    """The argv that runs ``command``: the words themselves for a simple command (no
    shell in between, so the job itself gets the stop signal), ``/bin/sh -c`` when it
    uses shell syntax (then the shell gets the signal too; write ``exec prog`` in it)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    simple = (
        words
        and not (SHELL_CHARS & set(command))
        and words[0] not in SHELL_WORDS
        and "=" not in words[0]
    )
    return words if simple else ["/bin/sh", "-c", command]


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None (no such process, a
    zombie, or no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(errors="replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def has_proc() -> bool:
    return Path("/proc/self/stat").exists()


@dataclass(frozen=True, slots=True)
class ProcessId:
    pid: int
    ticks: int | None
    boot: str | None

    def alive(self) -> bool:
        """Is this very process still running (not a recycled pid, not a zombie)?"""
        if has_proc():
            if self.boot is not None and self.boot != boot_id():
                return False  # the machine rebooted: every process of then is gone
            now = start_ticks(self.pid)
            return now is not None and (self.ticks is None or now == self.ticks)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def spawn(
    *,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    stdout: Path,
    stderr: Path,
    exit_file: Path,
) -> tuple[subprocess.Popen, ProcessId]:
    """Start ``argv`` under the runner, as the leader of a new session and process group,
    output appended to the two files."""
    # The runner inherits the signal mask: with the stop signals blocked until its
    # handlers are in place, a preemption right after the start cannot kill it unrecorded.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        with open(stdout, "ab") as out, open(stderr, "ab") as err:
            popen = subprocess.Popen(
                [sys.executable, RUNNER, str(exit_file), "--", *argv],
                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True, close_fds=True,
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return popen, ProcessId(popen.pid, start_ticks(popen.pid), boot_id())


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to every process of the group; False if the group is gone."""
    if pgid <= 1:
        return False  # 0 would be our own group, and 1 init's: never a job's
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def read_exit(exit_file: Path) -> dict | None:
    try:
        return json.loads(exit_file.read_text())
    except (OSError, ValueError):
        return None


def signal_number(name: str) -> int:
    """``TERM``, ``SIGTERM`` or ``15`` -> 15."""
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(getattr(signal, text))
    except AttributeError as error:
        raise ValueError(f"unknown signal {name!r}") from error
