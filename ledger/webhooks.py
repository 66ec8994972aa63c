"""Delivery reports from a mail provider: django-anymail's Mailgun tracking webhook, checked with
Mailgun's HMAC signature AND HTTP basic auth, normalised by anymail, applied by ledger.delivery.

Off (404) until both secrets are set: ``MAILGUN_WEBHOOK_SIGNING_KEY`` (the provider's webhook
signing key) and ``DELIVERY_WEBHOOK_SECRET`` (``user:password``, put in the webhook's URL at the
provider: https://user:password@handover.example.org/delivery/mailgun/). Another provider
anymail supports is one more view like this one (docs/integrations.md, "Delivery reports").
"""

from __future__ import annotations

from anymail.exceptions import AnymailWebhookValidationFailure
from anymail.signals import tracking
from anymail.webhooks.mailgun import MailgunTrackingWebhookView
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.dispatch import receiver
from django.http import Http404
from django.views.decorators.csrf import csrf_exempt

from ledger import delivery


class MailgunReports(MailgunTrackingWebhookView):
    def parse_events(self, request):
        # Signed by the provider, but still not ours to trust blindly: a body anymail cannot
        # read is a 400, never a 500.
        try:
            return super().parse_events(request)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise AnymailWebhookValidationFailure(f"unreadable Mailgun event: {exc!r}") from exc


def configured() -> bool:
    anymail = getattr(settings, "ANYMAIL", {}) or {}
    return bool(anymail.get("MAILGUN_WEBHOOK_SIGNING_KEY") and anymail.get("WEBHOOK_SECRET"))


@csrf_exempt  # signed by the provider (HMAC) and basic auth instead: no browser posts here
@login_not_required
def mailgun_tracking(request):
    if not configured():
        raise Http404("delivery reports are not configured")
    return MailgunReports.as_view()(request)


@receiver(tracking, dispatch_uid="ledger.delivery_report")
def delivery_report(sender, event, esp_name, **kwargs):
    delivery.record_report(
        message_id=event.message_id,
        event=str(event.event_type),
        provider=esp_name,
        description=event.description or "",
        mta_response=event.mta_response or "",
        event_id=event.event_id or "",
    )
