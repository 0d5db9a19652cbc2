"""``manage.py replay --verify`` reads the log and the tables in one snapshot.

On a live cluster it used to read the log, then the tables a moment later: every move
committed in between (a job placed, started, submitted) was reported as a mismatch and
the command exited 1 on a consistent database (found by a user session, 2026-12-07).
Here a writer commits through the services between the replay's read of the log and its
read of the tables; the replay must not see it, and still passes.
"""

from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections

from scheduler_app.management.commands import replay as replay_command
from scheduler_app.models import Job
from scheduler_app.services import job_submit
from scheduler_app.services.transitions import now_s
from tests.foundation.factories import NodeFactory, TenantFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_a_write_committed_between_the_log_and_the_tables_is_not_a_mismatch(monkeypatch):
    NodeFactory()
    tenant = TenantFactory(guaranteed_gpus=8)
    job_submit(tenant=tenant, name="before", gpus=1, at=now_s())
    real_compare = replay_command.compare_with_tables
    written: list[int] = []
    levels: list[tuple[str, str]] = []

    def write_meanwhile() -> None:
        try:
            written.append(job_submit(tenant=tenant, name="meanwhile", gpus=1, at=now_s()).pk)
        finally:
            connections.close_all()  # this thread's connection

    def compare_after_a_concurrent_write(rebuilt):
        writer = threading.Thread(target=write_meanwhile)
        writer.start()
        writer.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('transaction_isolation'), "
                           "current_setting('transaction_read_only')")
            levels.append(cursor.fetchone())
        return real_compare(rebuilt)

    monkeypatch.setattr(replay_command, "compare_with_tables",
                        compare_after_a_concurrent_write)
    out = StringIO()
    call_command("replay", "--verify", stdout=out)  # raised CommandError: 1 mismatch

    assert written and Job.objects.filter(pk=written[0]).exists()  # it did commit
    assert levels == [("repeatable read", "on")]
    assert "projection matches the log" in out.getvalue()
    assert "replayed 2 transitions of 1 jobs" in out.getvalue()
    # and a replay after it sees the new job, in the log and the tables alike
    out = StringIO()
    monkeypatch.setattr(replay_command, "compare_with_tables", real_compare)
    call_command("replay", "--verify", stdout=out)
    assert "of 2 jobs" in out.getvalue() and "projection matches the log" in out.getvalue()
