"""Issue 27, defect 9: the console's words. Each test reads what a person reads."""

from html import unescape

from django.urls import reverse

from intake import services as intake_services
from intake.models import Revision
from ledger.models import Integration
from tests.recovery.test_integration_settings import form_data


def test_a_refusal_names_the_button_not_a_glued_sentence(story, client_for):
    enquiry = story.enquiry("needs_information")
    response = client_for("reviewer").post(
        reverse("recovery:enquiry-approve", args=[enquiry.reference]), {"reason": "ok"}
    )
    html = unescape(response.content.decode())
    assert "“Approve revision” is not possible now: the enquiry is needs information." in html
    assert "You cannot approve revision" not in html


def test_a_label_inside_a_sentence_keeps_its_capitals(story, client_for):
    op = story.operation("confirmed")
    html = client_for("coordinator").get(reverse("recovery:enquiry", args=[op.enquiry.reference]))
    html = html.content.decode()
    assert "(create the enquiry in the CRM)" in html
    assert "in the crm" not in html


def test_the_settings_form_says_what_a_number_means(client_for, integrations_rows):
    crm = integrations_rows["crm"]
    client = client_for("admin")
    url = reverse("recovery:integration-settings", args=["crm"])
    page = client.get(url).content.decode()
    assert "Empty or 0: no limit." in page
    refused = client.post(url, form_data(crm, max_requests_per_second="-1", max_in_flight="0"))
    html = unescape(refused.content.decode())
    assert refused.status_code == 400
    assert "Ensure this value" not in html
    assert "(0 or empty: no limit)" in html  # the one rule for a rate, ledger.limits
    assert "Calls in flight at once: a whole number, 1 or more; empty means no limit." in html

    saved = client.post(url, form_data(crm, max_requests_per_second="20"))
    assert saved.status_code == 302
    assert Integration.objects.get(pk=crm.pk).max_requests_per_second == 20.0
    history = unescape(client.get(url).content.decode())
    assert "no limit → 20<" in history and "20.0" not in history


def test_bulk_results_say_what_an_enquiry_item_is(story, client_for, people):
    enquiry = story.enquiry("needs_information")
    admin = client_for("admin")
    moved = admin.post(
        reverse("recovery:bulk"),
        {
            "action": "reassign",
            "reason": "Ana covers today",
            "owner": people["reviewer"].pk,
            "item": [f"enquiry:{enquiry.reference}"],
        },
    )
    html = unescape(admin.get(moved["Location"]).content.decode())
    assert "<td>The enquiry itself (needs information)</td>" in html


def test_edited_only_when_a_person_edited(story, client_for, people):
    by_suggester = story.enquiry("ready_for_review", reference="ENQ-SUGG")
    Revision.objects.create(enquiry=by_suggester, number=2, fields={"message": "x"})
    by_suggester.__class__.objects.filter(pk=by_suggester.pk).update(current_revision=2)
    by_person = story.enquiry("ready_for_review", reference="ENQ-PERS")
    intake_services.revise_enquiry(
        by_person.pk, actor=people["admin"], reason="phone", fields={"phone": "+44 1"}
    )
    html = client_for("reviewer").get(reverse("recovery:review")).content.decode()
    suggester_row = html[html.index("ENQ-SUGG") :][:400]
    person_row = html[html.index("ENQ-PERS") :][:400]
    assert "edited" not in suggester_row
    assert "revision 2, edited by the-admin" in person_row


def test_the_service_hint_is_shown_as_the_category_it_names(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    Revision.objects.filter(enquiry=enquiry, number=1).update(
        fields={"message": enquiry.message, "service_hint": "waste"}
    )
    html = unescape(
        client_for("reviewer")
        .get(reverse("recovery:review-item", args=[enquiry.reference]))
        .content.decode()
    )
    assert "<dt>service asked for</dt><dd>Bins and waste (the form sent “waste”)</dd>" in html
