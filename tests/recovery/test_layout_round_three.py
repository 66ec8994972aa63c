"""Issue 27, defect 10, in what the server sends: journal evidence as lines, a problem shown
beside a closed enquiry's state."""

from django.urls import reverse

from intake.models import EnquiryState


def test_journal_evidence_is_lines_not_a_python_dict(story, client_for):
    from django.db import transaction

    from ledger import journal

    op = story.operation("confirmed")
    with transaction.atomic():
        journal.record(
            op.enquiry,
            "ledger.crm_record.closed",
            actor="system:tests",
            evidence={"external_id": "CRM-1", "found": {"ids": ["CRM-1", "CRM-2"]}, "n": None},
        )
    html = client_for("coordinator").get(reverse("recovery:enquiry", args=[op.enquiry.reference]))
    html = html.content.decode()
    assert '<dl class="evidence-lines">' in html
    assert "<dt>external id</dt><dd>CRM-1</dd>" in html
    assert (
        "<dt>found</dt><dd>{&quot;ids&quot;: [&quot;CRM-1&quot;, &quot;CRM-2&quot;]}</dd>" in html
    )
    assert "<dt>n</dt><dd>none</dd>" in html
    assert "{&#x27;" not in html  # Python's repr of a dict


def test_a_confirmed_enquiry_with_a_failed_acknowledgement_says_so_in_its_header(story, client_for):
    enquiry = story.enquiry("confirmed")
    assert enquiry.state == EnquiryState.CONFIRMED
    ack = story.operation("failed", enquiry=enquiry, action="notify.send", integration="notify")
    html = client_for("coordinator").get(reverse("recovery:enquiry", args=[enquiry.reference]))
    head = html.content.decode().split('id="item-head"', 1)[1].split("</h1>", 1)[0]
    assert "Confirmed" in head or "confirmed" in head
    assert f'href="#op-{ack.pk}">Send a message to the resident: failed</a>' in head
