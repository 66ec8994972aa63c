"""The enquiry search: a reference first, then the words of name, e-mail, subject and message
(PostgreSQL full-text search on the ``enquiry_search`` index); no input is an error."""

import pytest
from django.db import connection
from django.urls import reverse

from intake.models import Enquiry
from recovery.views.queue import search


@pytest.fixture
def found(client_for):
    client = client_for("coordinator")

    def get(q, **params):
        response = client.get(reverse("recovery:enquiries"), {"q": q, **params})
        assert response.status_code == 200
        return [e.reference for e in response.context["enquiries"]]

    return get


def test_words_of_name_email_subject_and_message_are_found(story, found):
    bins = story.enquiry(
        "ready_for_review",
        name="Agnieszka Kowalska",
        subject="Bin not collected",
        message="The green bin on Mill Lane was missed again.",
        email="a.kowalska@example.org",
    )
    story.enquiry(
        "needs_information",
        name="Bob",
        subject="Parking permit",
        message="I need a visitor permit.",
        email="bob@example.org",
    )
    assert found("kowalska") == [bins.reference]
    assert found("a.kowalska@example.org") == [bins.reference]
    assert found("collected") == [bins.reference]
    assert found("mill lane") == [bins.reference]
    assert found('"green bin"') == [bins.reference]
    assert found("permit -visitor") == []
    assert found("nothing-like-this") == []


def test_a_reference_comes_first_then_newest_words(story, found):
    wanted = story.enquiry("needs_information", message="Please call me back.")
    newer = story.enquiry("ready_for_review", message=f"Same as {wanted.reference}, again.")
    assert found(wanted.reference) == [wanted.reference, newer.reference]
    assert found(wanted.reference.lower()) == [wanted.reference, newer.reference]
    # The start of a reference, with or without its ENQ- prefix.
    assert found(wanted.reference[:7].lower())[0] == wanted.reference
    assert found(wanted.reference[4:9])[0] == wanted.reference


def test_state_filter_combines_with_words(story, found):
    a = story.enquiry("needs_information", subject="Pothole on Station Road")
    story.enquiry("ready_for_review", subject="Pothole again")
    assert found("pothole", state="needs_information") == [a.reference]


@pytest.mark.parametrize(
    "q",
    [
        "\x00",
        "a\x00b",
        "'",
        '"',
        "&|!:*()<->",
        "!!!",
        "-",
        "x" * 5000,
        "<script>alert(1)</script>",
        "\\",
        "%",
        "_",
        "ENQ-",
        "²",
    ],
)
def test_hostile_input_is_never_an_error(story, found, q):
    story.enquiry("ready_for_review", subject="x")
    found(q)  # asserts 200


def test_the_search_reads_the_gin_index(story):
    """The query's expression must be the index's exactly, or PostgreSQL reads every row."""
    story.enquiry("ready_for_review", subject="Bin")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    _references, words = search(Enquiry.objects.all(), "bin")
    assert "enquiry_search" in words.explain()
    assert "_like" in Enquiry.objects.filter(reference__startswith="ENQ-AB").explain()


def test_a_redacted_enquiry_is_no_longer_found_by_its_personal_words(story, found):
    """search_vector is computed by PostgreSQL from the columns: the purge's redaction (one
    save of the personal fields) takes the words out of the search with no second write."""
    from django.utils import timezone

    from intake.retention import redact_enquiry

    enquiry = story.enquiry("confirmed", name="Zbigniew Brzęczyszczykiewicz", subject="Bins")
    assert found("brzęczyszczykiewicz") == [enquiry.reference]
    redact_enquiry(Enquiry.objects.get(pk=enquiry.pk), now=timezone.now())
    assert found("brzęczyszczykiewicz") == []
    assert found(enquiry.reference) == [enquiry.reference]  # the reference is kept
