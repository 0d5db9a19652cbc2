"""The what-if's two runs side by side, one process each.

The baseline and the changed run share nothing once their scenarios are built, and each
is a single-threaded Python loop: on a machine with two free cores they take the time of
the longer one instead of the sum. Each run goes to a child started with ``spawn`` (never
``fork``: the caller may be a web process with threads whose locks a fork would copy
held), receives its scenario as plain data (pickling the validated dataclasses costs ten
times as much) and validates it itself, sends its progress back over a pipe at most once
per percent, and returns what the caller's ``summarize`` makes of the result document
(the what-if's per-team figures and starts: a few megabytes instead of every job's
record). The results are the same as in one process: the engine is deterministic, and a
test compares them.

Where a child cannot be started, the runs go one after the other in this process: one
usable core (``os.sched_getaffinity``), or a daemonic process such as a Celery prefork
worker, whose processes may not have children.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .engine import Simulation
from .result import build_result
from .scenario import Scenario, ScenarioError, validate_scenario

#: the most runs a what-if has (baseline and changed): more workers than this buy nothing
MAX_WORKERS = 2

Progress = Callable[[float], None]  # fraction of one run done, 0..1
#: what a run sends back: a function of its result document and its validated scenario
Summarize = Callable[[dict[str, Any], Scenario], Any]


class RunFailed(RuntimeError):
    """A run in a child process failed or died; the message names the run (1 or 2)."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """Two when two cores are usable and this process may have children, else one."""
    if multiprocessing.current_process().daemon:
        return 1
    return max(1, min(MAX_WORKERS, usable_cores()))


class InvalidScenario(ValueError):
    """A run's scenario is one the contract refuses: ``index`` (0 or 1) says which run,
    ``message`` is the validator's (it names the field)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        self.message = message


def whole(result: dict[str, Any], _scenario: Scenario) -> dict[str, Any]:
    """The result document itself (the default ``summarize``)."""
    return result


def run_scenarios(datas: Sequence[Mapping[str, Any]], progresses: Sequence[Progress], *,
                  workers: int, summarize: Summarize = whole,
                  scenarios: Sequence[Scenario] | None = None) -> list[Any]:
    """``summarize(result document, scenario)`` of each scenario's run, in order.
    ``datas``: each scenario's plain data; ``scenarios``: the same validated, if the
    caller has them. ``workers`` 1: one after the other here, every scenario validated
    before the first run; 2: each validated and run in a child process of its own
    (``summarize`` must then pickle: a module-level function, or a partial of one). A
    scenario the contract refuses raises InvalidScenario (the first run's first)."""
    if workers <= 1 or len(datas) < 2 or multiprocessing.current_process().daemon:
        if scenarios is None:
            scenarios = [_validated(i, data) for i, data in enumerate(datas)]
        return [summarize(_run(sc, progress), sc)
                for sc, progress in zip(scenarios, progresses, strict=True)]
    ctx = multiprocessing.get_context("spawn")
    children: list[tuple[Any, Connection]] = []
    try:
        for data in datas:
            mine, theirs = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_child, args=(theirs, dict(data), summarize),
                                daemon=True)
            child.start()
            theirs.close()  # the child holds the write end: EOF here when it dies
            children.append((child, mine))
        return _collect(children, progresses)
    finally:
        for child, conn in children:
            conn.close()
            if child.is_alive():
                child.terminate()
            child.join()


def _validated(index: int, data: Mapping[str, Any]) -> Scenario:
    try:
        return validate_scenario(data)
    except ScenarioError as exc:
        raise InvalidScenario(index, str(exc)) from exc


def _collect(children: list[tuple[Any, Connection]], progresses: Sequence[Progress]
             ) -> list[Any]:
    n = len(children)
    results: list[Any] = [None] * n
    answered = [False] * n  # the child validated its scenario (its first message)
    refused: dict[int, str] = {}
    index = {id(conn): i for i, (_child, conn) in enumerate(children)}
    open_conns = [conn for _child, conn in children]
    while open_conns:
        for conn in wait(open_conns):
            i = index[id(conn)]
            try:
                kind, value = conn.recv()  # type: ignore[union-attr]
            except EOFError:
                raise RunFailed(f"what-if run {i + 1} stopped without an answer "
                                   f"(exit code {children[i][0].exitcode})") from None
            answered[i] = True
            if kind == "valid":
                pass
            elif kind == "progress":
                progresses[i](value)
            elif kind == "invalid":
                refused[i] = value
                open_conns.remove(conn)  # type: ignore[arg-type]
            elif kind == "error":
                raise RunFailed(f"what-if run {i + 1} failed: {value}")
            else:
                results[i] = value
                open_conns.remove(conn)  # type: ignore[arg-type]
        if refused:
            # the first run's refusal first, as one after the other would say: wait
            # until every run before a refused one has validated its own
            for i in range(n):
                if not answered[i]:
                    break
                if i in refused:
                    raise InvalidScenario(i, refused[i])
    return results


def _run(scenario: Scenario, progress: Progress) -> dict[str, Any]:
    until = scenario.until_s

    def tick(now: int) -> None:
        progress(min(now, until) / until)

    # views off: pending reasons and estimates are not compared, and cost on a big queue
    result = build_result(Simulation(scenario, progress=tick, views=False).run())
    progress(1.0)
    return result


def _child(conn: Connection, data: dict[str, Any], summarize: Summarize) -> None:
    shown = [-1]

    def progress(fraction: float) -> None:
        percent = int(fraction * 100)
        if percent != shown[0]:
            shown[0] = percent
            conn.send(("progress", fraction))

    try:
        try:
            scenario = validate_scenario(data)
        except ScenarioError as exc:
            conn.send(("invalid", str(exc)))
            return
        conn.send(("valid", None))
        result = summarize(_run(scenario, progress), scenario)
    except Exception as exc:  # noqa: BLE001 - the parent raises it with the run's number
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        conn.send(("result", result))
    finally:
        conn.close()
