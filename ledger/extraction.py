"""What a document states, read from its bytes: a PDF form's fields, or the text of anything
else, for the reviewer. Nothing is guessed: a field is what the form holds under its name, and a
document that is neither a form nor text gives nothing but its type.

Runs in the worker, outside any transaction, on the bytes of one version; the same bytes always
give the same result (the extraction is keyed by document and version).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from io import BytesIO

logger = logging.getLogger("ledger.extraction")

MAX_FIELDS = 200
MAX_NAME = 200
MAX_VALUE = 2000
MAX_TEXT = 20000
MAX_PAGES = 20  # text is for a reviewer to read, not an archive: the first pages are enough

# PostgreSQL refuses NUL in text and in JSON, and a lone surrogate cannot be stored as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

FORM, TEXT, NOTHING = "form", "text", "none"


class Unreadable(ValueError):
    """The bytes are not what their type says (a PDF that cannot be parsed)."""


@dataclass
class Extraction:
    kind: str  # form, text or none
    fields: dict[str, str] = field(default_factory=dict)
    text: str = ""
    content_type: str = ""

    def as_result(self) -> dict:
        return {
            "kind": self.kind,
            "fields": self.fields,
            "text": self.text,
            "content_type": self.content_type,
        }


def clean(value: str, limit: int) -> str:
    return _UNSTORABLE.sub("\ufffd", value)[:limit]


def extract(content: bytes, content_type: str = "", name: str = "") -> Extraction:
    """The fields (a PDF form) or the text (a PDF without fields, a text file) of ``content``."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/pdf" or content[:5] == b"%PDF-" or name.lower().endswith(".pdf"):
        return _pdf(content, media or "application/pdf")
    if media.startswith("text/") or name.lower().endswith((".txt", ".csv", ".md")):
        charset = _charset(content_type) or "utf-8"
        try:
            text = content.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            text = content.decode("utf-8", errors="replace")
        return Extraction(TEXT, text=clean(text, MAX_TEXT), content_type=media or "text/plain")
    return Extraction(NOTHING, content_type=media or "application/octet-stream")


def _charset(content_type: str) -> str:
    match = re.search(r"charset=\"?([A-Za-z0-9_.:-]+)", content_type or "")
    return match.group(1) if match else ""


def _pdf(content: bytes, media: str) -> Extraction:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(BytesIO(content))
        raw = reader.get_fields() or {}
        fields = {}
        for name, value in raw.items():
            if len(fields) >= MAX_FIELDS:
                break
            if value.get("/FT") not in ("/Tx", "/Ch", "/Btn"):
                continue  # signatures and containers state no value of their own
            fields[clean(str(name), MAX_NAME)] = _value(value.get("/V"))
        if fields:
            return Extraction(FORM, fields=fields, content_type=media)
        pages = []
        for page in reader.pages[:MAX_PAGES]:
            pages.append(page.extract_text() or "")
        text = "\n\n".join(p.strip() for p in pages if p.strip())
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as exc:
        # pypdf raises more than its own errors on broken files; each means "cannot read it".
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]})") from exc
    return Extraction(TEXT if text else NOTHING, text=clean(text, MAX_TEXT), content_type=media)


def _value(value) -> str:
    """A field's value as the form shows it: text as is, a choice list joined, a ticked box by
    its export name ("Yes"), an empty field as ""."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return clean(", ".join(_value(v) for v in value), MAX_VALUE)
    text = str(value)
    if text.startswith("/"):  # a name object: a checkbox or radio state
        text = "" if text == "/Off" else text[1:]
    return clean(text, MAX_VALUE)
