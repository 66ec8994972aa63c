from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self):
        from config import checks  # noqa: F401  (registers the timeout-order check)
        from ledger import (
            journal,  # noqa: F401  (journals every transition)
            kinds,  # noqa: F401  (registers every kind of destination with the model)
            receivers,  # noqa: F401  (listens to intake's signals, worker start)
            webhooks,  # noqa: F401  (delivery reports: anymail's tracking signal)
        )
