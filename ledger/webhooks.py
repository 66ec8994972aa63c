"""Delivery reports from a mail provider: django-anymail's Mailgun tracking webhook, behind HTTP
basic auth and Mailgun's HMAC signature, normalised by anymail, applied by ledger.delivery.

Off (404) until both secrets are set: ``MAILGUN_WEBHOOK_SIGNING_KEY`` (the provider's webhook
signing key) and ``DELIVERY_WEBHOOK_SECRET`` (``user:password``, put in the webhook's URL at the
provider: https://user:password@handover.example.org/delivery/mailgun/). Another provider
anymail supports is one more view like this one (docs/integrations.md, "Delivery reports").

A request is checked in this order, and nothing later is read before what comes first holds
(ledger.signed_events): basic auth; a JSON object with a ``signature`` block; the signature;
its timestamp within ``DELIVERY_WEBHOOK_WINDOW_SECONDS`` of now; the event as anymail reads it;
its token (the event id) not taken before. A refusal is a 4xx with its reason as JSON
(``{"error": ...}``), never a 5xx; an event already taken answers 200 and does nothing, since
Mailgun retries whatever is not a 2xx.
"""

from __future__ import annotations

import logging

from anymail.exceptions import AnymailWebhookValidationFailure
from anymail.signals import tracking
from anymail.webhooks.base import AnymailBasicAuthMixin
from anymail.webhooks.mailgun import MailgunTrackingWebhookView
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.dispatch import receiver
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from intake.payload import NestedTooDeeply, NotJson, parse_json
from ledger import delivery, storable
from ledger.signed_events import Refused, mailgun_signature, take_once

logger = logging.getLogger("ledger.webhooks")

# What anymail's reading of an event raises on a shape it does not expect (a list where it
# wants an object, a timestamp float() or datetime cannot take, a message id that is a number).
UNREADABLE = (KeyError, ValueError, TypeError, AttributeError, OverflowError, OSError)


def refused(reason: str, status: int = 400) -> JsonResponse:
    logger.info("delivery report refused (%s): %s", status, reason)
    return JsonResponse({"error": reason}, status=status)


def signed_body(request) -> dict:
    """The request's JSON object, with its ``signature`` block an object. Raises Refused."""
    if request.content_type != "application/json":
        raise Refused("Send Mailgun's JSON webhook (Content-Type: application/json).")
    try:
        body = parse_json(request.body.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused("The body is not UTF-8.") from None
    except (NotJson, NestedTooDeeply):
        raise Refused("The body is not a JSON object Handover can read.") from None
    if not isinstance(body, dict) or not isinstance(body.get("signature"), dict):
        raise Refused('The body has no "signature" object.')
    if body.duplicates or body["signature"].duplicates:
        raise Refused("A key appears more than once in the body or its signature.")
    return body


class MailgunReports(MailgunTrackingWebhookView):
    def post(self, request, *args, **kwargs):
        try:
            AnymailBasicAuthMixin.validate_request(self, request)
            body = signed_body(request)
            block = body["signature"]
            signed_at = mailgun_signature(
                block.get("timestamp"),
                block.get("token"),
                block.get("signature"),
                key=self.webhook_signing_key.decode("ascii"),
            )
            try:
                event = self.esp_to_anymail_event(body)
            except UNREADABLE as exc:
                raise Refused(f"The event cannot be read ({type(exc).__name__}).") from None
        except AnymailWebhookValidationFailure:
            return refused("Missing or wrong basic auth.")
        except RequestDataTooBig:
            return refused("The body is too large.", status=413)
        except Refused as exc:
            return refused(str(exc))
        with transaction.atomic():
            if not take_once(self.esp_name, block["token"], signed_at):
                return JsonResponse({"status": "already taken"})
            self.signal.send(sender=self.__class__, event=event, esp_name=self.esp_name)
        return JsonResponse({"status": "taken"})


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
    # Whatever the provider put in these (a NUL, a lone surrogate, a number, an object), what
    # reaches the database is text PostgreSQL stores: the report is recorded, not lost.
    delivery.record_report(
        message_id=storable.text(event.message_id, 998) if event.message_id else "",
        event=storable.text(event.event_type, 40),
        provider=storable.text(esp_name, 40),
        description=storable.text(event.description, 500),
        mta_response=storable.text(event.mta_response, 500),
        event_id=storable.text(event.event_id, 200),
    )
