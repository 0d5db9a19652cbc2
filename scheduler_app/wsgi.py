"""WSGI entry point (gunicorn scheduler_app.wsgi:application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_app.settings")

application = get_wsgi_application()
