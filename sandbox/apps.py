from django.apps import AppConfig


class SandboxConfig(AppConfig):
    # Registered only so that `manage.py runsandbox` exists; the sandbox has no models.
    name = "sandbox"
    verbose_name = "Sandbox (fake external services)"
