"""``manage.py seed_demo``: the demo cluster, teams and logins. Idempotent.

3 pods x 16 nodes x 8 H100 GPUs (384 GPUs), six teams with guarantees and borrow limits,
a lead and two researchers per team, one operator (staff), and a handful of demo jobs
(submitted with idempotency keys, so a second run finds them instead of adding more).
Running it twice changes nothing; passwords are set only when a user is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from scheduler_app.core.states import JobState, Reason
from scheduler_app.core.types import Actor
from scheduler_app.models import Job, Membership, Node, Pod, Tenant
from scheduler_app.services import job_submit, job_transition
from scheduler_app.services.jobs import array_submit
from scheduler_app.services.transitions import now_s

DEMO_PASSWORD = "gpu-demo-2026"
PODS = ("pod-a", "pod-b", "pod-c")
NODES_PER_POD = 16
GPUS_PER_NODE = 8
GPU_TYPE = "H100"
NODES_PER_RAIL = 8  # two leaf switches (rails) per pod

#: (team, guaranteed GPUs, borrow limit): guarantees add up to 320 of the 384 GPUs.
TEAMS: tuple[tuple[str, int, int], ...] = (
    ("pretrain", 128, 128),
    ("multimodal", 64, 64),
    ("rl", 48, 48),
    ("evals", 32, 64),
    ("safety", 24, 32),
    ("infra", 24, 16),
)
OPERATOR = "operator"


@dataclass(frozen=True)
class DemoJob:
    key: str
    team: str
    name: str
    gpus: int
    gpus_per_node: int | None
    checkpointable: bool
    max_runtime_s: int | None
    run_on: tuple[str, ...] = ()  # nodes to start it on at once (the tick is a later issue)


DEMO_JOBS: tuple[DemoJob, ...] = (
    DemoJob(
        "demo-1",
        "pretrain",
        "llm-7b-pretrain",
        64,
        8,
        True,
        None,
        tuple(f"pod-a-n{i:02d}" for i in range(1, 9)),
    ),
    DemoJob("demo-2", "evals", "mmlu-sweep", 8, 8, False, 3600, ("pod-b-n01",)),
    DemoJob("demo-3", "multimodal", "vit-finetune", 16, 8, True, 7200),
    DemoJob("demo-4", "rl", "ppo-agents", 4, None, True, 1800),
    DemoJob("demo-5", "safety", "probe-train", 1, None, False, 600),
    DemoJob("demo-6", "infra", "nccl-allreduce-test", 32, 8, False, 900),
)


class Command(BaseCommand):
    help = "Create the demo cluster, teams, users and a few jobs (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--password", default=DEMO_PASSWORD, help="password for newly created users"
        )
        parser.add_argument("--no-jobs", action="store_true", help="skip the demo jobs")

    def handle(self, *args: object, password: str, no_jobs: bool, **options: object) -> None:
        with transaction.atomic():
            created_nodes = self._cluster()
            tenants = self._teams()
            logins = self._users(tenants, password)
        jobs = 0 if no_jobs else self._jobs(tenants)
        self.stdout.write(
            f"cluster: {len(PODS)} pods, {Node.objects.count()} nodes "
            f"({created_nodes} new), {len(tenants)} teams, {jobs} new demo jobs"
        )
        self.stdout.write(f"logins (password for new users: {password}):")
        for username, role in logins:
            self.stdout.write(f"  {username:<20} {role}")

    def _cluster(self) -> int:
        created = 0
        for pod_name in PODS:
            pod, _ = Pod.objects.get_or_create(name=pod_name)
            for i in range(1, NODES_PER_POD + 1):
                _, new = Node.objects.get_or_create(
                    name=f"{pod_name}-n{i:02d}",
                    defaults={
                        "pod": pod,
                        "rail": (i - 1) // NODES_PER_RAIL,
                        "gpu_type": GPU_TYPE,
                        "gpu_count": GPUS_PER_NODE,
                        "free_gpus": GPUS_PER_NODE,
                    },
                )
                created += new
        return created

    def _teams(self) -> dict[str, Tenant]:
        tenants = {}
        for name, guaranteed, borrow in TEAMS:
            tenants[name], _ = Tenant.objects.get_or_create(
                name=name,
                defaults={"guaranteed_gpus": guaranteed, "borrow_limit_gpus": borrow},
            )
        return tenants

    def _users(self, tenants: dict[str, Tenant], password: str) -> list[tuple[str, str]]:
        logins = [(OPERATOR, "operator (staff, admin)")]
        self._user(OPERATOR, password, staff=True)
        for team, tenant in tenants.items():
            for suffix, role in (
                ("lead", Membership.Role.LEAD),
                ("r1", Membership.Role.RESEARCHER),
                ("r2", Membership.Role.RESEARCHER),
            ):
                username = f"{team}-{suffix}"
                user = self._user(username, password, staff=False)
                Membership.objects.get_or_create(user=user, tenant=tenant, defaults={"role": role})
                logins.append((username, f"{role} of {team}"))
        return logins

    def _user(self, username: str, password: str, *, staff: bool) -> AbstractBaseUser:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=username,
            defaults={"is_staff": staff, "is_superuser": staff, "email": f"{username}@example.com"},
        )
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        return user

    def _jobs(self, tenants: dict[str, Tenant]) -> int:
        created = 0
        start = now_s() - timedelta(hours=1)
        for n, demo in enumerate(DEMO_JOBS):
            tenant = tenants[demo.team]
            if Job.objects.filter(tenant=tenant, idempotency_key=demo.key).exists():
                continue
            owner = get_user_model().objects.get(username=f"{demo.team}-r1")
            at = start + timedelta(minutes=n)
            job = job_submit(
                tenant=tenant,
                owner=owner,
                name=demo.name,
                command=f"python train.py --run {demo.name}",
                gpus=demo.gpus,
                gpus_per_node=demo.gpus_per_node,
                checkpointable=demo.checkpointable,
                checkpoint_interval_s=1800 if demo.checkpointable else None,
                checkpoint_time_s=60 if demo.checkpointable else None,
                max_runtime_s=demo.max_runtime_s,
                idempotency_key=demo.key,
                at=at,
            )
            created += 1
            if demo.run_on and job.state == JobState.QUEUED:
                per_node = demo.gpus // len(demo.run_on)
                alloc = {node: list(range(per_node)) for node in demo.run_on}
                job_transition(
                    job_id=job.pk,
                    to_state=JobState.PLACING,
                    reason=Reason.PLACED,
                    actor=Actor.SCHEDULER,
                    at=at,
                    alloc=alloc,
                )
                job_transition(
                    job_id=job.pk,
                    to_state=JobState.RUNNING,
                    reason=Reason.STARTED,
                    actor=Actor.AGENT,
                    at=at + timedelta(seconds=30),
                )
        return created + self._pipeline_and_sweep(tenants, start + timedelta(minutes=10))

    def _pipeline_and_sweep(self, tenants: dict[str, Tenant], at: datetime) -> int:
        """A report that waits for the evals sweep to complete (a dependency) and a
        12-task probe sweep running 3 at a time (an array): the two issue-19 features,
        there to be seen on the job pages and in gpuq from the first minute."""
        created = 0
        evals, safety = tenants["evals"], tenants["safety"]
        sweep = Job.objects.filter(tenant=evals, idempotency_key="demo-2").first()
        # (a sweep that failed or was cancelled since: a report after it would be refused)
        if sweep is not None and sweep.state not in ("FAILED", "CANCELLED") and not \
                Job.objects.filter(tenant=evals, idempotency_key="demo-report").exists():
            job_submit(tenant=evals, owner=sweep.owner, name="mmlu-report",
                       command="python report.py --run mmlu-sweep", gpus=1,
                       max_runtime_s=600, depends_on=[{"job": sweep.pk, "when": "ok"}],
                       idempotency_key="demo-report", at=at)
            created += 1
        if not Job.objects.filter(tenant=safety, idempotency_key="demo-probes#0").exists():
            owner = get_user_model().objects.get(username="safety-r1")
            tasks = array_submit(tenant=safety, owner=owner, name="probe-layer-sweep",
                                 command="python probe.py --layer $ARRAY_INDEX", gpus=1,
                                 count=12, max_running=3, max_runtime_s=900,
                                 idempotency_key="demo-probes", at=at)
            created += len(tasks)
        return created
