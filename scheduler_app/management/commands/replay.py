"""``manage.py replay [--verify]``: rebuild the projection from the Transition log.

Without ``--verify`` it prints what the log rebuilds (jobs per state, node health and
tenant quotas from the cluster rows). With ``--verify`` it compares the rebuild with the
Job, Allocation, Node (free GPUs, health) and Tenant (held GPUs, usage, quota) tables,
prints every mismatch and exits non-zero if there is any.
"""

from __future__ import annotations

from collections import Counter

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from scheduler_app.models import Transition
from scheduler_app.selectors.replay import (
    Mismatch,
    Rebuilt,
    compare_with_tables,
    read_snapshot,
    rebuild_from_log,
)

#: Below this many rows the replay takes well under a second: no progress bar.
PROGRESS_FROM_ROWS = 50_000


class Command(BaseCommand):
    help = "Rebuild job state, allocations, node GPUs and health, tenant quotas from the log."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--verify",
            action="store_true",
            help="compare with the projection tables; exit 1 on any mismatch",
        )
        parser.add_argument(
            "--progress",
            action="store_true",
            help="always show the progress bar (default: only on long replays)",
        )

    def handle(self, *args: object, verify: bool, progress: bool, **options: object) -> None:
        # the log and the tables as of one instant: on a live cluster, reading the tables
        # after the log saw each move committed in between as a mismatch
        with read_snapshot():
            rebuilt, mismatches = self.read(verify=verify, progress=progress)
        if not verify:
            return
        for mismatch in mismatches:
            self.stdout.write(f"MISMATCH {mismatch}")
        if mismatches:
            raise CommandError(f"{len(mismatches)} mismatch(es) between the log and the tables")
        self.stdout.write(self.style.SUCCESS("projection matches the log"))

    def read(self, *, verify: bool, progress: bool) -> tuple[Rebuilt, list[Mismatch]]:
        total = Transition.objects.count()
        show = progress or total >= PROGRESS_FROM_ROWS
        with tqdm(total=total, unit="rows", disable=not show, file=self.stderr) as bar:
            rebuilt = rebuild_from_log(on_rows=bar.update)
        states = Counter(
            proj.state.value for proj in rebuilt.jobs.values() if proj.state is not None
        )
        summary = ", ".join(f"{state} {n}" for state, n in sorted(states.items())) or "no jobs"
        self.stdout.write(f"replayed {rebuilt.rows} transitions of {len(rebuilt.jobs)} jobs")
        self.stdout.write(f"  {summary}")
        if rebuilt.cluster_rows:
            health = Counter(rebuilt.node_health.values())
            nodes = ", ".join(f"{h} {n}" for h, n in sorted(health.items()))
            self.stdout.write(
                f"  {rebuilt.cluster_rows} node/tenant rows: nodes with rows {nodes or 'none'}; "
                f"{len(rebuilt.tenant_quota)} tenant quota(s) changed"
            )
        return rebuilt, compare_with_tables(rebuilt) if verify else []
