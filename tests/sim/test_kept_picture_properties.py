"""Property test of the kept picture (tick.KeptLine) followed across changes: on random
small contested clusters, with nodes going down, draining and coming back, quotas
changing and jobs cancelled at random instants, a core that takes the last tick's picture
over (and follows it across the tick's own starts and the jobs that let their GPUs go)
decides, estimates and tells reasons exactly as a core that books its reservations into
a fresh picture at every tick. The events are the changes the picture must not follow:
each must make the next tick build a fresh one."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_app.core.scheduler import Scheduler
from scheduler_app.sim.scenario import validate_scenario

from .helpers import assert_same_runs, core_keeping_no
from .test_shortcuts_properties import NODES, contested

_FreshPicture = core_keeping_no("kept_line")


@st.composite
def contested_with_events(draw: st.DrawFn) -> dict[str, Any]:
    data = draw(contested())
    events: list[dict[str, Any]] = []
    nodes = [f"pod-a-{i:03d}" for i in range(NODES)]
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(1, 1500))
        kind = draw(st.sampled_from(["node_down", "node_drain", "node_up", "node_undrain",
                                     "cancel", "set_quota"]))
        if kind == "cancel":  # (at or after its submission: the contract's rule)
            job = draw(st.sampled_from(data["jobs"]))
            events.append({"at_s": max(at, job["submit_at_s"]), "cancel": job["id"]})
        elif kind == "set_quota":  # none or all of its guarantee: the sum stays in bounds
            tenant = draw(st.sampled_from(data["tenants"]))
            events.append({"at_s": at, "set_quota": {
                "tenant": tenant["name"],
                "guaranteed_gpus": draw(st.sampled_from([0, tenant["guaranteed_gpus"]]))}})
        else:
            events.append({"at_s": at, kind: draw(st.sampled_from(nodes))})
    data["events"] = sorted(events, key=lambda e: e["at_s"])
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=contested_with_events(), policy=st.sampled_from(["full", "priority-kill"]),
       views=st.booleans())
def test_a_followed_picture_decides_as_a_fresh_one(data: dict[str, Any], policy: str,
                                                   views: bool) -> None:
    assert_same_runs(validate_scenario(data), policy, Scheduler, _FreshPicture, views=views)
