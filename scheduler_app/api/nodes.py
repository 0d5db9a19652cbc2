"""Nodes: list and detail with health and allocations (everyone signed in); operators
drain, undrain, mark down and mark up (each a row of the log)."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.core.types import NodeHealth
from scheduler_app.models import Allocation, Node, Pod, Transition
from scheduler_app.services.cluster import (
    NODE_WHY_MAX,
    node_drain,
    node_mark_down,
    node_mark_up,
    node_undrain,
)

from . import access
from .errors import named_or_404
from .fields import KnownFieldsOnly, StrictCharField
from .filters import StrictFilterSet
from .pagination import IdCursorPagination

RECENT_EVENTS = 20


class NodeAllocationOut(serializers.Serializer):
    job = serializers.IntegerField(
        allow_null=True, help_text="The job's id, if you may see the job; else null.")
    tenant = serializers.CharField()
    gpu_indices = serializers.ListField(child=serializers.IntegerField())
    since = serializers.DateTimeField()
    preemptible = serializers.BooleanField()


class NodeOut(serializers.ModelSerializer):
    pod = serializers.CharField(source="pod.name")
    allocations = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "pod", "rail", "gpu_type", "gpu_count", "free_gpus", "health",
                  "last_heartbeat", "allocations"]

    @extend_schema_field(NodeAllocationOut(many=True))
    def get_allocations(self, node: Node) -> list[dict[str, Any]]:
        user = self.context["user"]
        return [
            {
                "job": a.job_id if access.can_see_job(user, a.job) else None,
                "tenant": a.job.tenant.name,
                "gpu_indices": sorted(a.gpu_indices),
                "since": a.start,
                "preemptible": a.preemptible,
            }
            for a in node.open_allocations
        ]


class NodeEventOut(serializers.ModelSerializer):
    seq = serializers.IntegerField(source="pk")

    class Meta:
        model = Transition
        fields = ["seq", "at", "from_state", "to_state", "actor", "actor_name", "detail"]


class NodeDetailOut(NodeOut):
    events = serializers.SerializerMethodField()

    class Meta(NodeOut.Meta):
        fields = [*NodeOut.Meta.fields, "events"]

    @extend_schema_field(NodeEventOut(many=True))
    def get_events(self, node: Node) -> list[dict]:
        rows = Transition.objects.filter(node=node).order_by("-id")[:RECENT_EVENTS]
        return NodeEventOut(rows, many=True).data


def nodes_with_allocations() -> QuerySet[Node]:
    return Node.objects.select_related("pod").prefetch_related(
        Prefetch(
            "allocations",
            queryset=Allocation.objects.filter(end__isnull=True)
            .select_related("job__tenant")
            .order_by("id"),
            to_attr="open_allocations",
        )
    )


class NodeFilter(StrictFilterSet):
    pod = django_filters.CharFilter(field_name="pod__name")
    health = django_filters.MultipleChoiceFilter(choices=[(h.value, h.value) for h in NodeHealth])
    gpu_type = django_filters.CharFilter()

    must_exist = {
        "pod": (Pod, "name", "pod named", "GET /api/v1/nodes/"),
        "gpu_type": (Node, "gpu_type", "node of GPU type", "GET /api/v1/nodes/"),
    }

    class Meta:
        model = Node
        fields = ["pod", "health", "gpu_type"]


class NodePagination(IdCursorPagination):
    ordering = "name"


class NodeList(generics.ListAPIView):
    permission_classes = [access.IsUser]
    serializer_class = NodeOut
    pagination_class = NodePagination
    filterset_class = NodeFilter

    def get_queryset(self) -> QuerySet[Node]:
        return nodes_with_allocations()

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "user": self.request.user}

    @extend_schema(operation_id="nodes_list", summary="Nodes with health and allocations")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


def _node(name: str) -> Node:
    return named_or_404(nodes_with_allocations(), name, "node", "GET /api/v1/nodes/")


class NodeDetail(APIView):
    permission_classes = [access.IsUser]

    @extend_schema(operation_id="nodes_retrieve",
                   summary="A node: health, allocations and its recent health events",
                   responses={200: NodeDetailOut})
    def get(self, request: Request, name: str) -> Response:
        return Response(NodeDetailOut(_node(name), context={"user": request.user}).data)


class WhyIn(KnownFieldsOnly):
    why = StrictCharField(required=False, allow_blank=True, default="",
                          help_text=f"Recorded in the log: at most {NODE_WHY_MAX} characters "
                                    "of printable text (the services' rule, as the "
                                    "dashboard's).")


#: the moves that take a node out of service need a reason, in these words
_WHY_REQUIRED = {
    "drain": "Say why the node is drained: the reason goes in the log.",
    "down": "Say why the node is marked down: the reason goes in the log.",
}


class _NodeAction(APIView):
    permission_classes = [access.IsOperator]
    action = ""

    def act(self, request: Request, name: str) -> Response:
        node = _node(name)
        data = WhyIn(data=request.data)
        data.is_valid(raise_exception=True)
        who = request.user.get_username()
        why = data.validated_data["why"]
        if self.action in _WHY_REQUIRED and not why.strip():
            # as the dashboard's drain form asks, and as Slurm requires a Reason for DRAIN
            # and DOWN: the API took none, and the log row said nothing of why (an
            # operator's session, 2026-12-07)
            raise serializers.ValidationError({"why": [_WHY_REQUIRED[self.action]]})
        if self.action == "drain":
            node_drain(node=node, actor_name=who, why=why)
        elif self.action == "undrain":
            node_undrain(node=node, actor_name=who, why=why)
        elif self.action == "down":
            node_mark_down(node=node, actor_name=who, why=why)
        else:
            node_mark_up(node=node, actor_name=who, why=why)
        return Response(NodeDetailOut(_node(name), context={"user": request.user}).data)


def _action_view(action: str, summary: str) -> type[_NodeAction]:
    # a fresh function per class: extend_schema annotates the function object itself
    def post(self: _NodeAction, request: Request, name: str) -> Response:
        return self.act(request, name)

    post = extend_schema(
        operation_id=f"nodes_{action}", summary=summary, request=WhyIn,
        responses={200: NodeDetailOut},
        description="Operators only. 409 if the node's health does not allow it.",
    )(post)
    return type(f"Node{action.title()}", (_NodeAction,), {"action": action, "post": post})


NodeDrain = _action_view("drain", "Drain a node: it keeps its jobs and takes no new ones")
NodeUndrain = _action_view("undrain", "Undrain a node: it takes new jobs again")
NodeDown = _action_view("down", "Mark a node down: its jobs are requeued (or fail)")
NodeUp = _action_view("up", "Mark a node up (or lift a drain)")
