"""WSGI entry point (gunicorn scheduler_app.wsgi:application)."""

import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_app.settings")

application = get_wsgi_application()

# Django, DRF and the app are loaded: some 100,000 objects that live as long as the
# process. Frozen, the cyclic collector's full passes skip them; otherwise each one walks
# them all (tens of milliseconds, now and then in the middle of a request) while a
# request makes only short-lived garbage (bench/submit_cost.py measures both).
gc.freeze()
