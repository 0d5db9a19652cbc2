from __future__ import annotations

from django.db import models

from .jobs import Job


class Reservation(models.Model):
    """One of the core's current reservations (``Scheduler.reservations()``), as the
    leader published it after its last tick: not a projection of the log, and not
    replayed from it. A leader that rebuilds its state restores the plans from here
    (``Scheduler.restore_reservations``): a reservation is a promise the next leader
    keeps, and the same state makes the same decisions whoever leads.

    The leader rewrites the whole table, only when the list changed, in the same fenced
    transaction as the tick's decisions: a stale leader publishes nothing, and a reader
    sees one tick's list, whole. ``position`` keeps the core's order: the backfill
    reservation first, then the reclaim claims (nodes promised to entitled heads while
    their victims checkpoint), by submit order.
    """

    class Kind(models.TextChoices):
        RESERVATION = "reservation", "reservation"
        RECLAIM = "reclaim", "reclaim"

    position = models.PositiveIntegerField(unique=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="reservations")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    #: When the job starts by the plan (reclaim: when its last victim's grace ends). Null:
    #: a reclaim whose victims' ends are unknown.
    start_at = models.DateTimeField(null=True, blank=True)
    #: GPUs held for the job: the reservation's allocation, or the claim's GPUs.
    gpus = models.PositiveIntegerField()
    #: Names of the nodes held for it, sorted.
    nodes = models.JSONField(default=list)
    #: Reclaim: primary keys of the jobs being preempted for it.
    victims = models.JSONField(default=list, blank=True)
    #: The plan's sentence (reservation), or why the victims were chosen (reclaim).
    basis = models.TextField(blank=True, default="")
    #: Reservation: the plan itself, for a leader that rebuilds (the backfill it
    #: constrains must not change with who leads): ``alloc`` (node -> GPU indices),
    #: ``planned_at_s`` (when it was last planned afresh), ``checked_at_s`` (when it was
    #: last planned afresh and kept as it was, or null), ``looked_sig`` (the core's
    #: ``plan_inputs()`` at its last look, or null) and ``after_job``. Reclaim: ``at_s``
    #: (when the claim was made): a leader that rebuilds restores the claim from this row
    #: once its victims have all stopped (``services.leader.restore_claims``).
    plan = models.JSONField(default=dict, blank=True)
    tick_id = models.CharField(max_length=64, blank=True, default="")
    published_at = models.DateTimeField()

    class Meta:
        ordering = ["position"]

    def __str__(self) -> str:
        return f"{self.kind} for job {self.job_id} at {self.start_at}"
