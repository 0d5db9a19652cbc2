"""The wrapper between the agent and a job: ``python runner.py EXIT_FILE -- ARGV...``.

Why a wrapper: an agent that restarts is no longer its jobs' parent, so it cannot wait
for them and would never learn their exit codes. The runner is the job's parent for the
job's whole life; it writes the exit code to ``EXIT_FILE`` (JSON, written atomically) and
the agent, restarted or not, reads it.

The agent starts the runner as the leader of a new process group and signals the whole
group (the job and anything it spawned). The runner itself ignores those signals (no-op
handlers, which exec resets to the default in the job) and:

- once its direct child exited, without a stop signal: kills what the job left behind in
  its group (as Slurm does when a batch script ends) and records the exit;
- after a stop signal: waits for every process of the group to exit before recording
  the exit, so a job started through ``/bin/sh -c`` whose shell died of the signal while
  the real program still writes its checkpoint is not reported as gone too early (the
  agent kills the whole group at the end of the grace window anyway).

Run by file path, not as a module: it imports nothing of the package, so any Python 3.11
runs it, whatever the job's environment (the agent passes ``sys.executable``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

#: The signals an agent may use to ask a job to stop (``--stop-signal``).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                signal.SIGUSR2, signal.SIGQUIT)

_stop_requested = False
_stop_signum: int | None = None


def _on_stop_signal(signum: int, _frame: object) -> None:
    global _stop_requested, _stop_signum
    _stop_requested = True
    _stop_signum = signum


def exit_code_of(returncode: int) -> int:
    """A shell's convention: a death by signal N is 128 + N (137 for SIGKILL)."""
    return 128 - returncode if returncode < 0 else returncode


def others_in_group(pgid: int) -> list[int]:
    """Pids of the other live processes of process group ``pgid`` (Linux: /proc)."""
    me = os.getpid()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []  # no /proc: the group cannot be watched, the direct child decides
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(name))
    return found


def write_exit(path: str, record: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: runner.py EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)
    # The agent starts us with these signals blocked, so one sent before our handlers
    # existed waits (instead of killing us unrecorded) and is delivered here.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    started = time.time()
    if _stop_requested:  # asked to stop before the job even started: do not start it
        assert _stop_signum is not None
        write_exit(exit_file, {"exit_code": 128 + _stop_signum, "signal": _stop_signum,
                               "not_started": True, "started_at": started,
                               "ended_at": time.time()})
        return 128 + _stop_signum
    try:
        child = subprocess.Popen(command)
    except OSError as error:
        print(f"agent runner: cannot start {command[0]!r}: {error}", file=sys.stderr)
        write_exit(exit_file, {"exit_code": 127, "signal": None, "error": str(error),
                               "started_at": started, "ended_at": time.time()})
        return 127
    returncode = child.wait()  # PEP 475: retried after our no-op handlers run
    pgid = os.getpgid(0)
    if _stop_requested:
        while others_in_group(pgid):
            time.sleep(0.1)
    else:
        for pid in others_in_group(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    write_exit(exit_file, {
        "exit_code": exit_code_of(returncode),
        "signal": -returncode if returncode < 0 else None,
        "stop_signal_seen": _stop_requested,
        "started_at": started,
        "ended_at": time.time(),
    })
    return exit_code_of(returncode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
