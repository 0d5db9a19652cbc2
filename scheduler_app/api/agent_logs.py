"""The tail of a job's log: node agents push the last few KB of each job's stdout and
stderr (with their heartbeat, and once when the job exits); whoever may see the job reads
them.

    POST /api/v1/agent/jobs/{id}/log/   {"stdout": "...", "stderr": "..."}   (agent)
    GET  /api/v1/jobs/{id}/log/                                              (users)

The tails live in Django's cache (``job-log:<id>``, kept for a week), not in the database:
they are a window on files that stay on the node, replaced at every push, and not part of
the job's history. With several web processes, point ``CACHE_URL`` at a shared cache
(Redis), as the early-tick debounce needs anyway; with the default per-process memory
cache, each process sees the pushes it received.
"""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from django.db.models import Max, Q
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.models import Allocation, Job, Node
from scheduler_app.services.errors import Forbidden

from . import access
from .errors import id_or_404
from .fields import StrictCharField
from .jobs import job_for

#: Bytes (characters) of each stream the API keeps: the agent sends at most this much.
TAIL_MAX = 16384
#: How long a pushed tail is kept after the last push.
TAIL_TTL_S = 7 * 24 * 3600


def log_key(job_id: int) -> str:
    return f"job-log:{job_id}"


def job_log_store(*, job: Job, node: Node, stdout: str, stderr: str) -> dict[str, Any]:
    """Keep the latest tail of ``job``'s log, as ``node``'s agent sent it. The node must
    hold (or have held last) GPUs for the job: a node that never did is refused, and so is
    one the job has left since (its earlier run's output replaced the visible log of the
    run now going on elsewhere, until that node pushed again: found by a user session,
    2026-12-07). The latest placement's nodes are those of the allocations that started
    last (a placement's, or an elastic shrink's, all start at one instant)."""
    starts = Allocation.objects.filter(job=job).aggregate(
        last=Max("start"), here=Max("start", filter=Q(node=node)))
    if starts["here"] is None:
        raise Forbidden(f"job {job.pk} never ran on node {node.name}", field="job",
                        code="not_on_node")
    if starts["here"] != starts["last"]:
        raise Forbidden(f"job {job.pk} no longer runs on node {node.name}: its latest run is "
                        "on other nodes, whose log it shows", field="job", code="not_on_node")
    if not stdout and not stderr:
        # every node of a gang runs it, and each agent sends its tail at the end of the
        # run even if empty: a node whose part printed nothing must not hide the output
        # another node of the same run sent (the latest push wins otherwise)
        old = cache.get(log_key(job.pk))
        if (old and (old["stdout"] or old["stderr"]) and old["at"] is not None
                and old["at"] >= starts["last"]):
            return old
    tail = {"job_id": job.pk, "node": node.name, "at": timezone.now(),
            "stdout": stdout[-TAIL_MAX:], "stderr": stderr[-TAIL_MAX:]}
    cache.set(log_key(job.pk), tail, timeout=TAIL_TTL_S)
    return tail


def job_log_tail(*, job: Job) -> dict[str, Any]:
    """The latest tail pushed for ``job`` (empty, ``at`` null, if none was)."""
    return cache.get(log_key(job.pk)) or {"job_id": job.pk, "node": None, "at": None,
                                          "stdout": "", "stderr": ""}


class LogIn(serializers.Serializer):
    stdout = StrictCharField(max_length=TAIL_MAX, allow_blank=True, required=False,
                             default="", trim_whitespace=False,
                             help_text="The last bytes of the job's stdout on this node.")
    stderr = StrictCharField(max_length=TAIL_MAX, allow_blank=True, required=False,
                             default="", trim_whitespace=False,
                             help_text="The last bytes of the job's stderr on this node.")


class LogOut(serializers.Serializer):
    job_id = serializers.IntegerField()
    node = serializers.CharField(allow_null=True, help_text="The node that sent it.")
    at = serializers.DateTimeField(allow_null=True, help_text="When it was sent (null: "
                                   "no agent has sent a log for this job).")
    stdout = serializers.CharField(allow_blank=True, trim_whitespace=False)
    stderr = serializers.CharField(allow_blank=True, trim_whitespace=False)


class AgentLogPush(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_push_log",
                   summary="The tail of a job's stdout and stderr on this node",
                   request=LogIn, responses={200: LogOut})
    def post(self, request: Request, pk: int) -> Response:
        job = id_or_404(Job.objects, pk, "job")
        data = LogIn(data=request.data)
        data.is_valid(raise_exception=True)
        tail = job_log_store(job=job, node=request.user.node, **data.validated_data)
        return Response(LogOut(tail).data)


class JobLogTail(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="jobs_log", summary="The tail of a job's log, as its node's "
                   "agent last sent it", responses={200: LogOut})
    def get(self, request: Request, pk: int) -> Response:
        return Response(LogOut(job_log_tail(job=job_for(request, pk))).data)
