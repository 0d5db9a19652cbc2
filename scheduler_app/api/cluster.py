"""The cluster: summary (GPUs free, used, borrowed, reserved), the current reservations
(as the leader published them after its last tick), and the transitions feed (every row
of the log, cursor by seq)."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.core.states import JobState
from scheduler_app.models import Job, Node, Reservation, Tenant, Transition
from scheduler_app.selectors.leader import scheduler_status
from scheduler_app.selectors.why import _plain as plain_instants

from . import access
from .filters import IdFilter, StrictFilterSet
from .jobs import ID_MAX, job_for
from .pagination import SeqPagination
from .reads import cluster_summary


class VictimOut(serializers.Serializer):
    job = serializers.IntegerField(allow_null=True,
                                   help_text="The job's id, if you may see the job; else null.")
    tenant = serializers.CharField()


class ReservationOut(serializers.Serializer):
    job = serializers.IntegerField(allow_null=True,
                                   help_text="The job's id, if you may see the job; else null.")
    tenant = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=Reservation.Kind.choices,
        help_text="reservation: the backfill reservation (its nodes are held for the job; "
                  "backfill may use them only if it ends first); reclaim: nodes promised to "
                  "an entitled job while the jobs preempted for it checkpoint and exit.")
    gpus = serializers.IntegerField(help_text="GPUs held for the job.")
    start_at = serializers.DateTimeField(
        allow_null=True, help_text="When it starts by the plan (reclaim: when the last "
        "victim's grace window ends); null if unknown.")
    nodes = serializers.ListField(child=serializers.CharField(),
                                  help_text="The nodes held for it.")
    victims = VictimOut(many=True, help_text="reclaim: the jobs being preempted for it.")
    basis = serializers.CharField(help_text="The plan's arithmetic, in words; a job you may "
                                            "not see is \"a job of team X\"; instants as "
                                            "clock times (\"from 07:00 UTC\").")
    pending_reason = serializers.CharField()
    published_at = serializers.DateTimeField(help_text="The tick that planned it.")


def published_reservations() -> list[Reservation]:
    """The core's reservations as the leader published them after its last tick, in its
    order (the backfill reservation first). A job that left the queue since is left out:
    the core itself drops a reservation whose holder is no longer queued."""
    return list(
        Reservation.objects.filter(job__state=JobState.QUEUED.value)
        .select_related("job__tenant")
        .order_by("position")
    )


def reservation_rows(user: Any, reservations: list[Reservation]) -> list[dict[str, Any]]:
    victims = {
        job.pk: job
        for job in Job.objects.filter(
            pk__in={pk for r in reservations for pk in r.victims}
        ).select_related("tenant")
    }
    # the basis names the jobs the plan waits on: "a job of team X" for the others'
    others = access.other_jobs(user).learn(texts=[r.basis for r in reservations])

    def shown(job: Job) -> dict[str, Any]:
        return {"job": job.pk if access.can_see_job(user, job) else None,
                "tenant": job.tenant.name}

    return [
        {
            **shown(r.job),
            "kind": r.kind,
            "gpus": r.gpus,
            "start_at": r.start_at,
            "nodes": r.nodes,
            "victims": [shown(victims[pk]) for pk in r.victims if pk in victims],
            "basis": plain_instants(others.text(r.basis)),  # clock times, not t=<epoch>
            "pending_reason": r.job.pending_reason,
            "published_at": r.published_at,
        }
        for r in reservations
    ]


class SchedulerOut(serializers.Serializer):
    running = serializers.BooleanField(
        help_text="A scheduler holds the leader lease now: jobs are placed, explained and "
                  "timed out. False: submits are still accepted, and wait until one runs.")
    holder = serializers.CharField(help_text="The lease's holder (a Celery worker's "
                                             "<nodename>:<pid>, run_scheduler's host:pid), "
                                             "or empty.")
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    lease_expires_in_s = serializers.FloatField(
        allow_null=True, help_text="Negative: the lease expired that long ago (the "
                                   "scheduler stopped, or cannot reach the database).")


class SummaryOut(serializers.Serializer):
    scheduler = SchedulerOut(help_text="Whether a scheduler runs (its lease), as squeue "
                                       "says when it cannot reach the controller.")
    nodes = serializers.IntegerField()
    nodes_by_health = serializers.DictField(child=serializers.IntegerField())
    gpus = serializers.IntegerField(help_text="All GPUs, whatever their node's health.")
    gpus_used = serializers.IntegerField(help_text="Held by jobs (PLACING to CHECKPOINTING).")
    gpus_free = serializers.IntegerField(help_text="Free on healthy nodes: placeable now.")
    gpus_unavailable = serializers.IntegerField(help_text="Free, but on draining or down "
                                                          "nodes.")
    gpus_borrowed = serializers.IntegerField(help_text="Held by tenants past their "
                                                       "guarantee.")
    gpus_reserved = serializers.IntegerField(
        help_text="GPUs held by the current reservations: the backfill reservation's and "
                  "those promised to entitled jobs while their victims stop (the last "
                  "tick's plan).")
    jobs_by_state = serializers.DictField(child=serializers.IntegerField(),
                                          help_text="Jobs in each non-final state.")
    reservations = ReservationOut(many=True)


class ClusterSummary(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="cluster_summary", summary="GPUs free, used, borrowed, "
                   "reserved; node health; jobs per state; current reservations",
                   responses={200: SummaryOut})
    def get(self, request: Request) -> Response:
        reservations = published_reservations()
        summary = cluster_summary(reserved_gpus=sum(r.gpus for r in reservations))
        status = scheduler_status(now=timezone.now())
        data = {
            "scheduler": {"running": status.running, "holder": status.holder,
                          "lease_expires_at": status.expires_at,
                          "lease_expires_in_s": status.expires_in_s},
            **{name: getattr(summary, name) for name in summary.__slots__},
            "reservations": reservation_rows(request.user, reservations),
        }
        return Response(SummaryOut(data).data)


class Reservations(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="cluster_reservations",
                   summary="The current reservations, as the last tick planned them",
                   responses={200: ReservationOut(many=True)})
    def get(self, request: Request) -> Response:
        rows = reservation_rows(request.user, published_reservations())
        return Response(ReservationOut(rows, many=True).data)


class FeedRowOut(serializers.ModelSerializer):
    seq = serializers.IntegerField(source="pk")
    node = serializers.CharField(source="node.name", allow_null=True, default=None)
    tenant = serializers.CharField(source="tenant.name", allow_null=True, default=None)

    class Meta:
        model = Transition
        fields = ["seq", "kind", "job", "node", "tenant", "at", "from_state", "to_state",
                  "reason", "actor", "actor_name", "tick_id", "detail"]


class FeedFilter(StrictFilterSet):
    paging = ("after", "limit")
    kind = django_filters.MultipleChoiceFilter(choices=Transition.Kind.choices)
    job = IdFilter(field_name="job_id")
    node = django_filters.CharFilter(field_name="node__name")
    tenant = django_filters.CharFilter(field_name="tenant__name")

    must_exist = {
        "node": (Node, "name", "node named", "GET /api/v1/nodes/"),
        "tenant": (Tenant, "name", "tenant named", "GET /api/v1/tenants/"),
    }

    class Meta:
        model = Transition
        fields = ["kind", "job", "node", "tenant"]


class TransitionFeed(generics.ListAPIView):
    """Every row of the log you may see, in seq order: your jobs' transitions (all jobs
    for operators), every node health change and every quota change. Resume with
    ``?after=<the last seq you saw>``: seq order is commit order, so nothing is skipped."""

    permission_classes = [access.IsUser]
    serializer_class = FeedRowOut
    pagination_class = SeqPagination
    filterset_class = FeedFilter

    def get_queryset(self) -> QuerySet[Transition]:
        rows = Transition.objects.select_related("node", "tenant")
        if getattr(self, "swagger_fake_view", False):
            return rows.none()  # schema generation: no user
        if access.is_operator(self.request.user):
            return rows
        visible = Job.objects.filter(access.visible_jobs(self.request.user)).values("pk")
        return rows.filter(~Q(kind=Transition.Kind.JOB) | Q(job__in=visible))

    @staticmethod
    def _check_job(request: Request) -> None:
        """``?job=<id>``: a job that is not the caller's to see is a 403, as its own
        endpoint is (it was an empty 200, as if it had no history); one that does not
        exist a 400 naming the parameter, as the jobs list's ``?array=`` is. A malformed
        id is the filter's own 400."""
        raw = request.query_params.get("job", "")
        if not (raw.isascii() and raw.isdigit() and 0 < int(raw) <= ID_MAX):
            return
        try:
            job_for(request, int(raw))
        except NotFound as error:
            raise ValidationError({"job": [f"No job {int(raw)}."]}) from error
        except PermissionDenied as error:
            error.field = "job"  # type: ignore[attr-defined]  # read by exception_handler
            raise

    @extend_schema(operation_id="cluster_transitions", summary="The transitions feed")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self._check_job(request)
        response = super().get(request, *args, **kwargs)
        if not access.is_operator(request.user):
            # your jobs' rows name other jobs (the one a preemption made room for, the
            # victims of a reclaim): "a job of team X" for those you may not see
            rows = response.data["results"]
            others = access.other_jobs(request.user).learn(
                details=[row["detail"] for row in rows if row["detail"]])
            for row in rows:
                row["detail"] = others.detail(row["detail"])
        return response

