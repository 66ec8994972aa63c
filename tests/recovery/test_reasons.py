"""A reason must hold visible text: one made of spaces, zero-width, control or format characters
reads as blank in the journal, so the form refuses it and so does every service that takes one.
"""

from html import unescape

import pytest
from django.urls import reverse

from intake import services as intake_services
from intake.visible import has_visible_text
from ledger import services as ledger_services
from ledger.services import ActionRefused as LedgerRefused
from tests.recovery.test_actions import messages_of, snapshot

INVISIBLE = [
    "\u200b",  # zero width space
    "\u2060\ufeff",  # word joiner, zero width no-break space
    " \u00ad\u200d\u200c ",  # soft hyphen, zero width (non-)joiner
    "\u3000\u2028\t",  # ideographic space, line separator, tab
    "\u0301\u0308",  # combining marks with nothing to sit on
    "\x01\x7f\u202e",  # control characters and a bidi override
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_invisible_text_is_not_visible(text):
    assert not has_visible_text(text)


@pytest.mark.parametrize("text", ["ok", "é", "—", "5", "😀", "\u200bcustomer rang\u200b", "日本"])
def test_visible_text_is(text):
    assert has_visible_text(text)


@pytest.mark.parametrize("text", INVISIBLE)
def test_the_console_refuses_an_invisible_reason(story, client_for, text):
    op = story.operation("unknown", attention="lookup_failed")
    enquiry = story.enquiry("ready_for_review")
    before = snapshot()
    for role, url in [
        ("coordinator", reverse("recovery:op-reconcile", args=[op.pk])),
        ("reviewer", reverse("recovery:enquiry-reject", args=[enquiry.reference])),
        ("admin", reverse("recovery:pause", args=["crm"])),
    ]:
        response = client_for(role).post(url, {"reason": text})
        # A refused operation action is shown in its card (422), the others as a message.
        assert response.status_code in (302, 422), url
        said = " ".join(messages_of(response))
        if response.status_code == 422:
            said += unescape(response.content.decode())
        # All-whitespace is stripped to nothing: then it is the "required" refusal.
        assert any(w in said for w in ("invisible characters", "visible text", "Give a reason")), (
            url
        )
    assert snapshot() == before


@pytest.mark.parametrize("text", INVISIBLE)
def test_the_services_refuse_an_invisible_reason(story, people, text):
    op = story.operation("unknown", attention="lookup_failed")
    enquiry = story.enquiry("ready_for_review")
    before = snapshot()
    with pytest.raises(LedgerRefused):
        ledger_services.reconcile_now(op.pk, actor=people["admin"], reason=text)
    with pytest.raises(LedgerRefused):
        ledger_services.pause_integration("crm", actor=people["admin"], reason=text)
    with pytest.raises(LedgerRefused):
        ledger_services.approve_revision(enquiry.pk, actor=people["admin"], reason=text)
    with pytest.raises(intake_services.ActionRefused):
        intake_services.reject_enquiry(enquiry.pk, actor=people["admin"], reason=text)
    with pytest.raises(intake_services.ActionRefused):
        intake_services.revise_enquiry(
            enquiry.pk, actor=people["admin"], reason=text, fields={"subject": "New"}
        )
    assert snapshot() == before
