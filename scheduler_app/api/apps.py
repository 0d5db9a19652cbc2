from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "scheduler_app.api"
    label = "api"
    verbose_name = "GPU scheduler API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # registers the token scheme with drf-spectacular (an import side effect)
        from . import schema  # noqa: F401
        from .cache import connect_signals

        connect_signals()  # the API's caches forget what this process changes
