from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from scheduler_app.core.states import JobState, PendingReason

from .choices import (
    ACTOR_CHOICES,
    JOB_STATE_CHOICES,
    LOG_STATE_CHOICES,
    PENDING_REASON_CHOICES,
    REASON_CHOICES,
)
from .cluster import Node
from .tenants import Tenant


class Job(models.Model):
    """What a user asked for (immutable after submit) and its projected state.

    The spec fields mirror ``core.types.JobSpec``. The state fields below the line are a
    projection of the Transition log, written only by ``services.transitions``.
    """

    # No index of their own: job_tenant_state and job_owner_recent lead with them, and
    # every submit would otherwise update two more indexes
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="jobs",
                               db_index=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
        db_index=False,
    )
    name = models.CharField(max_length=200)
    command = models.TextField(blank=True, default="")
    gpus = models.PositiveIntegerField()
    #: The gang's shape: GPUs on each node. Null: any split.
    gpus_per_node = models.PositiveSmallIntegerField(null=True, blank=True)
    #: Empty: any GPU type.
    gpu_type = models.CharField(max_length=32, blank=True, default="")
    priority = models.IntegerField(default=0)
    checkpointable = models.BooleanField(default=False)
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True)
    #: Grace window it needs to checkpoint when asked to stop.
    checkpoint_time_s = models.PositiveIntegerField(null=True, blank=True)
    restart_s = models.PositiveIntegerField(default=0)
    #: Limit per run; at the limit the job FAILS (TimeLimit). Null: no limit, never backfills.
    max_runtime_s = models.PositiveIntegerField(null=True, blank=True)
    #: The job declared no limit and ``max_runtime_s`` is its team's ``default_runtime_s``,
    #: given at submit (the API and the job page say where the limit came from).
    runtime_from_team_default = models.BooleanField(default=False)
    #: Elastic jobs may run (and shrink) down to this many GPUs. Null: not elastic.
    min_gpus = models.PositiveIntegerField(null=True, blank=True)
    #: Opted into preemptible pricing: may be preempted even if it cannot checkpoint.
    preemptible = models.BooleanField(default=False)
    interactive = models.BooleanField(default=False)
    #: Client-chosen key: the same owner submitting twice with it gets the first job.
    idempotency_key = models.CharField(max_length=128, blank=True, default="")
    #: The jobs it waits for: ``[[awaited job id, when], ...]``, ``when`` one of
    #: ``core.types.DEPENDENCY_KINDS`` (ok, any, notok), in the order given at submit.
    #: A JSON list on the row, not a table of its own: it is immutable after submit, the
    #: leader reads it with the rest of the spec in the same row read (SPEC_COLUMNS,
    #: tuples, no join), and "who waits for job X" is asked of the core's own index,
    #: never of the database.
    depends_on = models.JSONField(default=list, blank=True)
    #: A task of a job array: the id of the array's task 0 (task 0's own id; null: not a
    #: task), this task's index, the array's size and how many of its tasks may run at
    #: once (null: no cap). Shown as ``<array_id>_<array_index>`` (Slurm's 12_3).
    array_id = models.BigIntegerField(null=True, blank=True)
    array_index = models.PositiveIntegerField(null=True, blank=True)
    array_count = models.PositiveIntegerField(null=True, blank=True)
    array_max_running = models.PositiveIntegerField(null=True, blank=True)

    # --- projection of the Transition log -------------------------------------------
    state = models.CharField(
        max_length=24, choices=JOB_STATE_CHOICES, default=JobState.SUBMITTED.value
    )
    pending_reason = models.CharField(
        max_length=32, choices=PENDING_REASON_CHOICES, default=PendingReason.NONE.value
    )
    #: Written by the leader with the pending reason: for reason Reservation, the id of
    #: the job whose reservation this one would delay (core.records.TickResult.blockers);
    #: null otherwise. Read only while the reason is Reservation.
    pending_blocker = models.BigIntegerField(null=True, blank=True)
    #: Written by the leader after a tick (not from the log): when the job should start by
    #: the reservation plan, and the plan's sentence (which release makes it fit). Null:
    #: not planned (too far down the queue, or it waits on a job without a declared limit).
    estimate_start_at = models.DateTimeField(null=True, blank=True)
    estimate_basis = models.TextField(blank=True, default="")
    #: what the estimate is worth (core.records.StartEstimate.kind): reserved | reclaim |
    #: quota | projected; empty without an estimate
    estimate_kind = models.CharField(max_length=16, blank=True, default="")
    submitted_at = models.DateTimeField()
    #: Start of the current (or last) run: set when the agent confirms (-> RUNNING).
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    resume_pointer = models.CharField(max_length=512, blank=True, default="")
    #: Epoch seconds of each preemption request, for the per-day cap.
    preemption_times = models.JSONField(default=list, blank=True)
    #: Runs lost to node failures by a job that cannot checkpoint (the retry budget).
    retry_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "state"], name="job_tenant_state"),
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(fields=["owner", "-submitted_at"], name="job_owner_recent"),
            # ?array=<id> lists an array's tasks by id; partial: a job outside an array
            # (most) costs no index entry at submit
            models.Index(fields=["array_id", "id"], name="job_array_tasks",
                         condition=Q(array_id__isnull=False)),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="job_gpus_gte_1"),
            models.CheckConstraint(
                condition=Q(min_gpus__isnull=True) | Q(min_gpus__lte=F("gpus")),
                name="job_min_gpus_lte_gpus",
            ),
            # A key is its owner's: a teammate reusing your key makes a job of their own
            # (and a retry of theirs returns theirs). Jobs submitted by no one (scripts,
            # the simulator) share one namespace per tenant.
            models.UniqueConstraint(
                fields=["tenant", "owner", "idempotency_key"],
                condition=~Q(idempotency_key="") & Q(owner__isnull=False),
                name="job_idempotency_key_per_owner",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key="") & Q(owner__isnull=True),
                name="job_idempotency_key_ownerless",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name} ({self.state})"

    @property
    def array_task(self) -> str | None:
        """The task's name, ``<array_id>_<array_index>`` (Slurm's style); None outside an
        array."""
        if self.array_id is None:
            return None
        return f"{self.array_id}_{self.array_index}"


class Allocation(models.Model):
    """GPUs a job holds on one node. Open (``end`` null) while the job is in a holding state."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    #: Exact GPU indices on the node, sorted.
    gpu_indices = models.JSONField()
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)
    preemptible = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["node"], condition=Q(end__isnull=True), name="alloc_open_by_node"),
            models.Index(fields=["job"], condition=Q(end__isnull=True), name="alloc_open_by_job"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} on {self.node_id} GPUs {self.gpu_indices}"

    @property
    def gpus(self) -> int:
        return len(self.gpu_indices)


class Transition(models.Model):
    """One row of the append-only log: every change of a job's state, a node's health and a
    tenant's quota, in one order.

    The primary key is the sequence number (``seq``): a BigAutoField, so it only grows.
    Writers serialise their appends (see services.transitions) so seq order is commit
    order. Database triggers refuse UPDATE and DELETE (migrations 0002, 0003).

    ``kind`` says what the row is about; exactly the foreign key of that kind is set (a
    check constraint holds it):

    - ``job``: ``from_state``/``to_state`` are job states. ``detail`` carries what the log
      needs to rebuild the projection: ``{"alloc": {node: [gpu indices]}}`` on
      QUEUED -> PLACING and on Shrunk self-transitions, ``{"resume_pointer": ...}`` on
      Checkpointed, and the human explanation of a decision.
    - ``node``: ``from_state``/``to_state`` are node health values (``healthy``,
      ``draining``, ``down``; from is null when the node registers), reason NodeHealth;
      ``detail`` = ``{"action": drain|undrain|down|up|register|heartbeat_timeout,
      "before": {...}, "after": {...}, "why": ...}``.
    - ``tenant``: reason QuotaChanged, states null/empty; ``detail`` = ``{"before":
      {"guaranteed_gpus", "borrow_limit_gpus"}, "after": {...}}``.
    """

    class Kind(models.TextChoices):
        JOB = "job", "job"
        NODE = "node", "node"
        TENANT = "tenant", "tenant"

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.JOB)
    # indexed by (job, id) below; a separate job_id index would be redundant
    job = models.ForeignKey(
        Job,
        on_delete=models.PROTECT,
        related_name="transitions",
        db_index=False,
        null=True,
        blank=True,
    )
    node = models.ForeignKey(
        Node,
        on_delete=models.PROTECT,
        related_name="transitions",
        db_index=False,
        null=True,
        blank=True,
    )
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.PROTECT,
        related_name="transitions",
        db_index=False,
        null=True,
        blank=True,
    )
    # NULL on the first row of a job ("(none) -> SUBMITTED"), a node's registration and
    # every tenant row: there is no state before it.
    from_state = models.CharField(  # noqa: DJ001
        max_length=24, choices=LOG_STATE_CHOICES, null=True, blank=True
    )
    #: Empty on tenant rows (a quota has no state).
    to_state = models.CharField(max_length=24, choices=LOG_STATE_CHOICES, blank=True)
    at = models.DateTimeField()
    reason = models.CharField(max_length=32, choices=REASON_CHOICES)
    detail = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=16, choices=ACTOR_CHOICES)
    #: Who exactly: a username, an agent's node name, the scheduler's holder id.
    actor_name = models.CharField(max_length=150, blank=True, default="")
    tick_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job", "id"], name="transition_job_seq"),
            models.Index(
                fields=["node", "id"],
                name="transition_node_seq",
                condition=Q(node__isnull=False),
            ),
            models.Index(
                fields=["tenant", "id"],
                name="transition_tenant_seq",
                condition=Q(tenant__isnull=False),
            ),
            models.Index(fields=["at"], name="transition_at"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(kind="job", job__isnull=False, node__isnull=True, tenant__isnull=True)
                    | Q(kind="node", node__isnull=False, job__isnull=True, tenant__isnull=True)
                    | Q(kind="tenant", tenant__isnull=False, job__isnull=True, node__isnull=True)
                ),
                name="transition_kind_matches_fk",
            ),
        ]

    def __str__(self) -> str:
        if self.kind == self.Kind.NODE:
            subject = f"node {self.node_id}"
        elif self.kind == self.Kind.TENANT:
            subject = f"tenant {self.tenant_id}"
        else:
            subject = f"job {self.job_id}"
        return f"#{self.pk} {subject}: {self.from_state} -> {self.to_state} ({self.reason})"

    @property
    def seq(self) -> int:
        return self.pk
