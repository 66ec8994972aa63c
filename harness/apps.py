from django.apps import AppConfig


class HarnessConfig(AppConfig):
    # Registered only so that `manage.py drill` exists; the harness has no models.
    name = "harness"
    verbose_name = "Harness (test equipment: the drill, the fault proxy, BottleCRM)"
