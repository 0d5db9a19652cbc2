"""The dashboard's views: thin. They check who may look, read through selectors, write
through services, and render.

Pages are made of sections (``templates/dashboard/sections/``). Each section's root
element polls its own URL (``/live/<section>/``, or the page's own URL for the job list
and the job page) with htmx and is swapped in place, so a change made in one browser
shows in every other within a poll interval, without a reload.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render, resolve_url
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.views.decorators.http import conditional_page, require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from scheduler_app.api.submit import same_array, same_dependencies, same_spec
from scheduler_app.core.states import FINAL_STATES
from scheduler_app.core.types import SIZE_CLASS_LABELS, NodeHealth
from scheduler_app.models import Job, Node, Tenant
from scheduler_app.scheduler_config import rows as scheduler_settings_rows
from scheduler_app.selectors import dashboard as sel
from scheduler_app.selectors.leader import scheduler_status
from scheduler_app.services import array_cancel, array_submit, job_cancel, job_submit
from scheduler_app.services.cluster import (
    node_drain,
    node_mark_up,
    node_undrain,
    quota_problems,
    tenant_set_quota,
)
from scheduler_app.services.errors import Invalid, ServiceError
from scheduler_app.services.jobs import submit_replayed
from scheduler_app.sim.whatif import (
    cancelled_words,
    ended_unstarted,
    fate,
    moved_most,
    moved_words,
)

from . import whatif_runs, words
from .forms import DrainForm, JobForm, QuotaForm, WhatIfForm
from .models import WhatIfRun

PER_PAGE = 50
FINAL = frozenset(s.value for s in FINAL_STATES)


# --------------------------------------------------------------------------- helpers
def viewer(request: HttpRequest) -> sel.Viewer:
    """The request's viewer, read once per request."""
    cached = getattr(request, "_dashboard_viewer", None)
    if cached is None:
        cached = sel.viewer_for(request.user)
        request._dashboard_viewer = cached  # type: ignore[attr-defined]
    return cached


def palette(request: HttpRequest) -> dict[str, str]:
    """Tenant name -> colour class ("t0".."t9"), stable by name order, once per request."""
    cached = getattr(request, "_dashboard_palette", None)
    if cached is None:
        names = Tenant.objects.order_by("name").values_list("name", flat=True)
        cached = {name: f"t{i % 10}" for i, name in enumerate(names)}
        request._dashboard_palette = cached  # type: ignore[attr-defined]
    return cached


def page(request: HttpRequest, template: str, context: dict[str, Any],
         status: int = 200) -> HttpResponse:
    v = viewer(request)
    context.setdefault("viewer", v)
    context.setdefault("can_submit", v.operator or bool(v.member_of))
    context.setdefault("palette", palette(request))
    # no scheduler running (its lease expired): said on every page, as squeue says it
    # cannot reach the controller (a killed worker went unnoticed: 2026-12-07)
    leader = scheduler_status(now=timezone.now())
    context.setdefault("scheduler_down", None if leader.running else leader)
    return render(request, template, context, status=status)


def signed_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """login_required, except that an htmx request (a poll after the session expired)
    sends the whole page to the sign-in form instead of swapping the form into a section."""
    guarded = login_required(view)

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.htmx and not request.user.is_authenticated:
            here = request.htmx.current_url_abs_path or request.get_full_path()
            return HttpResponseClientRedirect(f"{resolve_url(settings.LOGIN_URL)}?"
                                              f"{urlencode({'next': here})}")
        return guarded(request, *args, **kwargs)

    return wrapped


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in (else the login page), and staff (else 403)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not viewer(request).operator:
            raise PermissionDenied("Operators only.")
        return view(request, *args, **kwargs)

    return signed_in(wrapped)


def visible_job(request: HttpRequest, pk: int) -> Job:
    """The job, or 404 if there is none, or 403 if it is not the viewer's to see."""
    job = get_object_or_404(Job.objects.select_related("tenant", "owner"), pk=pk)
    if not viewer(request).sees_job(job.tenant_id, job.owner_id):
        raise PermissionDenied("This job is not yours to see.")
    return job


# --------------------------------------------------------------------------- sections
def section_map(request: HttpRequest) -> dict[str, Any]:
    pods = sel.cluster_map(viewer=viewer(request))
    gpus = sum(p.gpus for p in pods)
    used = sum(p.used for p in pods)
    return {"pods": pods, "palette": palette(request), "gpus_total": gpus, "gpus_used": used,
            "operator_controls": viewer(request).operator}


def section_feed(request: HttpRequest) -> dict[str, Any]:
    rows = sel.transitions_feed(viewer=viewer(request))
    since = request.GET.get("since", "")
    seen = int(since) if since.isdigit() else None
    return {"rows": rows, "seen": seen, "top": rows[0].pk if rows else 0,
            "palette": palette(request)}


def section_reservations(request: HttpRequest) -> dict[str, Any]:
    plans = sel.reservations(viewer=viewer(request))
    now = timezone.now()
    # the timeline spans now .. the latest end (or start) it shows, at least an hour
    horizon = max([now.timestamp() + 3600]
                  + [(p.ends_by or p.start_at).timestamp() for p in plans]
                  + [b.ends_by.timestamp() for p in plans for b in p.backfilled if b.ends_by])
    span = horizon - now.timestamp()

    def at(t: Any) -> float:
        return max(0.0, min(100.0, 100.0 * (t.timestamp() - now.timestamp()) / span))

    rows = []
    for p in plans:
        start = at(p.start_at)
        end = at(p.ends_by) if p.ends_by else 100.0
        rows.append({
            "plan": p, "left": start, "width": max(1.0, end - start), "open": p.ends_by is None,
            "backfilled": [{"b": b, "width": max(1.0, at(b.ends_by) if b.ends_by else 100.0)}
                           for b in p.backfilled],
        })
    ticks = [{"left": 100.0 * i / 4, "at": now + timedelta(seconds=span * i / 4)}
             for i in range(5)]
    return {"rows": rows, "ticks": ticks, "palette": palette(request)}


def section_queue_depth(request: HttpRequest) -> dict[str, Any]:
    from scheduler_app.api.reads import queue_depths

    depth = queue_depths()
    tenants = list(Tenant.objects.order_by("name").values_list("pk", "name"))
    rows = [{"tenant": name, "counts": [depth.get(pk, {}).get(label, 0)
                                        for label in SIZE_CLASS_LABELS]}
            for pk, name in tenants]
    peak = max([c for r in rows for c in r["counts"]] + [0])
    return {"labels": SIZE_CLASS_LABELS, "rows": rows, "peak": peak,
            "total": sum(sum(r["counts"]) for r in rows)}


def section_fairshare(request: HttpRequest) -> dict[str, Any]:
    """Every tenant side by side, the same figures as the API's tenant endpoints."""
    from scheduler_app.api.reads import tenant_figures

    now = timezone.now()
    figures = tenant_figures(now=now)
    chart = {
        "labels": [f.tenant.name for f in figures],
        "guarantee": [f.tenant.guaranteed_gpus for f in figures],
        "held": [f.tenant.held_gpus for f in figures],
        "borrowed": [f.borrowed_gpus for f in figures],
        "borrow_limit": [f.tenant.borrow_limit_gpus for f in figures],
    }
    loans = [(f.tenant.name, part["tenant"], part["gpus"]) for f in figures
             for part in f.borrowed_from]
    return {"figures": figures, "chart": chart, "loans": loans,
            "reclaims": sel.reclaims(now=now), "palette": palette(request),
            "half_life": words.half_life_words()}


#: Where the usage chart labels its axis, per window: every 10 min, 3 h, or day.
USAGE_TICKS_S = {"hour": 600, "day": 3 * 3600, "week": 86400}


def section_usage(request: HttpRequest) -> dict[str, Any]:
    """GPUs held per team over the last hour, day or week (``?window=``), with each
    team's guarantee as a line and its peak from the allocations, not the samples."""
    now = timezone.now()
    window = request.GET.get("window", "")
    if window not in sel.USAGE_WINDOWS:
        window = sel.usage_default_window(now=now)
    span_s, step_s = sel.USAGE_WINDOWS[window]
    series = sel.usage_series(now=now, hours=span_s / 3600, step_s=step_s)
    colours = palette(request)
    fmt = "%a %H:%M" if window == "week" else "%H:%M"
    tick = USAGE_TICKS_S[window]
    labels = [timezone.localtime(t).strftime(fmt) for t in series.times]
    if len(labels) > 1 and labels[-1] == labels[-2]:
        # the last sample is now, within the minute of the last round one: "19:04" twice
        labels[-1] = "now"
    chart = {
        "labels": labels,
        # label only the round instants (14:00, 14:10): Chart.js's own skipping put the
        # ticks at odd times
        "ticks": [int(t.timestamp()) % tick == 0 for t in series.times],
        "series": [{"name": name, "held": held, "guaranteed": series.guaranteed[name],
                    "colour": int(colours.get(name, "t9")[1:])}
                   for name, held in series.held.items()],
    }
    peaks = [{"name": s["name"], "peak": series.peak.get(s["name"], 0),
              "now": (s["held"] or [0])[-1], "guaranteed": s["guaranteed"]}
             for s in chart["series"]]
    return {"chart": chart, "peaks": peaks, "palette": colours, "window": window,
            "windows": [(w, words.WINDOW_WORDS[w]) for w in sel.USAGE_WINDOWS]}


def section_team_queue(request: HttpRequest) -> dict[str, Any]:
    """The viewer's teams' queues by size class (leads and researchers: their teams;
    operators: every team)."""
    from scheduler_app.api.reads import queue_depths

    v = viewer(request)
    depth = queue_depths()
    teams = Tenant.objects.order_by("name")
    if not v.operator:
        teams = teams.filter(pk__in=sorted(v.member_of))
    gpus = dict(
        Job.objects.filter(state="QUEUED", tenant__in=teams).values("tenant_id")
        .annotate(g=Sum("gpus")).order_by().values_list("tenant_id", "g")
    )
    rows = [{"tenant": t, "counts": [depth.get(t.pk, {}).get(label, 0)
                                     for label in SIZE_CLASS_LABELS],
             "queued_gpus": gpus.get(t.pk, 0)} for t in teams]
    return {"labels": SIZE_CLASS_LABELS, "teams": rows}


def section_operator_quotas(request: HttpRequest) -> dict[str, Any]:
    """The quota table (each team's Held, guarantee and borrow limit) and its header."""
    if not viewer(request).operator:
        raise PermissionDenied("Operators only.")
    return _quota_tables()


def section_operator_nodes(request: HttpRequest) -> dict[str, Any]:
    """The node table: free GPUs, jobs, heartbeat, health, and the drain controls."""
    if not viewer(request).operator:
        raise PermissionDenied("Operators only.")
    return {"node_rows": sel.node_rows()}


def section_home_jobs(request: HttpRequest) -> dict[str, Any]:
    """A home's own jobs (a researcher's active and recently finished ones, a lead's
    teams' active ones) and the cluster's GPU totals: polled like every other section (a
    home left open showed a job PLACING long after it completed: 2026-12-07)."""
    v = viewer(request)
    ctx: dict[str, Any] = {"totals": _totals(), "role": _role(v)}
    if ctx["role"] == "lead":
        ctx["team_jobs"] = _rows(sel.jobs_visible(viewer=v, group="active")[:10], v)
    elif ctx["role"] == "researcher":
        ctx["my_jobs"] = _rows(sel.jobs_visible(viewer=v, group="active", mine=True)[:10], v)
        ctx["recent_done"] = _rows(
            sel.jobs_visible(viewer=v, group="finished", mine=True)[:5], v)
    return ctx


def _role(v: sel.Viewer) -> str:
    if v.operator:
        return "operator"
    if v.is_lead:
        return "lead"
    return "researcher" if v.member_of else "visitor"


SECTIONS: dict[str, tuple[str, Callable[[HttpRequest], dict[str, Any]]]] = {
    "home-jobs": ("dashboard/sections/home_jobs.html", section_home_jobs),
    "map": ("dashboard/sections/map.html", section_map),
    "feed": ("dashboard/sections/feed.html", section_feed),
    "reservations": ("dashboard/sections/reservations.html", section_reservations),
    "queue-depth": ("dashboard/sections/queue_depth.html", section_queue_depth),
    "fairshare": ("dashboard/sections/fairshare.html", section_fairshare),
    "usage": ("dashboard/sections/usage.html", section_usage),
    "team-queue": ("dashboard/sections/team_queue.html", section_team_queue),
    "operator-quotas": ("dashboard/sections/operator_quotas.html", section_operator_quotas),
    "operator-nodes": ("dashboard/sections/operator_nodes.html", section_operator_nodes),
}


@signed_in
@require_GET
@conditional_page
def live(request: HttpRequest, name: str) -> HttpResponse:
    """One section, for htmx polling. A poll that finds nothing changed gets 304 and no
    body (the ETag is the section's hash): every open tab polled the 40 KB map every few
    seconds to learn that nothing moved. ``no-cache`` makes the browser ask each time, so
    a change still shows within a poll; ``private``: the section is this viewer's."""
    if name not in SECTIONS:
        raise Http404("No such section.")
    template, build = SECTIONS[name]
    response = render(request, template, {"viewer": viewer(request), **build(request)})
    patch_cache_control(response, private=True, no_cache=True)
    return response


def sections(request: HttpRequest, *names: str) -> dict[str, Any]:
    """The context of the named sections, for a page that includes them."""
    ctx: dict[str, Any] = {}
    for name in names:
        ctx[name.replace("-", "_")] = SECTIONS[name][1](request)
    return ctx


# --------------------------------------------------------------------------- pages
@signed_in
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """A home per role: operators see the cluster and its controls, leads their teams and
    the fair share, researchers their jobs; everyone the live map and the log."""
    role = _role(viewer(request))
    ctx: dict[str, Any] = {"role": role, **sections(request, "home-jobs")}
    if role == "operator":
        ctx.update(sections(request, "map", "feed", "queue-depth", "reservations"))
    elif role == "lead":
        ctx.update(sections(request, "map", "feed", "fairshare", "usage", "team-queue"))
    else:
        ctx.update(sections(request, "map", "feed"))
    return page(request, "dashboard/home.html", ctx)


def _array_of(request: HttpRequest, v: sel.Viewer) -> Job | None:
    """``?array=412``: task 0 of that array (404 if there is none, 403 if it is not the
    viewer's to see: every task has the same team and owner); None without the filter."""
    raw = request.GET.get("array", "")
    if not raw:
        return None
    if not raw.isdigit():
        raise Http404("No such job array.")
    first = Job.objects.filter(pk=int(raw), array_id=int(raw)).select_related("tenant").first()
    if first is None:
        raise Http404("No such job array.")
    if not v.sees_job(first.tenant_id, first.owner_id):
        raise PermissionDenied("This job array is not yours to see.")
    return first


def _rows(jobs: Any, viewer: sel.Viewer) -> list[sel.JobRow]:
    return sel.job_rows(list(jobs), viewer=viewer)


def _totals() -> dict[str, int]:
    """The cluster's GPUs as the API's ``GET /cluster/`` counts them: ``free`` only on
    healthy nodes (a lead read "29 free" while a 16-GPU job waited, 16 of them on a
    draining and a down node), ``unavailable`` the idle ones on the others."""
    totals = Node.objects.aggregate(
        gpus=Sum("gpu_count"), idle=Sum("free_gpus"),
        free=Sum("free_gpus", filter=Q(health=NodeHealth.HEALTHY)))
    gpus, idle, free = totals["gpus"] or 0, totals["idle"] or 0, totals["free"] or 0
    return {"gpus": gpus, "free": free, "used": gpus - idle, "unavailable": idle - free}


@signed_in
@require_GET
def jobs(request: HttpRequest) -> HttpResponse:
    """The jobs the viewer may see: researchers their own, leads their teams', operators
    all. Filters: state group, team, mine; 50 a page."""
    v = viewer(request)
    group = request.GET.get("state", "active")
    if group not in sel.STATE_GROUPS:
        group = "active"
    tenant_name = request.GET.get("team", "")
    tenant = None
    if tenant_name:
        tenant = Tenant.objects.filter(name=tenant_name).first()
        if tenant is None:
            raise Http404("No such team.")
        if not v.operator and tenant.pk not in v.member_of:
            raise PermissionDenied("You are not in this team.")
    mine = request.GET.get("mine") == "1" or not (v.operator or v.is_lead)
    array = _array_of(request, v)
    if array is not None and "state" not in request.GET:
        group = "all"  # an array's tasks: the finished ones too, by index
    qs = sel.jobs_visible(viewer=v, group=group, tenant_id=tenant.pk if tenant else None,
                          mine=mine, array_id=array.pk if array else None)
    sort = "position" if request.GET.get("sort") == "position" else "newest"
    if sort == "position":
        # the queued jobs in the order they will start, then the others: paginate ids,
        # then read the page's jobs in that order
        paginator = Paginator(sel.job_ids_by_position(qs), PER_PAGE)
        page_obj = paginator.get_page(request.GET.get("page"))
        found = qs.in_bulk(list(page_obj.object_list))
        page_obj.object_list = [found[pk] for pk in page_obj.object_list if pk in found]
    else:
        paginator = Paginator(qs, PER_PAGE)
        page_obj = paginator.get_page(request.GET.get("page"))
    teams = (Tenant.objects.order_by("name") if v.operator
             else Tenant.objects.filter(pk__in=sorted(v.member_of)).order_by("name"))
    ctx = {
        "rows": sel.job_rows(list(page_obj.object_list), viewer=v),
        "page_obj": page_obj,
        "group": group,
        "team": tenant_name,
        "mine": mine,
        "teams": list(teams),
        "forced_mine": not (v.operator or v.is_lead),
        "sort": sort,
        "query": request.GET.urlencode(),
        "array": array,
    }
    if request.htmx:
        return render(request, "dashboard/sections/job_table.html",
                      {"viewer": v, "palette": palette(request), **ctx})
    return page(request, "dashboard/jobs.html", ctx)


@signed_in
def job_new(request: HttpRequest) -> HttpResponse:
    """The submit form. Errors show at their field; the job is created only when the
    services' rules pass."""
    v = viewer(request)
    tenants = _submit_tenants(v)
    form = _job_form(request, tenants)
    if request.method == "POST" and form.is_valid():
        try:
            if form.array() is not None:
                answer = _submit_array(request, form)
                if answer is not None:
                    return answer
            else:
                answer = _submit_job(request, form, v)
                if answer is not None:
                    return answer
        except ValidationError as error:  # a rule changed between the check and the write
            form.add_service_errors(error.message_dict)
        except Invalid as error:  # a job it waits for, or the array (the services' words)
            form.add_service_errors(error.errors or {None: error.message})
    status = 400 if request.method == "POST" else 200
    return page(request, "dashboard/job_new.html", {"form": form}, status=status)


def _submit_job(request: HttpRequest, form: JobForm, v: sel.Viewer) -> HttpResponse | None:
    """One job through ``job_submit``, then its page. None: the form's key made another
    job before (the form says so: the API's 409 ``idempotency_key_reused``)."""
    spec, depends_on = form.spec(), form.depends_on()
    job = job_submit(tenant=form.cleaned_data["tenant"], owner=request.user,
                     depends_on=depends_on, sees=v.sees_job, **spec)
    if submit_replayed(job):
        if not (same_spec(job, spec) and same_dependencies(job, depends_on)):
            form.submitted_before(f"job #{job.pk} {job.name}",
                                  resolve_url("dashboard:job", pk=job.pk))
            return None
        messages.info(request, f"Job #{job.pk} {job.name} was submitted already (this form "
                               "was sent twice): nothing new was submitted.")
    elif job.state in FINAL:
        messages.error(request, f"Job #{job.pk} was refused: see why below.")
    else:
        messages.success(request, f"Job #{job.pk} {job.name} submitted: it is queued.")
    return redirect("dashboard:job", pk=job.pk)


def _submit_array(request: HttpRequest, form: JobForm) -> HttpResponse | None:
    """An array through the API's service (``array_submit``: every task in one
    transaction), then the page of its task 0 (it shows the array). None: the form's key
    made another array before (the form says so)."""
    count, max_running = form.array()  # type: ignore[misc]
    spec = form.spec()
    key = spec.pop("idempotency_key")
    name, gpus = spec.pop("name"), spec.pop("gpus")
    tasks = array_submit(tenant=form.cleaned_data["tenant"], owner=request.user, name=name,
                         gpus=gpus, count=count, max_running=max_running,
                         depends_on=form.depends_on(), idempotency_key=key,
                         sees=viewer(request).sees_job, **spec)
    first = tasks[0]
    if submit_replayed(first) and not same_array(
            tasks, {**spec, "name": name, "gpus": gpus}, count, max_running):
        form.submitted_before(f"array {first.array_id or first.pk} {first.name}",
                              resolve_url("dashboard:job", pk=first.pk))
        return None
    cap = f", at most {max_running} at once" if max_running else ""
    if first.state in FINAL:
        messages.error(request, f"Array {first.array_id} was refused: see why below.")
    else:
        last = f" to {first.array_id}_{len(tasks) - 1}" if len(tasks) > 1 else ""
        messages.success(request, f"Array {first.array_id} {first.name} submitted: "
                                  f"{words.plural(len(tasks), 'task')} {first.array_task}"
                                  f"{last}{cap}.")
    return redirect("dashboard:job", pk=first.pk)


def _submit_tenants(v: sel.Viewer) -> Any:
    if v.operator:
        return Tenant.objects.order_by("name")
    if not v.member_of:
        raise PermissionDenied("You are in no team: ask an operator to add you to one.")
    return Tenant.objects.filter(pk__in=sorted(v.member_of)).order_by("name")


def _job_form(request: HttpRequest, tenants: Any) -> JobForm:
    types = sel.gpu_types()
    data = request.POST if request.method == "POST" else None
    form = JobForm(data, tenants=tenants, gpu_types=types, sees=viewer(request).sees_job,
                   owner_id=request.user.pk)
    if data is None and request.GET.get("team"):
        chosen = tenants.filter(name=request.GET["team"]).first()
        if chosen is not None:
            form.initial["tenant"] = chosen.pk
    return form


@signed_in
@require_POST
def job_validate(request: HttpRequest) -> HttpResponse:
    """htmx: check the form as it is being filled in; the errors of the fields touched so
    far come back as out-of-band swaps of their error slots (the inputs keep focus)."""
    tenants = _submit_tenants(viewer(request))
    form = _job_form(request, tenants)
    form.is_valid()
    touched = {n for n in request.POST.get("_touched", "").split(",") if n in form.fields}
    # hidden fields (the idempotency key) have no error slot on the page: an out-of-band
    # swap without a target is an htmx error in the console
    slots = [{"name": name, "errors": form.errors.get(name, []) if name in touched else []}
             for name, bound in form.fields.items() if not bound.widget.is_hidden]
    return render(request, "dashboard/partials/field_errors.html", {"slots": slots})


@signed_in
@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = visible_job(request, pk)
    detail = sel.job_detail(job=job, viewer=viewer(request))
    ctx = {"d": detail, "job": job, "final": job.state in FINAL}
    if request.htmx:
        return render(request, "dashboard/sections/job_status.html",
                      {"viewer": viewer(request), "palette": palette(request), **ctx})
    return page(request, "dashboard/job.html", ctx)


@signed_in
def job_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: ask for confirmation (what cancelling loses). POST: cancel through the log."""
    job = visible_job(request, pk)
    if request.method == "POST":
        try:
            job_cancel(job_id=job.pk, actor_name=request.user.get_username(),
                       why=f"cancelled from the dashboard by {request.user.get_username()}")
        except ServiceError as error:
            if getattr(error, "from_state", None) in FINAL:
                # a second tab, or a job that ended meanwhile: said plainly, not as the
                # state machine's "illegal transition CANCELLED -> CANCELLED"
                messages.info(request, f"Job #{job.pk} had already ended "
                                       f"({error.from_state}): there is nothing to cancel.")
                return redirect("dashboard:job", pk=job.pk)
            # the services' message names the job too ("job 65: illegal transition ...")
            why = str(error).removeprefix(f"job {job.pk}: ")
            messages.error(request, f"Job #{job.pk} was not cancelled: {why}.")
        else:
            messages.success(request, f"Job #{job.pk} {job.name} cancelled.")
        return redirect("dashboard:job", pk=job.pk)
    if job.state in FINAL:
        messages.info(request, f"Job #{job.pk} is {job.state.lower()}: nothing to cancel.")
        return redirect("dashboard:job", pk=job.pk)
    alloc = sel.open_allocations([job.pk]).get(job.pk, {})
    return page(request, "dashboard/job_cancel.html", {"job": job, "alloc": alloc,
                                                       "held": sum(map(len, alloc.values()))})


@signed_in
def array_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: ask for confirmation (how many tasks it cancels). POST: cancel every task that
    has not ended, in one transaction (``array_cancel``). Whoever may cancel a task (who
    may see it: the job cancel's rule) may cancel its array."""
    job = visible_job(request, pk)
    if job.array_id != job.pk:
        raise Http404("No such job array: an array's id is its task 0's.")
    if request.method == "POST":
        who = request.user.get_username()
        try:
            rows = array_cancel(array_id=job.pk, actor_name=who,
                                why=f"array cancelled from the dashboard by {who}")
        except ServiceError as error:
            messages.error(request, f"Array {job.pk} was not cancelled: {error}")
        else:
            messages.success(request, f"Array {job.pk} {job.name} cancelled: "
                                      f"{words.plural(len(rows), 'task')} that had not ended.")
        return redirect("dashboard:job", pk=job.pk)
    summary = sel.array_summary(job)
    if not summary.live:
        messages.info(request, f"Every task of array {job.pk} has ended: nothing to cancel.")
        return redirect("dashboard:job", pk=job.pk)
    return page(request, "dashboard/array_cancel.html", {"job": job, "a": summary})


@signed_in
@require_GET
def teams(request: HttpRequest) -> HttpResponse:
    """Fair share of every team side by side, usage over the last day, who borrows from
    whom, and the viewer's teams' queues by size class."""
    ctx = sections(request, "fairshare", "usage", "team-queue")
    return page(request, "dashboard/teams.html", ctx)


@signed_in
@require_GET
def cluster(request: HttpRequest) -> HttpResponse:
    """The map of pods and nodes, reservations, queue depth, the log streaming in."""
    ctx = sections(request, "map", "reservations", "queue-depth", "feed")
    ctx["totals"] = _totals()
    return page(request, "dashboard/cluster.html", ctx)


@signed_in
@require_GET
def glossary(request: HttpRequest) -> HttpResponse:
    """The terms the pages use, each with an anchor the pages link to."""
    from .words import glossary as terms

    return page(request, "dashboard/glossary.html", {"terms": terms()})


@signed_in
@require_GET
def node_panel(request: HttpRequest, pk: int) -> HttpResponse:
    """The map's panel for one node: its jobs, GPUs and heartbeat (everyone signed in may
    look; other teams' jobs are named by their team only)."""
    node = get_object_or_404(Node.objects.select_related("pod"), pk=pk)
    panel = sel.node_panel(node=node, viewer=viewer(request))
    return render(request, "dashboard/partials/node_panel.html",
                  {"p": panel, "palette": palette(request), "viewer": viewer(request)})


# --------------------------------------------------------------------------- operator
@operator_required
@require_GET
def operator(request: HttpRequest) -> HttpResponse:
    """Quotas and borrow limits, node drain and undrain: every change through the log."""
    ctx = sections(request, "map", "feed", "operator-quotas", "operator-nodes")
    ctx["settings_rows"] = scheduler_settings_rows()
    return page(request, "dashboard/operator.html", ctx)


def _quota_tables() -> dict[str, Any]:
    tenants = list(Tenant.objects.order_by("name"))
    rows = [{"tenant": t, "form": QuotaForm(initial=QuotaForm.initial_of(t),
                                            prefix=f"t{t.pk}")} for t in tenants]
    totals = Node.objects.aggregate(
        gpus=Sum("gpu_count"),
        healthy=Sum("gpu_count", filter=Q(health=NodeHealth.HEALTHY.value)))
    return {"quota_rows": rows, "cluster_gpus": totals["gpus"] or 0,
            "healthy_gpus": totals["healthy"] or 0,
            "guaranteed_total": sum(t.guaranteed_gpus for t in tenants)}


@operator_required
@require_POST
def tenant_quota(request: HttpRequest, pk: int) -> HttpResponse:
    tenant = get_object_or_404(Tenant, pk=pk)
    form = QuotaForm(request.POST, prefix=f"t{tenant.pk}")
    if not form.is_valid():
        # the fields that did parse are checked too: one unreadable box hid what was wrong
        # with the others (an operator's session, 2026-12-07); the API says all at once
        for name, message in quota_problems(form.cleaned_data).items():
            if name in form.fields and name not in form.errors:
                form.add_error(name, message)
    if form.is_valid():
        try:
            tenant_set_quota(tenant=tenant, actor_name=request.user.get_username(),
                             **form.service_kwargs())
        except Invalid as error:
            for name, message in error.errors.items():
                form.add_error(name if name in form.fields else None, message)
        except ServiceError as error:
            form.add_error(None, str(error))
    if form.errors:
        if request.htmx:
            return render(request, "dashboard/partials/quota_row.html",
                          {"row": {"tenant": tenant, "form": form}})
        messages.error(request, f"Quota of {tenant.name} not changed: "
                       + " ".join(m for ms in form.errors.values() for m in ms))
        return redirect("dashboard:operator")
    tenant.refresh_from_db()
    note = (f"Team {tenant.name}: {tenant.guaranteed_gpus} guaranteed + "
            f"{tenant.borrow_limit_gpus} borrow limit.")
    if request.htmx:
        fresh = QuotaForm(initial=QuotaForm.initial_of(tenant), prefix=f"t{tenant.pk}")
        response = render(request, "dashboard/partials/quota_row.html",
                          {"row": {"tenant": tenant, "form": fresh}, "saved": note})
        response["HX-Trigger"] = "cluster-changed"
        return response
    messages.success(request, note)
    return redirect("dashboard:operator")


NODE_ACTIONS = {"drain": node_drain, "undrain": node_undrain, "up": node_mark_up}


@operator_required
@require_POST
def node_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    node = get_object_or_404(Node.objects.select_related("pod"), pk=pk)
    if action not in NODE_ACTIONS:
        raise Http404("No such action.")
    error = ""
    why = DrainForm(request.POST)
    try:
        if action != "drain":
            NODE_ACTIONS[action](node=node, actor_name=request.user.get_username())
        elif why.is_valid():
            node_drain(node=node, actor_name=request.user.get_username(),
                       why=why.cleaned_data["why"])
        else:
            error = " ".join(why.errors["why"])
    except ServiceError as failure:
        error = str(failure)
    node.refresh_from_db()
    if request.htmx:
        jobs = sel.node_rows([node.pk])[0].jobs
        response = render(request, "dashboard/partials/node_row.html",
                          {"node": node, "error": error, "jobs": jobs})
        if not error:  # a refused move changed nothing to refresh
            response["HX-Trigger"] = "cluster-changed"
        return response
    if error:
        messages.error(request, f"Node {node.name}: {error}.")
    else:
        messages.success(request, f"Node {node.name} is {node.health}.")
    return redirect("dashboard:operator")


# --------------------------------------------------------------------------- what if
@operator_required
def whatif(request: HttpRequest) -> HttpResponse:
    """The changes in a form; the run goes to the background (whatif_runs.start_run) and
    its page shows how far it has got, then the answer."""
    form = WhatIfForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        run = whatif_runs.start_run(changes=form.changes(), hours=form.cleaned_data["hours"],
                                    user=request.user)
        return redirect("dashboard:whatif_run", pk=run.pk)
    # (the answers themselves are not read: one is ~700 KB with 3,000 queued jobs)
    recent = list(WhatIfRun.objects.defer("result").order_by("-created_at")[:10])
    for r in recent:
        whatif_runs.mark_lost(r)  # (a run its restarted server dropped: failed, not running)
    return page(request, "dashboard/whatif.html", {"form": form, "recent": recent},
                status=400 if form.errors else 200)


@operator_required
@require_GET
def whatif_run(request: HttpRequest, pk: Any) -> HttpResponse:
    run = get_object_or_404(WhatIfRun, pk=pk)
    whatif_runs.mark_lost(run)
    ctx = {"run": run, "answer": _whatif_answer(run),
           # runs have a worker of their own (the tick's would stall): say which to start
           "whatif_queue": settings.CELERY_WHATIF_QUEUE if settings.CELERY_BROKER_URL else ""}
    if request.htmx:
        return render(request, "dashboard/partials/whatif_run.html", ctx)
    return page(request, "dashboard/whatif_run.html", ctx)


#: the what-if chart's x-axis steps, in hours: whole hours or round fractions
TICK_HOURS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 4, 6, 12, 24, 48)


def _round_step(span: float, steps: tuple[float, ...], most: int) -> float:
    """The smallest of ``steps`` that puts at most ``most`` ticks over ``span``."""
    return next((t for t in steps if span / t <= most + 1e-9), steps[-1])


def tick_hours(horizon_h: float, most: int = 12) -> float:
    """The smallest round step that puts at most ``most`` ticks over the horizon."""
    return _round_step(horizon_h, TICK_HOURS, most)


#: the steps of an axis in minutes or seconds (a horizon under an hour)
_TICK_SMALL: tuple[float, ...] = (1, 2, 5, 10, 15, 30)


def chart_axis(horizon_s: float, most: int = 12) -> tuple[str, int, float]:
    """The x-axis of the what-if chart: its title, the seconds in its unit and its step.
    Hours from an hour up; minutes, or seconds under a minute, below (a horizon of one
    second read "0 ... 0" in hours)."""
    if horizon_s >= 3600:
        return "hours from now", 3600, tick_hours(horizon_s / 3600, most)
    title, unit = ("minutes from now", 60) if horizon_s >= 60 else ("seconds from now", 1)
    return title, unit, _round_step(horizon_s / unit, _TICK_SMALL, most)


#: the queued jobs whose start moves the most, listed on a run's page (the command: 10)
MOVED_ON_PAGE = 20


def _whatif_answer(run: WhatIfRun) -> dict[str, Any] | None:
    """The answer shaped for the template: the table rows, the moved jobs, and a chart
    per team (GPUs held over the horizon, before and after)."""
    if run.status != WhatIfRun.Status.DONE or not run.result:
        return None
    result = run.result
    step = result["series"]["step_s"]
    title, unit, x_step = chart_axis(result["horizon_s"])
    x_max = result["horizon_s"] / unit
    charts = []
    for i, t in enumerate(result["tenants"]):
        base = result["series"]["baseline"].get(t["name"], [])
        after = result["series"]["whatif"].get(t["name"], [])
        charts.append({"id": f"whatif-{i}", "data_id": f"whatif-{i}-data", "name": t["name"],
                       "data": {
            "name": t["name"], "labels": [round(k * step / unit, 4) for k in range(len(base))],
            "baseline": base, "whatif": after, "x_max": x_max, "x_step": x_step,
            "x_title": title}})
    # the command's choice (no move under a minute) and spelling (a lower bound: >+x, <-x);
    # a task of an array by its name, 8_3 (an answer recorded before names: its id)
    moved = [{**j, "name": j.get("name", j["id"]), "moved": moved_words(j)}
             for j in moved_most(result["jobs"], MOVED_ON_PAGE)]
    # (an answer recorded before "cancelled" was kept knew only the queued ones)
    cancelled = (cancelled_words(result["cancelled"]) if "cancelled" in result
                 else [j["id"] for j in result["jobs"] if j["cancelled"]])
    ended = [{"id": j["id"], "name": j.get("name", j["id"]), "tenant": j["tenant"],
              "before": fate(j, "baseline"), "after": fate(j, "whatif")}
             for j in ended_unstarted(result["jobs"])]
    return {"tenants": result["tenants"], "moved": moved, "cancelled": cancelled,
            "ended": ended,
            "charts": charts, "changes": result["changes"],
            # capacity below the guarantees, changes that do nothing (said above the table)
            "warnings": result.get("warnings", []),
            "assumptions": result["assumptions"], "taken_at": result["taken_at"],
            # whose settings the runs used (an answer recorded before 2026-12-07: unsaid)
            "settings_from": result.get("settings_from", ""),
            "settings": result.get("settings", {}),
            "hours": result["horizon_s"] / 3600, "timings": result.get("timings_s", {})}
