"""The category suggester: intake's configured provider, run in a worker, never in a request.

Not HTTP through ledger.http: intake owns its providers (a keyword provider in process, or an
OpenAI-compatible endpoint), and intake never imports the ledger. What the ledger adds is the
operation around it: bounded retry, then ``unresolved``.
"""

from ledger import failpoints
from ledger.connectors.base import CallResult, Connector, ConnectorError, LookupResult


class SuggesterConnector(Connector):
    """``retry_budget``: attempts before ``unresolved``, handed over by the policy that runs it
    in process (ledger.policies.connector_for): a connector reads no policy."""

    def __init__(self, integration=None, *, retry_budget: int = 1):
        super().__init__(integration)
        self.retry_budget = retry_budget

    def request_summary(self, operation):
        return {**super().request_summary(operation), "revision": operation.revision}

    def call(self, operation):
        from intake import services as intake_services

        # Bounded retry, then `unresolved`: while budget remains a retryable provider error
        # comes back to the ledger; the last attempt lets intake store it as unresolved.
        last_attempt = operation.budget_used >= self.retry_budget
        try:
            suggestion = intake_services.suggest_category(
                operation.enquiry, raise_retryable=not last_attempt
            )
        except Exception as exc:
            raise ConnectorError("transient", f"suggester failed: {exc}") from exc
        failpoints.hit("after_model_returns")
        return CallResult(
            None,
            str(suggestion.pk or ""),
            "",
            {"label": suggestion.label, "validation": suggestion.validation},
        )

    def lookup(self, operation):
        # "Is a suggestion for this revision already stored?"
        from intake.models import Suggestion

        stored = Suggestion.objects.filter(
            enquiry_id=operation.enquiry_id, revision=operation.revision
        ).order_by("-created_at")
        found = [{"id": s.pk, "label": s.label} for s in stored[:1]]
        return LookupResult(found=found)
