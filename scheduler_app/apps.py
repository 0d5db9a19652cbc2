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
