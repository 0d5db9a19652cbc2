"""The Celery application: worker and beat run `celery -A scheduler_app.celery:app ...`.

Configuration comes from Django settings prefixed with ``CELERY_`` (so ``CELERY_BROKER_URL``
is the broker). Tasks live in ``tasks.py`` modules of installed apps and are autodiscovered.
Kept out of ``scheduler_app/__init__.py`` on purpose: importing ``scheduler_app.core`` (the
pure scheduling core, also used by the simulator) must not pull in Celery or Django. Django
processes bind this app as the default in ``SchedulerAppConfig.ready``.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_app.settings")

app = Celery("scheduler_app")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="scheduler_app.ping")
def ping() -> str:
    """Worker liveness: `celery -A scheduler_app.celery:app call scheduler_app.ping`."""
    return "pong"
