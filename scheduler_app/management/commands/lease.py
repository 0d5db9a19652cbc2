"""``manage.py lease [--release]``: show the leader lease, or free it.

Every scheduler waits (standby) while another holder's lease is unexpired. A lease whose
holder is gone expires by itself within ``SCHEDULER_LEASE_TTL_S``; one that will not (a
row edited by hand with an expiry years away, a clock gone wrong) is freed here:
``--release`` clears its holder and expiry (logged, with ``--why``), and the next tick of
any scheduler takes it with the next fencing token, so a former holder still alive
writes nothing more. docs/operations.md, "The lease is stuck".
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from scheduler_app.models import Lease
from scheduler_app.services.lease import LEADER_LEASE, lease_force_release


class Command(BaseCommand):
    help = "Show the scheduler's leader lease; --release frees it (logged)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=LEADER_LEASE, help="the lease (default: %(default)s)")
        parser.add_argument("--release", action="store_true",
                            help="free the lease whoever holds it: a scheduler takes it at its "
                                 "next tick")
        parser.add_argument("--why", default="", help="recorded in the log line")
        parser.add_argument("--by", default="",
                            help="who releases it, for the log (default: the login name)")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"]
        if options["release"]:
            by = options["by"] or _login()
            before = lease_force_release(name=name, actor_name=by, why=options["why"])
            if before is None:
                raise CommandError(f"no lease named {name!r}")
            self.stdout.write(f"released lease {name} (was {_describe(before)}); a scheduler "
                              "takes it at its next tick")
            return
        lease = Lease.objects.filter(name=name).first()
        if lease is None:
            self.stdout.write(f"lease {name}: none yet (no scheduler has ticked)")
            return
        self.stdout.write(f"lease {name}: {_describe(lease)}")


def _describe(lease: Lease) -> str:
    if not lease.holder:
        return f"free (token {lease.fencing_token})"
    left = ""
    if lease.expires_at is not None:
        seconds = int((lease.expires_at - timezone.now()).total_seconds())
        left = f", expires in {seconds} s" if seconds >= 0 else f", expired {-seconds} s ago"
    return f"held by {lease.holder} with token {lease.fencing_token}{left}"


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "manage.py lease"
