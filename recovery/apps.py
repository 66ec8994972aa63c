from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RecoveryConfig(AppConfig):
    name = "recovery"
    verbose_name = "Recovery"

    def ready(self):
        from recovery import checks  # noqa: F401  (registers the readiness checks)
        from recovery.roles import ensure_roles

        # After auth's own post_migrate handler has made the permissions (auth is installed
        # first), remake any role group a flush emptied.
        post_migrate.connect(ensure_roles, sender=self, dispatch_uid="recovery.ensure_roles")
