"""Node agents: register and heartbeat; fetch assignments (jobs to start, preemption
requests); confirm a start, report a checkpoint, acknowledge a preemption request,
report an exit. An agent authenticates with its node's agent token and acts only on its
own node's jobs (the services refuse anything else: 403)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler_app.models import Job, Node
from scheduler_app.selectors.agents import agent_assignments
from scheduler_app.services.agents import (
    MAX_NODE_GPUS,
    agent_ack_preempt,
    agent_confirm_start,
    agent_heartbeat,
    agent_register,
    agent_report_checkpoint,
    agent_report_exit,
    is_replayed,
)

from . import access
from .errors import id_or_404
from .fields import (
    SMALL_MAX,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictIntegerField,
)
from .jobs import TransitionOut
from .tokens import token_issue


class RegisterIn(serializers.Serializer):
    name = StrictCharField(max_length=128, help_text="The node's name (its agent "
                                 "token's node, for an agent). A new node's name is 1 to 64 "
                                 "letters, digits, '.', '_' or '-', not first '.' or '-'.")
    pod = StrictCharField(max_length=64)
    gpus = StrictIntegerField(
        min_value=1, max_value=MAX_NODE_GPUS, help_text="GPUs on the node.",
        error_messages={key: f"A node has 1 to {MAX_NODE_GPUS} GPUs."
                        for key in ("min_value", "max_value")})
    gpu_type = StrictCharField(max_length=32, required=False, allow_blank=True,
                                     default="")
    rail = StrictIntegerField(min_value=0, max_value=SMALL_MAX, required=False,
                                    default=0)
    issue_token = StrictBooleanField(
        required=False, default=False,
        help_text="Operators only: also issue an agent token for the node (returned once).")


class AgentNodeOut(serializers.ModelSerializer):
    pod = serializers.CharField(source="pod.name")

    class Meta:
        model = Node
        fields = ["name", "pod", "rail", "gpu_type", "gpu_count", "free_gpus", "health",
                  "last_heartbeat"]


class RegisterOut(serializers.Serializer):
    node = AgentNodeOut()
    token = serializers.CharField(
        allow_null=True, help_text="A new agent token, when an operator asked for one. "
        "Shown once: it is stored only as a hash.")


class AgentRegister(APIView):
    """Agents (re-)register their own node: gpus or type changed, or back after being
    down. Operators register any node, and may ask for its first agent token."""

    permission_classes = [access.IsAgentOrOperator]

    @extend_schema(operation_id="agent_register", summary="Register a node (agent or "
                   "operator)", request=RegisterIn, responses={200: RegisterOut,
                   201: RegisterOut})
    def post(self, request: Request) -> Response:
        data = RegisterIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        user = request.user
        if access.is_agent(user) and v["name"] != user.node.name:
            raise PermissionDenied(f"This token belongs to node {user.node.name!r}: an agent "
                                   "registers only its own node.")
        if v["issue_token"] and not access.is_operator(user):
            raise PermissionDenied("Only operators may issue agent tokens.")
        existed = Node.objects.filter(name=v["name"]).exists()
        node = agent_register(name=v["name"], pod=v["pod"], gpus=v["gpus"],
                              gpu_type=v["gpu_type"], rail=v["rail"],
                              operator=None if access.is_agent(user) else user.get_username())
        key = None
        if v["issue_token"]:
            _token, key = token_issue(node=node, name=f"agent {node.name}")
        node = Node.objects.select_related("pod").get(pk=node.pk)
        return Response({"node": AgentNodeOut(node).data, "token": key},
                        status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED)


class AgentHeartbeat(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_heartbeat", summary="I am alive", request=None,
                   responses={200: AgentNodeOut})
    def post(self, request: Request) -> Response:
        node = agent_heartbeat(node=request.user.node)
        node = Node.objects.select_related("pod").get(pk=node.pk)
        return Response(AgentNodeOut(node).data)


class StartOut(serializers.Serializer):
    job_id = serializers.IntegerField()
    name = serializers.CharField()
    command = serializers.CharField(allow_blank=True)
    gpus = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="Node name -> GPU indices: this node's share of the gang, and the rest "
                  "of the gang's nodes.")
    resume_pointer = serializers.CharField(allow_blank=True, allow_null=True)
    env = serializers.DictField(child=serializers.CharField(), required=False)
    nodes = serializers.ListField(
        child=serializers.CharField(),
        help_text="Every node of the gang, in name order (one name for a one-node job).")
    # (the serializer dropped it, and the reference agent took every poll of a gang still
    # placing for a new placement: it restarted the gang's runs every two seconds, for
    # good; found by running it as production does, 2026-12-07)
    run = serializers.CharField(
        help_text="Which placement this is (its instant, the same on every node of the "
                  "gang): an item seen again with the same run is the same placement, "
                  "never a new one.")


class PreemptOut(serializers.Serializer):
    job_id = serializers.IntegerField()
    grace_deadline = serializers.DateTimeField(
        allow_null=True, help_text="Checkpoint and exit before this; killed after it.")
    state = serializers.CharField()


class AssignmentsOut(serializers.Serializer):
    start = StartOut(many=True, help_text="Jobs placed here (PLACING): start them, then "
                     "confirm each start.")
    preempt = PreemptOut(many=True, help_text="Jobs asked to stop: acknowledge, "
                         "checkpoint, exit.")
    running = serializers.ListField(child=serializers.IntegerField(),
                                    help_text="Jobs this node should be running; kill any "
                                              "other.")


class AgentAssignments(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_assignments",
                   summary="What this node should do: start, preempt, keep running",
                   responses={200: AssignmentsOut})
    def get(self, request: Request) -> Response:
        return Response(AssignmentsOut(agent_assignments(node=request.user.node)).data)


def _job(pk: int) -> Job:
    return id_or_404(Job.objects, pk, "job")


class AgentJobOut(serializers.Serializer):
    job_id = serializers.IntegerField()
    state = serializers.CharField()
    transition = TransitionOut()


GANG_NOTE = (
    "Each node of a gang reports: the first report moves the job; a later one from another "
    "node of the gang (or a retry) gets 200 with the job's current state and the row that "
    "moved it, header Idempotent-Replayed: true, nothing written (docs/api.md, \"Gangs\")."
)


def _moved(job: Job, row: Any) -> Response:
    """The job's state now and the row of the report. A repeated report (another node of
    the gang, or a retry) gets the row already in the log, and the header
    ``Idempotent-Replayed: true``."""
    job.refresh_from_db(fields=["state"])
    headers = {"Idempotent-Replayed": "true"} if is_replayed(row) else None
    return Response({"job_id": job.pk, "state": job.state,
                     "transition": TransitionOut(row).data}, headers=headers)


def _run_field() -> serializers.DateTimeField:
    return serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="The placement this report is about: the start item's run. Optional; "
                  "given, a report of an earlier run of the job is refused (409 stale_run) "
                  "instead of moving the run placed since.")


class RunIn(serializers.Serializer):
    run = _run_field()


class AgentConfirmStart(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_confirm_start",
                   summary="The job started on this node (PLACING -> RUNNING)",
                   description=GANG_NOTE, request=RunIn, responses={200: AgentJobOut})
    def post(self, request: Request, pk: int) -> Response:
        job = _job(pk)
        data = RunIn(data=request.data)
        data.is_valid(raise_exception=True)
        return _moved(job, agent_confirm_start(node=request.user.node, job=job,
                                               run=data.validated_data["run"]))


class CheckpointIn(serializers.Serializer):
    resume_pointer = StrictCharField(max_length=512, help_text="Where to resume from "
                                           "(a path or URI), 1 to 512 characters.")
    checkpoint_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="When the checkpoint was taken (default: now). Not in the future, not "
                  "before the run started.")
    run = _run_field()


class AgentCheckpoint(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_report_checkpoint",
                   summary="The job wrote a checkpoint", request=CheckpointIn,
                   responses={200: AgentJobOut})
    def post(self, request: Request, pk: int) -> Response:
        job = _job(pk)
        data = CheckpointIn(data=request.data)
        data.is_valid(raise_exception=True)
        row = agent_report_checkpoint(
            node=request.user.node, job=job,
            resume_pointer=data.validated_data["resume_pointer"],
            checkpoint_at=data.validated_data["checkpoint_at"],
            run=data.validated_data["run"],
        )
        return _moved(job, row)


class AgentAckPreempt(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_ack_preempt",
                   summary="The job is checkpointing before it stops "
                           "(PREEMPT_REQUESTED -> CHECKPOINTING)",
                   description=GANG_NOTE, request=RunIn, responses={200: AgentJobOut})
    def post(self, request: Request, pk: int) -> Response:
        job = _job(pk)
        data = RunIn(data=request.data)
        data.is_valid(raise_exception=True)
        return _moved(job, agent_ack_preempt(node=request.user.node, job=job,
                                             run=data.validated_data["run"]))


class ExitIn(serializers.Serializer):
    outcome = StrictChoiceField(
        choices=["completed", "failed", "preempted"],
        help_text="completed (exit 0), failed (crashed), preempted (exited after "
                  "checkpointing, as asked).")
    exit_code = StrictIntegerField(required=False, allow_null=True, default=None,
                                         min_value=-255, max_value=255)
    run = _run_field()


class AgentExit(APIView):
    permission_classes = [access.IsAgent]

    @extend_schema(operation_id="agent_report_exit", summary="The job exited",
                   description=GANG_NOTE + " The first exit report of a gang ends the run on "
                   "all its nodes, and its outcome stands.",
                   request=ExitIn, responses={200: AgentJobOut})
    def post(self, request: Request, pk: int) -> Response:
        job = _job(pk)
        data = ExitIn(data=request.data)
        data.is_valid(raise_exception=True)
        row = agent_report_exit(node=request.user.node, job=job,
                                outcome=data.validated_data["outcome"],
                                exit_code=data.validated_data["exit_code"],
                                run=data.validated_data["run"])
        return _moved(job, row)
