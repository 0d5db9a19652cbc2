"""The dashboard's views: thin, they read through selectors and render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from scheduler_app.selectors import overview


@login_required
def home(request: HttpRequest) -> HttpResponse:
    context = {
        "tenants": overview.tenant_rows(now=timezone.now()),
        "pods": overview.pod_rows(),
        "totals": overview.cluster_totals(),
        "jobs": overview.recent_jobs(),
        "transitions": overview.recent_transitions(),
    }
    return render(request, "dashboard/home.html", context)
