"""The review page's documents card (recovery.views.documents): the fields read, the version and
a link to it, a reviewer's correction (journalled, a new revision) and a new read."""

import pytest

from intake.models import Document
from ledger.models import Integration, JournalEntry, Operation

pytestmark = pytest.mark.django_db

LONG = "Flat 4, " + "Very Long Street Name " * 30
HOSTILE = '<script>alert("x")</script>&amp;'


@pytest.fixture
def form(story):
    Integration.objects.filter(name="documents").update(
        kind="webdav", base_url="https://owner:pw@dav.example.org/share/enquiries"
    )

    def make(state="ready_for_review", **extracted):
        enquiry = story.enquiry(state)
        return Document.objects.create(
            enquiry=enquiry,
            document_id="permit-17.pdf",
            version="2146807-1796171100-789",
            status="extracted",
            content_type="application/pdf",
            extracted=extracted
            or {"permit": "P-17", "address": LONG, "notes": HOSTILE, "ward": ""},
        )

    return make


def review_url(document):
    return f"/console/review/{document.enquiry.reference}/"


def correct_url(document):
    return f"{review_url(document)}documents/{document.pk}/correct/"


def test_the_review_page_shows_each_field_read_with_the_version_and_a_link(client_for, form):
    document = form()
    page = client_for("reviewer").get(review_url(document)).content.decode()
    assert "permit-17.pdf" in page and "2146807-1796171100-789" in page
    # The link to the document, never with the credentials the address carries.
    assert 'href="https://dav.example.org/share/enquiries/permit-17.pdf"' in page
    assert "owner:pw" not in page
    assert "P-17" in page and LONG in page
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert 'action="' + correct_url(document) + '"' in page


def test_a_correction_is_saved_journalled_and_shown_as_the_value_used(client_for, form):
    document = form()
    client = client_for("reviewer")
    response = client.post(
        correct_url(document), {"field": "ward", "value": "North", "reason": "on the form"}
    )
    assert response.status_code == 302
    assert response["Location"].endswith(f"#doc-{document.pk}")
    document.refresh_from_db()
    assert document.fields["ward"] == "North" and document.extracted["ward"] == ""
    assert JournalEntry.objects.filter(action="intake.document.corrected").count() == 1
    assert document.enquiry.revisions.count() == 2
    page = client.get(review_url(document)).content.decode()
    assert "corrected</span>" in page and "<ins>North</ins>" in page
    assert "Corrected ward of permit-17.pdf" in page


@pytest.mark.parametrize(
    "data, error",
    [
        ({"field": "ward", "value": "North", "reason": ""}, "reason"),
        ({"field": "no-such", "value": "North", "reason": "r"}, "Choose one of the fields"),
        ({"field": "ward", "value": "N" * 2001, "reason": "r"}, "at most 2000 characters"),
    ],
)
def test_a_refused_correction_comes_back_open_with_what_was_typed(client_for, form, data, error):
    document = form()
    response = client_for("reviewer").post(correct_url(document), data)
    assert response.status_code == 422
    page = response.content.decode()
    assert error in page and '<details class="action" open>' in page
    document.refresh_from_db()
    assert document.corrected == {}


def test_after_sending_a_correction_is_refused_409(client_for, form):
    document = form(state="submitted")
    response = client_for("reviewer").post(
        correct_url(document), {"field": "ward", "value": "North", "reason": "r"}
    )
    assert response.status_code == 409
    assert "can no longer be corrected" in response.content.decode()
    document.refresh_from_db()
    assert document.corrected == {}


def test_only_a_reviewer_may_correct_and_get_changes_nothing(client_for, form):
    document = form()
    data = {"field": "ward", "value": "North", "reason": "r"}
    assert client_for("coordinator").post(correct_url(document), data).status_code == 403
    assert client_for("reviewer").get(correct_url(document)).status_code == 405
    document.refresh_from_db()
    assert document.corrected == {}


def test_read_again_proposes_one_read_of_the_same_version_per_revision(client_for, form):
    document = form()
    client = client_for("reviewer")
    url = f"{review_url(document)}documents/{document.pk}/reprocess/"
    assert client.post(url, {"reason": "extractor updated"}).status_code == 302
    op = Operation.objects.get(action="documents.extract")
    assert op.payload == {"document_id": "permit-17.pdf", "version": "2146807-1796171100-789"}
    again = client.post(url, {"reason": "once more"})
    assert again.status_code == 409
    assert "already read for revision 1" in again.content.decode()
    assert Operation.objects.filter(action="documents.extract").count() == 1


def test_a_document_not_read_says_so_and_invents_nothing(client_for, story):
    enquiry = story.enquiry()
    Document.objects.create(
        enquiry=enquiry,
        document_id="gone.pdf",
        version="1",
        status="access_denied",
        error="401: Not authorized",
    )
    page = client_for("reviewer").get(f"/console/review/{enquiry.reference}/").content.decode()
    assert "access removed" in page and "nothing is made up in its place" in page
    assert "Correct a field" not in page


def test_a_changed_documents_failed_read_offers_no_retry_it_would_only_fail_again(story):
    from recovery.explain import retry_advised

    changed = story.operation(
        "failed", action="documents.extract", integration="documents", attention="document_changed"
    )
    denied = story.operation(
        "failed", action="documents.extract", integration="documents", attention="access_denied"
    )
    assert retry_advised(changed) is False
    assert retry_advised(denied) is True  # once access is restored, the same version is read


def test_a_document_too_large_to_read_says_so_on_the_card_with_no_retry(client_for, story):
    """What the webdav read records for a document past its limits (tests/ledger/
    test_webdav_connector.py) is what the reviewer reads on the documents card; a retry would
    only refuse it again, so none is advised."""
    from recovery.explain import retry_advised

    enquiry = story.enquiry()
    words = (
        "statement.pdf version 5: too large to read: page 1's content is 4,194,295 bytes "
        "decoded (at most 1,048,576 are read)"
    )
    Document.objects.create(
        enquiry=enquiry, document_id="statement.pdf", version="5", status="failed", error=words
    )
    page = client_for("reviewer").get(f"/console/review/{enquiry.reference}/").content.decode()
    card = page[page.index('id="documents"') :]
    assert "too large to read: page 1&#x27;s content is 4,194,295 bytes decoded" in card
    assert "Correct a field" not in card
    read = story.operation(
        "failed", action="documents.extract", integration="documents", attention="invalid"
    )
    assert retry_advised(read) is False


def test_the_item_page_links_fields_and_corrections_only_for_who_may_open_them(client_for, form):
    """The review page is a reviewer's: a coordinator is not shown a link that answers 403."""
    document = form()
    item = f"/console/enquiries/{document.enquiry.reference}/"
    link = f'href="{review_url(document)}#documents"'
    coordinator = client_for("coordinator")
    page = coordinator.get(item).content.decode()
    assert "permit-17.pdf" in page and link not in page
    assert coordinator.get(review_url(document)).status_code == 403
    page = client_for("reviewer").get(item).content.decode()
    assert link in page
    assert client_for("reviewer").get(review_url(document)).status_code == 200
