"""The product's policy against the baselines on the Helios window, with a plot.

    python -m bench.policies [--from-day 0 --days 120] [--policies full,fifo,priority-kill]
                             [--max-wall-s 420] [--reuse-full]

Runs the window under each policy (SCENARIOS.md: ``full`` is the product, ``fifo`` the naive
scheduler, ``priority-kill`` fair share and backfill with kill-the-newest preemption) and
tabulates the result file's metrics: utilization, mean and p95 wait, mean bounded
slowdown, GPU-hours lost to preemption, entitled p95 wait. ``--reuse-full`` takes ``full``
from bench/results/sim_speed.json when that run covered the same window and completed
(the same deterministic run; it saves minutes of the shared machine). The plot goes to
docs/img/policies_helios.png.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench._common import (
    IMG_DIR,
    RESULTS_DIR,
    log,
    machine,
    machine_line,
    now_utc,
    pin_one_core,
    table,
    update_doc_section,
    write_results,
)
from bench._helios_run import helios_scenario, run_policy

NAME = "policies"
POLICIES = ("full", "fifo", "priority-kill")
#: (metric key, column title, lower is better?)
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("utilization", "utilization", False),
    ("mean_wait_s", "mean wait s", True),
    ("p95_wait_s", "p95 wait s", True),
    ("mean_bounded_slowdown", "mean bounded slowdown", True),
    ("gpu_hours_lost_to_preemption", "GPU-h lost to preemption", True),
    ("preemptions", "preemptions", True),
    ("entitled_wait_p95_s", "entitled p95 wait s", True),
)


def _reusable_full(window: dict[str, Any], results_dir: Path) -> dict[str, Any] | None:
    path = results_dir / "sim_speed.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    keys = ("from_day", "days", "jobs", "capacity_scale")
    same = all(data.get("window", {}).get(k, 1.0 if k == "capacity_scale" else None)
               == window[k] for k in keys)
    if same and data.get("policy") == "full" and data.get("complete"):
        return {k: data[k] for k in ("policy", "complete", "error", "simulated_s", "wall_s",
                                      "sim_s_per_wall_s", "metrics")} | {"reused": str(path)}
    return None


def run(*, from_day: int, days: int, policies: list[str], max_wall_s: float | None,
        reuse_full: bool, results_dir: Path, trace: str | None = None,
        quota: str | None = None, scale: float = 1.0) -> dict[str, Any]:
    log(f"{NAME}: importing Helios days {from_day}-{from_day + days - 1}...")
    scenario, window = helios_scenario(from_day, days, trace=trace, quota=quota, scale=scale)
    runs: list[dict[str, Any]] = []
    for policy in policies:
        reused = _reusable_full(window, results_dir) if policy == "full" and reuse_full else None
        if reused is not None:
            log(f"{NAME}: full: reusing {reused['reused']}")
            runs.append(reused)
            continue
        log(f"{NAME}: {policy}: simulating {window['jobs']} jobs...")
        rep = run_policy(scenario, policy, max_wall_s=max_wall_s, views=False)
        log(f"{NAME}: {policy}: {'complete' if rep.complete else rep.error} "
            f"in {rep.wall_s:.0f} s")
        runs.append(rep.as_dict())
    return {"window": window, "runs": runs, "checks": _checks(runs)}


def _checks(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 4's targets: full loses at most half of priority-kill's GPU-hours, and its
    entitled p95 wait is within the default grace (120 s) of priority-kill's."""
    by = {r["policy"]: r["metrics"] for r in runs if r.get("metrics")}
    full, pk = by.get("full"), by.get("priority-kill")
    if not full or not pk:
        return {"measured": False}
    lost_full = full["gpu_hours_lost_to_preemption"]
    lost_pk = pk["gpu_hours_lost_to_preemption"]
    ent_full, ent_pk = full["entitled_wait_p95_s"], pk["entitled_wait_p95_s"]
    return {
        "measured": True,
        "lost_gpu_h_full": lost_full,
        "lost_gpu_h_priority_kill": lost_pk,
        "lost_at_most_half": lost_full <= 0.5 * lost_pk if lost_pk else lost_full == 0,
        "entitled_p95_full_s": ent_full,
        "entitled_p95_priority_kill_s": ent_pk,
        "entitled_within_grace": (ent_full is not None and ent_pk is not None
                                  and ent_full <= ent_pk + 120),
    }


def plot(res: dict[str, Any], path: Path) -> Path | None:
    runs = [r for r in res["runs"] if r.get("metrics")]
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"full": "#2b7bba", "fifo": "#9e9e9e", "priority-kill": "#d95f02"}
    fig, axes = plt.subplots(2, 4, figsize=(14, 6))
    for ax, (key, title, lower) in zip(axes.flat, COLUMNS, strict=False):
        names = [r["policy"] for r in runs]
        values = [r["metrics"].get(key) or 0 for r in runs]
        bars = ax.bar(names, values, color=[colors.get(n, "#666") for n in names])
        ax.set_title(f"{title} ({'lower' if lower else 'higher'} is better)", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_ylim(bottom=0)
        for b, v in zip(bars, values, strict=True):
            label = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
            ax.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8)
    axes.flat[-1].axis("off")
    w = res["window"]
    fig.suptitle(f"Helios Venus days {w['from_day']}-{w['from_day'] + w['days'] - 1}: "
                 f"{w['jobs']:,} jobs on {w['gpus']:,} GPUs", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section(res: dict[str, Any], m: dict[str, Any], date: str, img: Path | None,
            doc: Path, name: str | None = None) -> str:
    w = res["window"]
    name = name or _name(w)
    rows = []
    for r in res["runs"]:
        met = r.get("metrics") or {}
        note = "complete" if r["complete"] else f"incomplete: {r['error']}"
        if r.get("reused"):
            note += " (from sim_speed)"
        rows.append([f"`{r['policy']}`", *[met.get(k) for k, _, _ in COLUMNS],
                     r["wall_s"], note])
    c = res["checks"]
    if c.get("measured"):
        checks = (
            f"Issue 4's targets: `full` loses {c['lost_gpu_h_full']:.1f} GPU-hours to preemption "
            f"against `priority-kill`'s {c['lost_gpu_h_priority_kill']:.1f} (at most half: "
            f"**{'met' if c['lost_at_most_half'] else 'NOT met'}**); entitled p95 wait "
            f"{c['entitled_p95_full_s']} s against {c['entitled_p95_priority_kill_s']} s "
            f"(within the 120 s grace: **{'met' if c['entitled_within_grace'] else 'NOT met'}**)."
        )
    else:
        checks = "Issue 4's targets: not measured (a run is missing)."
    lines = [
        "## Policies on the Helios window"
        + ("" if name == _name(w) else f", days {w['from_day']}-{w['from_day'] + w['days'] - 1}")
        + ("" if w.get("capacity_scale", 1.0) == 1.0
           else f", capacity scaled by {w['capacity_scale']:g} (contended)"),
        "",
        f"{date}; {machine_line(m)}.",
        "",
        f"Helios Venus days {w['from_day']}-{w['from_day'] + w['days'] - 1}: {w['jobs']:,} jobs, "
        f"{w['gpus']:,} GPUs (capacity scale {w.get('capacity_scale', 1.0):g}), "
        f"{w['teams']} teams from the real daily quotas "
        f"({w['quota_events']} quota changes), checkpoint model and team assignment as in "
        "docs/workloads.md. Memory engine, seed 0.",
        "",
        table(["policy", *[t for _, t, _ in COLUMNS], "wall s", "run"], rows),
        "",
        checks,
    ]
    if img is not None:
        rel = Path("img") / img.name if img.parent.resolve() == (doc.parent / "img").resolve() \
            else img
        lines += ["", f"![policies on the Helios window]({rel.as_posix()})"]
    lines += ["", f"Reproduce: `.venv/bin/python -m bench.policies --from-day {w['from_day']} "
              f"--days {w['days']} --capacity-scale {w.get('capacity_scale', 1.0):g}"
              + (f" --name {name}" if name != _name(w) else "")
              + f"` (raw: `bench/results/{name}.json`)."]
    return "\n".join(lines)


def _name(window: dict[str, Any]) -> str:
    scale = window.get("capacity_scale", 1.0)
    return NAME if scale == 1.0 else f"{NAME}_x{scale:g}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-day", type=int, default=0)
    ap.add_argument("--days", type=int, default=120)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--max-wall-s", type=float, default=420.0, help="per policy")
    ap.add_argument("--reuse-full", action="store_true")
    ap.add_argument("--capacity-scale", type=float, default=1.0,
                    help="cluster and guarantees times this (0.5: a contended window)")
    ap.add_argument("--trace", default=None, help="default: ../shared/traces")
    ap.add_argument("--quota", default=None, help="default: ../shared/traces")
    ap.add_argument("--results-dir", default=None)
    ap.add_argument("--doc", default=None)
    ap.add_argument("--img", default=None)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--name", default=None,
                    help="results file, plot and PERFORMANCE.md section (default: policies, "
                         "or policies_x<scale> for a scaled run)")
    a = ap.parse_args(argv)
    m = machine()
    if not a.no_pin:
        pin_one_core()
    results_dir = Path(a.results_dir) if a.results_dir else RESULTS_DIR
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            ap.error(f"--policies: unknown policy {p!r}")
    res = run(from_day=a.from_day, days=a.days, policies=policies, max_wall_s=a.max_wall_s,
              reuse_full=a.reuse_full, results_dir=results_dir, trace=a.trace, quota=a.quota,
              scale=a.capacity_scale)
    # A scaled run is another experiment: its own results file, section and plot.
    name = a.name or _name(res["window"])
    img = plot(res, Path(a.img) if a.img else IMG_DIR / f"{name}_helios.png")
    res["plot"] = str(img) if img else None
    path = write_results(name, res, results_dir)
    doc = Path(a.doc) if a.doc else None
    update_doc_section(name, section(res, m, now_utc(), img, doc or (IMG_DIR.parent / "x"),
                                     name), doc)
    log(f"{NAME}: wrote {path}" + (f" and {img}" if img else ""))
    return res


if __name__ == "__main__":
    main()
