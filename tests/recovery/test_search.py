"""The enquiry search: a reference first, then the words of name, e-mail, subject and message
(PostgreSQL full-text search on the ``enquiry_search`` index); no input is an error."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
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


def test_a_reference_is_looked_up_by_a_start_of_three_characters_or_more(story, found):
    wanted = story.enquiry("ready_for_review", reference="ENQ-BX7KQ2MA", message="Nothing here.")
    # One or two characters are the start of a sixteenth of every reference: none is listed.
    assert found("b") == []
    assert found("enq-bx") == []
    assert found("bx7") == [wanted.reference]
    assert found("ENQ-BX7") == [wanted.reference]
    assert found("enq-bx7kq2ma") == [wanted.reference]


def test_state_filter_combines_with_words(story, found):
    a = story.enquiry("needs_information", subject="Pothole on Station Road")
    story.enquiry("ready_for_review", subject="Pothole again")
    assert found("pothole", state="needs_information") == [a.reference]


@pytest.mark.parametrize(
    "q",
    [
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


@pytest.mark.parametrize("q", ["\x00", "a\x00b"])
def test_a_nul_in_the_search_is_refused_plainly(story, client_for, q):
    """PostgreSQL text cannot hold NUL: config.inputs answers 400 before the view runs."""
    response = client_for("coordinator").get(reverse("recovery:enquiries"), {"q": q})
    assert response.status_code == 400


def test_the_search_reads_the_gin_index(story):
    """The query's expression must be the index's exactly, or PostgreSQL reads every row."""
    story.enquiry("ready_for_review", subject="Bin")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    _references, words = search(Enquiry.objects.all(), "bin")
    # Without the page's order: with a handful of rows the planner may as well walk the
    # created_at index; what matters is that the match itself can read enquiry_search.
    assert "enquiry_search" in words.order_by().explain()
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


def test_accents_are_ignored_both_ways(story, found):
    # Issue 27, defect 4: "Zoë Müller" was found by none of these.
    zoe = story.enquiry("ready_for_review", name="Zoë Müller", email="zoe@example.org")
    plain = story.enquiry("ready_for_review", name="Zoe Muller", email="zm@example.net")
    for q in ["Zoë", "Zoe", "zoe", "Müller", "Muller", "MÜLLER", "zoe muller", "Zoë Müller"]:
        assert set(found(q)) == {zoe.reference, plain.reference}, q
    assert found("Zoë Müller", state="ready_for_review")
    polish = story.enquiry("needs_information", name="Łukasz Żółć", subject="Große Straße")
    assert found("lukasz zolc") == [polish.reference]
    assert found("strasse grosse") == [polish.reference]


def test_words_match_by_their_start(story, found):
    brown = story.enquiry(
        "ready_for_review",
        name="Ann Brown",
        subject="No heating since Tuesday",
        message="The boiler is broken.",
        email="ann.brown@heatwave-mail.co.uk",
    )
    story.enquiry("ready_for_review", name="Zed", subject="Bins", message="Abroad.")
    assert found("bro") == [brown.reference]  # Brown, broken; never "abroad"
    assert found("heat") == [brown.reference]
    assert found("Tues boil") == [brown.reference]
    assert found('"no heat"') == [brown.reference]  # a quoted phrase of starts
    assert found("bro -heat") == []


def test_an_email_address_is_found_by_its_parts_and_domain(story, found):
    ann = story.enquiry("ready_for_review", name="Ann", email="ann.o-neill+bins@council.gov.uk")
    story.enquiry("ready_for_review", name="Bob", email="bob@example.org")
    for q in [
        "ann.o-neill+bins@council.gov.uk",
        "council.gov.uk",
        "council",
        "coun",
        "neill",
        "@council.gov.uk",
        "ann.o-neill",
    ]:
        assert found(q) == [ann.reference], q


def test_a_one_letter_word_is_matched_whole(story, found):
    a = story.enquiry("ready_for_review", subject="Plan B", message="b")
    story.enquiry("ready_for_review", subject="Bins", message="broken")
    assert found("b") == [a.reference]


def test_a_search_reads_its_first_eight_words_and_says_so(story, client_for):
    wanted = story.enquiry("ready_for_review", message="one two three four five six seven eight")
    q = "one two three four five six seven eight nine ten"
    response = client_for("coordinator").get(reverse("recovery:enquiries"), {"q": q})
    assert [e.reference for e in response.context["enquiries"]] == [wanted.reference]
    assert "first 8 words: “nine ten” was left out" in response.content.decode()
    assert response.context["q"] == "one two three four five six seven eight"


def test_many_matches_are_paged_newest_first_by_walking_created_at(story, found, monkeypatch):
    """Above FEW_MATCHES the page is read with the vector outside the index (walked_matches):
    the same rows, newest first, references listed once, the state filter kept."""
    from recovery.views import queue

    monkeypatch.setattr(queue, "FEW_MATCHES", 0)
    older = story.enquiry("ready_for_review", name="Anna Kowalska", message="Bin missed.")
    newer = story.enquiry("needs_information", name="Anna Kowalski", message="Bin again.")
    story.enquiry("ready_for_review", name="Ben Nowak", message="Parking.")
    Enquiry.objects.filter(pk=older.pk).update(created_at=newer.created_at.replace(year=2020))
    assert found("anna kow") == [newer.reference, older.reference]
    assert found("bin", state="ready_for_review") == [older.reference]
    cited = story.enquiry("ready_for_review", message=f"About {older.reference}: bin.")
    assert found(older.reference) == [older.reference, cited.reference]


def copies(enquiry, number: int, *, after: int = 0) -> None:
    """``number`` copies of ``enquiry`` (its words), the ``after + i``-th one ``after + i``
    minutes older, in one INSERT: a thousand enquiries through the model would take a minute."""
    columns = [
        f.column
        for f in Enquiry._meta.concrete_fields
        if not f.generated and f.column not in ("id", "reference", "created_at")
    ]
    listed = ", ".join(columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO intake_enquiry (id, reference, created_at, {listed})"
            f" SELECT gen_random_uuid(), 'ENQ-C' || lpad(i::text, 6, '0'),"
            f" e.created_at - i * interval '1 minute', {listed}"
            " FROM intake_enquiry e, generate_series(%s, %s) i WHERE e.id = %s",
            [after + 1, after + number, enquiry.pk],
        )


def test_the_count_is_exact_to_a_thousand_then_says_a_thousand_plus(story, client_for):
    """A coordinator refines a search long before a thousand matches; counting further reads
    the heap for each match. Past SEARCH_COUNT_CAP the page says "1,000+ found" and still lists
    the newest fifty, walked (walked_matches) since the count cannot say how few there are."""
    client = client_for("coordinator")
    newest = story.enquiry("ready_for_review", name="Anna Kowalska", message="Bin missed.")
    copies(newest, 999)

    def page(q):
        response = client.get(reverse("recovery:enquiries"), {"q": q})
        assert response.status_code == 200
        return response

    exact = page("kowalska")
    assert exact.context["count"] == 1_000 and not exact.context["page"].paginator.more
    assert "<strong>1,000</strong> found" in exact.content.decode()

    copies(newest, 1, after=999)  # a thousand and one
    with CaptureQueriesContext(connection) as queries:
        capped = page("kowalska")
    # walked: the vector read outside the index (the count alone, 1,000, would say "sorted")
    assert any("|| ''::tsvector)" in query["sql"] for query in queries.captured_queries)
    assert capped.context["count"] == 1_000 and capped.context["page"].paginator.more
    assert "<strong>1,000+</strong> found" in capped.content.decode()
    listed = [e.reference for e in capped.context["enquiries"]]
    assert len(listed) == 50 and listed[0] == newest.reference
    assert listed == [newest.reference] + [f"ENQ-C{i:06d}" for i in range(1, 50)]


def test_part_of_a_hyphenated_word_finds_it(story, found):
    """ "nunez-family" is part of "the-nunez-family@example.org" and of "Garcia-Nunez-Family
    Close": both are found; "-bins" still means "not bins"."""
    by_address = story.enquiry(
        "ready_for_review", email="the-nunez-family@example.org", message="Missed collection."
    )
    by_street = story.enquiry(
        "ready_for_review", message="Flat 3, Garcia-Nunez-Family Close: the bins were missed."
    )
    story.enquiry("ready_for_review", message="The Nunez residence: a family matter.")
    assert sorted(found("nunez-family")) == sorted([by_address.reference, by_street.reference])
    assert found("nunez-family -bins") == [by_address.reference]


def test_a_search_longer_than_it_reads_says_what_was_left_out(story, client_for):
    q = "bin " + "x" * 196 + " " + "tail" * 25  # 301 characters
    response = client_for("coordinator").get(reverse("recovery:enquiries"), {"q": q})
    assert response.status_code == 200
    words = response.content.decode()
    assert "A search reads its first 200 characters; yours had 301" in words
    assert "tailtail" in words
