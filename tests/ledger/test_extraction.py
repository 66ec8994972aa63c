"""ledger.extraction: a PDF form's AcroForm fields (pypdf), the text of anything else, nothing
guessed, and nothing PostgreSQL cannot store."""

import pytest

from harness.webdav.documents import form_pdf, text_pdf
from ledger import extraction


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
