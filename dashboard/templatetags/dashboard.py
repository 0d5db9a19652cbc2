"""Template filters of the dashboard: times, durations, core sentences, log rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.conf import settings
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dashboard import words

register = template.Library()


@register.filter
def when(at: datetime | None) -> SafeString | str:
    """<time> with the clock time and how far from now: "14:20:05 UTC (in 12 min)"."""
    if at is None:
        return "–"
    return format_html(
        '<time datetime="{}" title="{}">{}</time> <span class="rel">({})</span>',
        at.isoformat(), at.isoformat(), words.clock(at), words.relative(at),
    )


@register.filter
def clock(at: datetime | None) -> str:
    return words.clock(at) if at is not None else "–"


@register.filter
def relative(at: datetime | None) -> str:
    return words.relative(at) if at is not None else ""


@register.filter
def abs_seconds(seconds: int | float | None) -> int | None:
    """A signed number of seconds as a duration: ``-300`` -> ``300``."""
    return None if seconds is None else int(abs(seconds))


@register.filter
def dur(seconds: int | float | None) -> str:
    return words.duration(seconds)


@register.filter
def estimate_lead(kind: str) -> str:
    """How the estimate's time is introduced: a bound reads "at the latest"."""
    return {"reserved": "Starts at the latest", "reclaim": "Starts at the latest",
            "borrowed": "Planned to start", "quota": "Can start",
            "projected": "Expected to start"}.get(kind or "", "Starts")


@register.filter
def estimate_words(kind: str) -> str:
    from scheduler_app.core.records import ESTIMATE_KIND_SENTENCES

    sentence = ESTIMATE_KIND_SENTENCES.get(kind or "")
    return f"{sentence[0].upper()}{sentence[1:]}." if sentence else ""


@register.filter
def core(text: str) -> SafeString:
    return words.core_sentence(text or "")


@register.filter
def describe(row: Any) -> str:
    return words.describe(row)


@register.filter
def alloc(mapping: dict[str, list[int]] | None) -> str:
    return words.alloc_words(mapping)


@register.filter
def alloc_full(mapping: dict[str, list[int]] | None) -> str:
    return words.alloc_words(mapping, full=True)


@register.filter
def hours(seconds: float | int | None) -> float | None:
    """Seconds as hours (GPU-seconds as GPU-hours)."""
    return None if seconds is None else float(seconds) / 3600.0


@register.filter
def gpus(indices: list[int]) -> str:
    return words.gpu_ranges(indices)


@register.filter
def get(mapping: dict | None, key: Any) -> Any:
    return (mapping or {}).get(key)


@register.filter
def state_label(state: str) -> str:
    """PREEMPT_REQUESTED -> "preempt requested"."""
    return str(state).replace("_", " ").lower()


@register.filter
def pct(part: float | int | None, whole: float | int | None) -> float:
    """part / whole as a percentage in 0..100 (for bar widths)."""
    if not whole or part is None:
        return 0.0
    return max(0.0, min(100.0, 100.0 * float(part) / float(whole)))


@register.simple_tag
def poll(seconds: int | None = None) -> str:
    """The htmx polling trigger: ``every Ns`` (settings.DASHBOARD_POLL_S, default 3)."""
    every = seconds or int(getattr(settings, "DASHBOARD_POLL_S", 3))
    return f"every {every}s"


@register.simple_tag
def viewer_of(request: Any) -> Any:
    """The request's viewer (memberships read once per request), for the navigation."""
    from dashboard.views import viewer

    if request is None or not request.user.is_authenticated:
        return None
    return viewer(request)


@register.filter
def pending_words(job: Any) -> str:
    """The queued job's pending reason as a sentence."""
    from scheduler_app.selectors.dashboard import pending_sentence

    return pending_sentence(job)


@register.simple_tag
def term(anchor: str, label: str = "") -> SafeString:
    """A term linked to its glossary entry: the meaning one click away, not in a tooltip."""
    from django.urls import reverse

    shown = label or next((t for a, t, _m in words.glossary() if a == anchor), anchor)
    return format_html('<a class="term" href="{}#{}">{}</a>', reverse("dashboard:glossary"),
                       anchor, shown)


@register.filter
def n_of(count: int | None, unit: str) -> str:
    """``{{ n|n_of:"GPU" }}``: "1 GPU", "8 GPUs"."""
    return words.plural(count, unit)


@register.filter
def possessive(name: str) -> SafeString:
    """``{{ team|possessive }}``: "vision's", "evals'" (the name escaped, the apostrophe
    kept as typed, as it was when the templates wrote "'s" themselves)."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    text = str(name)
    return mark_safe(escape(text) + ("'" if text.endswith("s") else "'s"))  # noqa: S308


@register.filter
def never_met_words(detail: dict[str, Any]) -> str:
    """Why a job was cancelled for a dependency, from its DependencyNeverSatisfied row's
    detail: "Cancelled: job #12 ended failed, so “after #12 completes” can never be met."
    (a job the viewer may not see is "a job of team X", as the redacted detail says)."""
    job = detail.get("job")
    named = words._job(job)
    short = f"#{job}" if str(job).isdigit() else named
    return (f"Cancelled: {named} ended {state_label(detail.get('ended', '?'))}, so “after "
            f"{short} {dependency_words(detail.get('when', ''))}” can never be met.")


@register.filter
def dependency_words(when: str) -> str:
    """A dependency's kind as the job page says it: "completes", "ends", "fails or is
    cancelled" ("after #12 completes")."""
    from scheduler_app.selectors.dashboard import DEPENDENCY_WORDS

    return DEPENDENCY_WORDS.get(str(when), "ends")


@register.filter
def get_window(windows: list[tuple[str, str]], name: str) -> str:
    """The words of one of the usage chart's windows: "last hour"."""
    return dict(windows).get(name, name)


@register.filter
def wait_hours(seconds: float | None) -> str:
    """Seconds as hours with two decimals (the what-if table); "–" for none (a job that
    does not start within the horizon)."""
    if seconds is None:
        return "–"
    return f"{float(seconds) / 3600:.2f}"


@register.filter
def whatif_num(value: Any) -> str:
    """A what-if figure as the command prints it (``sim.whatif``'s table): "0", not "0.0";
    "1.5"; "–" for none."""
    if value is None:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)


@register.filter
def whatif_change(change: str) -> SafeString:
    """One change, ``--drain a1``, as code whose flag never breaks at its hyphens (a
    narrow cell wrapped it as "-" then "-drain a1")."""
    flag, _, value = change.partition(" ")
    return format_html('<code class="change"><span class="nobr">{}</span> {}</code>', flag,
                       value)


@register.filter
def whatif_flags(changes: dict[str, list[str]] | None) -> list[str]:
    """A what-if run's changes as the command's flags, in its order (``Changes.words``):
    ``--set-quota rl=64``."""
    from scheduler_app.sim.whatif import Changes

    known = {f: tuple(v) for f, v in (changes or {}).items() if f in Changes.__dataclass_fields__}
    return Changes(**known).words()
