from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "GPU scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Make this project's Celery app the default one, so shared tasks enqueued from web
        # processes use the configured broker.
        from .celery import app

        app.set_default()
        # The early-tick request goes to the broker from the Celery edge: the services
        # only send a signal (services/signals.py), so they never import the tasks.
        from . import tasks
        from .services.signals import early_tick_wanted

        early_tick_wanted.connect(tasks.on_early_tick_wanted,
                                  dispatch_uid="scheduler_app.tasks.early_tick")
