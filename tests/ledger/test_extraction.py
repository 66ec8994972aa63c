"""ledger.extraction: a PDF form's AcroForm fields (pypdf), the text of anything else, nothing
guessed, and nothing PostgreSQL cannot store."""

import pytest

from harness.webdav.documents import form_pdf, many_objects_pdf, text_heavy_pdf, text_pdf
from ledger import extraction

# A PDF is read in ledger.budget's child process.
pytestmark = pytest.mark.usefixtures("child_process")


def test_a_pdf_forms_fields_are_read_by_name_with_their_values():
    found = extraction.extract(form_pdf({"permit": "P-17", "ward": "North", "empty": ""}))
    assert found.kind == extraction.FORM
    assert found.fields == {"permit": "P-17", "ward": "North", "empty": ""}
    assert found.text == ""


def test_the_same_bytes_give_the_same_result():
    content = form_pdf({"permit": "P-17"})
    assert extraction.extract(content) == extraction.extract(content)


def test_values_that_cannot_be_stored_are_replaced_and_long_ones_cut():
    found = extraction.extract(form_pdf({"nul": "a\x00b", "long": "x" * 5000}))
    assert found.fields["nul"] == "a\ufffdb"
    assert len(found.fields["long"]) == extraction.MAX_VALUE


def test_a_pdf_without_a_form_gives_its_text():
    found = extraction.extract(text_pdf("Tenancy agreement (page 1)"), "application/pdf")
    assert (found.kind, found.fields, found.text) == (
        extraction.TEXT,
        {},
        "Tenancy agreement (page 1)",
    )


def test_a_text_file_gives_its_text_in_its_charset():
    found = extraction.extract("Zoë\udcff".encode("utf-8", "surrogateescape"), "text/plain")
    assert found.kind == extraction.TEXT and found.text.startswith("Zoë")
    found = extraction.extract("Zoë".encode("latin-1"), "text/plain; charset=latin-1")
    assert found.text == "Zoë"
    found = extraction.extract(b"abc", "text/plain; charset=no-such-charset")
    assert found.text == "abc"


def test_anything_else_gives_only_its_type():
    found = extraction.extract(b"\x89PNG\r\n", "image/png")
    assert (found.kind, found.fields, found.text, found.content_type) == (
        extraction.NOTHING,
        {},
        "",
        "image/png",
    )


@pytest.mark.parametrize("content", [b"%PDF-1.7 truncated", b"%PDF-" + b"\x00" * 100])
def test_a_broken_pdf_is_unreadable_never_an_empty_form(content):
    with pytest.raises(extraction.Unreadable, match="not a readable PDF"):
        extraction.extract(content, "application/pdf")


def test_a_small_pdf_whose_page_decodes_to_megabytes_is_too_large_to_read_before_its_text():
    """11 KB on the wire, 4 MB of text operators once decoded (about 8 s of pypdf's CPU): the
    page's decoded size is counted before any text is read, and it is refused at once."""
    content = text_heavy_pdf(4 * 2**20)
    assert len(content) < 16 * 1024
    with pytest.raises(extraction.TooCostly, match="too large to read: page 1's content is") as got:
        extraction.extract(content, "application/pdf")
    assert got.value.counted["pages"] == 0  # no page's text was read
    assert extraction.MAX_CONTENT_BYTES < got.value.counted["content_bytes"] <= 4 * 2**20


def test_the_text_of_many_heavy_pages_stops_at_the_content_limit():
    """30 pages of 200 KB of operators each (moves, little text): only the pages within
    MAX_CONTENT_BYTES (5) are read; the reviewer gets their text, the rest is not read."""
    content = text_heavy_pdf(200 * 1024, pages=30, line=b"0 -1 Td\n")
    found = extraction.extract(content, "application/pdf")
    read = [n for n in range(1, 31) if f"page {n}\n" in found.text + "\n"]
    assert found.kind == extraction.TEXT
    assert read == list(range(1, extraction.MAX_CONTENT_BYTES // (200 * 1024) + 1))


def test_a_pdf_naming_too_many_objects_is_too_large_to_read():
    with pytest.raises(extraction.TooCostly, match=r"too large to read: 20,00[0-9] objects") as got:
        extraction.extract(many_objects_pdf(extraction.MAX_OBJECTS), "application/pdf")
    assert got.value.counted["objects"] > extraction.MAX_OBJECTS


def test_what_the_counts_let_through_is_still_bounded_by_the_cpu_budget(settings, monkeypatch):
    """With the content limit raised past a 4 MB page, pypdf would spend seconds on it: the
    child's CPU budget (1 s here) ends it, as the kernel counts CPU, and it is too slow to
    read."""
    monkeypatch.setattr(extraction, "MAX_CONTENT_BYTES", 64 * 2**20)
    settings.EXTRACTION_CPU_SECONDS = 1
    with pytest.raises(extraction.TooCostly, match="too slow to read") as got:
        extraction.extract(text_heavy_pdf(16 * 2**20), "application/pdf")
    assert got.value.counted["cpu_seconds"] <= 2.5
