"""Check a result file against the rules of SCENARIOS.md, whatever the policy.

``check_result(result, scenario)`` returns a list of violations (empty: the result obeys
the contract). Used by the tests on every simulated run; usable by anyone on any result:

    python -m scheduler_app.sim.invariants SCENARIO.yaml RESULT.json

Rules checked:
- every ``transitions`` list starts at SUBMITTED, is a legal path of the state machine,
  never goes back in time, and ends in the job's ``state``;
- every run's ``alloc`` names known nodes, holds no more than a node has, sums to the job's
  GPUs (between ``min_gpus`` and ``gpus`` for an elastic job); ``end`` is one of the
  allowed values, ``end_s`` is null exactly when ``end`` is RUNNING, runs do not overlap;
- at no instant does a node hold more GPUs than it has (a sweep over run intervals);
- no run is on a node while that node is down, and no run starts on a draining node;
- ``first_start_s``, ``preemptions`` and ``end_s`` agree with the runs and transitions;
- every top-level preemption names a job that was asked to stop at that instant.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from scheduler_app.core.states import FINAL_STATES, JobState, is_allowed

from .result import RUN_ENDS
from .scenario import Scenario, load_scenario


def check_result(result: Mapping[str, Any], scenario: Scenario) -> list[str]:
    problems: list[str] = []
    node_gpus = {spec.name: spec.gpus for spec in scenario.node_specs()}
    specs = {j.id: j.spec for j in scenario.jobs}
    jobs = result.get("jobs", {})
    per_node: dict[str, list[tuple[int, int, int, str]]] = {n: [] for n in node_gpus}
    horizon = scenario.until_s + 1
    for job_id, job in sorted(jobs.items()):
        spec = specs.get(job_id)
        if spec is None:
            problems.append(f"{job_id}: not a job of the scenario")
            continue
        problems.extend(_check_transitions(job_id, job))
        problems.extend(_check_runs(job_id, job, spec, node_gpus))
        for run in job.get("runs", []):
            end = run["end_s"] if run["end_s"] is not None else horizon
            for node, gpus in run["alloc"].items():
                if node in per_node:
                    per_node[node].append((run["start_s"], end, gpus, job_id))
    problems.extend(_check_capacity(per_node, node_gpus))
    problems.extend(_check_node_health(per_node, scenario, horizon))
    asked = {
        (job_id, t["at_s"])
        for job_id, job in jobs.items()
        for t in job.get("transitions", [])
        if t["to"] == JobState.PREEMPT_REQUESTED
    }
    for i, p in enumerate(result.get("preemptions", [])):
        if (p.get("victim"), p.get("at_s")) not in asked:
            problems.append(f"preemptions[{i}]: {p.get('victim')} was not asked to stop "
                            f"at {p.get('at_s')}")
    return problems


def _check_transitions(job_id: str, job: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    trans = job.get("transitions", [])
    if not trans:
        if job.get("state") is not None:
            out.append(f"{job_id}: state {job.get('state')} without transitions")
        return out
    if trans[0]["to"] != JobState.SUBMITTED:
        out.append(f"{job_id}: first transition is to {trans[0]['to']}, not SUBMITTED")
    for prev, cur in zip(trans, trans[1:], strict=False):
        if cur["at_s"] < prev["at_s"]:
            out.append(f"{job_id}: transition to {cur['to']} at {cur['at_s']} goes back in time")
        if not is_allowed(prev["to"], cur["to"]):
            out.append(f"{job_id}: illegal transition {prev['to']} -> {cur['to']} "
                       f"at {cur['at_s']}")
    last = trans[-1]
    if job.get("state") != last["to"]:
        out.append(f"{job_id}: state {job.get('state')} but last transition is {last['to']}")
    final = last["to"] in FINAL_STATES
    if final and job.get("end_s") != last["at_s"]:
        out.append(f"{job_id}: end_s {job.get('end_s')} but it became {last['to']} "
                   f"at {last['at_s']}")
    if not final and job.get("end_s") is not None:
        out.append(f"{job_id}: end_s set but state {last['to']} is not final")
    return out


def _check_runs(job_id: str, job: Mapping[str, Any], spec: Any,
                node_gpus: Mapping[str, int]) -> list[str]:
    out: list[str] = []
    runs = job.get("runs", [])
    low = spec.least_gpus
    prev_end: int | None = None
    for i, run in enumerate(runs):
        where = f"{job_id}: runs[{i}]"
        total = sum(run["alloc"].values())
        if not low <= total <= spec.gpus:
            want = f"{spec.gpus}" if low == spec.gpus else f"{low}..{spec.gpus}"
            out.append(f"{where}: alloc holds {total} GPUs, the job needs {want}")
        for node, gpus in run["alloc"].items():
            if node not in node_gpus:
                out.append(f"{where}: unknown node {node}")
            elif not 0 < gpus <= node_gpus[node]:
                out.append(f"{where}: {gpus} GPUs on {node}, which has {node_gpus[node]}")
            elif spec.gpus_per_node is not None and not spec.elastic \
                    and gpus != spec.gpus_per_node:
                out.append(f"{where}: {gpus} GPUs on {node}, shape is {spec.gpus_per_node}")
        if run["end"] not in RUN_ENDS:
            out.append(f"{where}: end {run['end']} is not one of {', '.join(sorted(RUN_ENDS))}")
        if (run["end_s"] is None) != (run["end"] == "RUNNING"):
            out.append(f"{where}: end_s {run['end_s']} with end {run['end']}")
        if run["end_s"] is not None and run["end_s"] < run["start_s"]:
            out.append(f"{where}: ends at {run['end_s']} before it starts at {run['start_s']}")
        if prev_end is not None and run["start_s"] < prev_end:
            out.append(f"{where}: starts at {run['start_s']} before the previous run ended")
        if run["end_s"] is None and i != len(runs) - 1:
            out.append(f"{where}: still running but not the last run")
        prev_end = run["end_s"] if run["end_s"] is not None else prev_end
    first = runs[0]["start_s"] if runs else None
    if job.get("first_start_s") != first:
        out.append(f"{job_id}: first_start_s {job.get('first_start_s')} but first run at {first}")
    preempted = sum(1 for r in runs if r["end"] == "PREEMPTED")
    if job.get("preemptions") != preempted:
        out.append(f"{job_id}: preemptions {job.get('preemptions')} but {preempted} runs "
                   "ended PREEMPTED")
    if runs and runs[-1]["end"] == "RUNNING" and job.get("state") not in (
        JobState.RUNNING, JobState.PREEMPT_REQUESTED, JobState.CHECKPOINTING, JobState.PLACING
    ):
        out.append(f"{job_id}: last run still RUNNING but the job is {job.get('state')}")
    return out


def _check_capacity(per_node: Mapping[str, list[tuple[int, int, int, str]]],
                    node_gpus: Mapping[str, int]) -> list[str]:
    """Sweep each node's run intervals [start, end): ends before starts at one instant."""
    out: list[str] = []
    for node, intervals in sorted(per_node.items()):
        points: list[tuple[int, int, int, str]] = []
        for start, end, gpus, job_id in intervals:
            if end > start:
                points.append((start, 1, gpus, job_id))
                points.append((end, 0, -gpus, job_id))
        held = 0
        for at, _kind, delta, job_id in sorted(points):
            held += delta
            if held > node_gpus[node]:
                out.append(f"{node}: holds {held} GPUs at {at} (has {node_gpus[node]}), "
                           f"over-committed when {job_id} starts")
                break
    return out


def _check_node_health(per_node: Mapping[str, list[tuple[int, int, int, str]]],
                       scenario: Scenario, horizon: int) -> list[str]:
    down, drain = _health_intervals(scenario, horizon)
    out: list[str] = []
    for node, intervals in sorted(per_node.items()):
        for start, end, _gpus, job_id in intervals:
            for d_start, d_end in down.get(node, []):
                if start < d_end and end > d_start:
                    out.append(f"{job_id}: runs on {node} from {start} to {end} while it is "
                               f"down ({d_start}..{d_end})")
            for d_start, d_end in drain.get(node, []):
                if d_start <= start < d_end:
                    out.append(f"{job_id}: starts on {node} at {start} while it drains")
    return out


Intervals = dict[str, list[tuple[int, int]]]


def _health_intervals(scenario: Scenario, horizon: int) -> tuple[Intervals, Intervals]:
    """Half-open [from, to) intervals during which each node is down, or draining.

    Mirrors the core's node health: down from any state, up to healthy from any state,
    drain only a healthy node, undrain only a draining one. Events of one instant apply
    in file order, as in the engine.
    """
    health: dict[str, tuple[str, int]] = {}  # node -> (health, since)
    down: Intervals = {}
    drain: Intervals = {}

    def close(node: str, at: int) -> None:
        state, since = health.pop(node, ("healthy", 0))
        if state == "down":
            down.setdefault(node, []).append((since, at))
        elif state == "draining":
            drain.setdefault(node, []).append((since, at))

    for ev in sorted(scenario.events, key=lambda e: (e.at_s, e.index)):
        node, at = ev.target, ev.at_s
        state = health.get(node, ("healthy", 0))[0]
        if ev.kind == "node_down" and state != "down":
            close(node, at)
            health[node] = ("down", at)
        elif ev.kind == "node_up" and state != "healthy":
            close(node, at)
        elif ev.kind == "node_drain" and state == "healthy":
            health[node] = ("draining", at)
        elif ev.kind == "node_undrain" and state == "draining":
            close(node, at)
    for node in list(health):
        close(node, horizon)
    return down, drain


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m scheduler_app.sim.invariants SCENARIO RESULT.json",
              file=sys.stderr)
        return 2
    scenario = load_scenario(args[0])
    with open(args[1], encoding="utf-8") as fh:
        result = json.load(fh)
    problems = check_result(result, scenario)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
