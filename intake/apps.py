from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "intake"
    verbose_name = "Intake"

    def ready(self):
        from intake import (
            checks,  # noqa: F401  (registers the configuration checks)
            workflow,  # noqa: F401  (registers the transition guard)
        )
