"""What a document states, read from its bytes: a PDF form's fields, or the text of anything
else, for the reviewer. Nothing is guessed: a field is what the form holds under its name, and a
document that is neither a form nor text gives nothing but its type.

Runs in the worker, outside any transaction, on the bytes of one version; the same bytes always
give the same result (the extraction is keyed by document and version).

A PDF is read within limits, so that a few kilobytes cannot hold a worker for minutes
(docs/integrations.md, "What a read may cost"): counted first (at most MAX_OBJECTS objects, the
first MAX_PAGES pages, MAX_CONTENT_BYTES of decoded page content, MAX_TEXT characters), then
bounded whatever pypdf does: it runs in a child process with EXTRACTION_CPU_SECONDS of CPU and
EXTRACTION_MEMORY_MB of memory (ledger.budget). Past a limit the document is ``TooCostly``:
"too large to read" or "too slow to read", an Unreadable like a broken file.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from io import BytesIO

from django.conf import settings

from ledger import budget

logger = logging.getLogger("ledger.extraction")

MAX_FIELDS = 200
MAX_NAME = 200
MAX_VALUE = 2000
MAX_TEXT = 20000
MAX_PAGES = 20  # text is for a reviewer to read, not an archive: the first pages are enough
# A file whose cross-reference table names more objects is not opened further.
MAX_OBJECTS = 20_000
# Decoded page content (the pages' streams and the forms they draw) read for text, in all:
# pypdf takes about 2 s of CPU a megabyte of text operators, and a kilobyte of Flate-compressed
# stream can decode to a megabyte.
MAX_CONTENT_BYTES = 1024 * 1024
# Objects visited while sizing a page's content (its forms, and theirs).
MAX_CONTENT_OBJECTS = 500

# PostgreSQL refuses NUL in text and in JSON, and a lone surrogate cannot be stored as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

FORM, TEXT, NOTHING = "form", "text", "none"


class Unreadable(ValueError):
    """The bytes are not what their type says (a PDF that cannot be parsed)."""


class TooCostly(Unreadable):
    """The document cannot be read within its limits: ``counted`` says what was counted when
    reading stopped (objects, pages read, decoded content bytes)."""

    def __init__(self, message: str, counted: dict | None = None):
        super().__init__(message)
        self.counted = dict(counted or {})

    def __reduce__(self):  # handed from the child process whole
        return (type(self), (str(self), self.counted))


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
        return read_pdf(content, media or "application/pdf")
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


def read_pdf(content: bytes, media: str = "application/pdf") -> Extraction:
    """_pdf() in a child process within EXTRACTION_CPU_SECONDS and EXTRACTION_MEMORY_MB."""
    cpu = float(getattr(settings, "EXTRACTION_CPU_SECONDS", 10.0))
    memory = int(float(getattr(settings, "EXTRACTION_MEMORY_MB", 512)) * 2**20)
    try:
        return budget.run(_pdf, content, media, cpu_seconds=cpu, memory_bytes=memory)
    except budget.Exceeded as exc:
        words = "too large to read" if exc.what == "memory" else "too slow to read"
        raise TooCostly(
            f"{words}: reading its text {exc}", {"cpu_seconds": round(exc.cpu_seconds, 1)}
        ) from exc
    except budget.ChildFailed as exc:
        raise Unreadable(f"not a readable PDF ({exc})") from exc


def _pdf(content: bytes, media: str) -> Extraction:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(BytesIO(content))
        objects = len(reader.xref_objStm) + sum(len(v) for v in reader.xref.values())
        if objects > MAX_OBJECTS:
            raise TooCostly(
                f"too large to read: {objects:,} objects (at most {MAX_OBJECTS:,} are read)",
                {"objects": objects},
            )
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
        text = _text(reader, objects)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        if isinstance(exc, Unreadable):
            raise
        # pypdf raises more than its own errors on broken files; each means "cannot read it".
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]})") from exc
    return Extraction(TEXT if text else NOTHING, text=clean(text, MAX_TEXT), content_type=media)


def _text(reader, objects: int) -> str:
    """The text of the first pages, page by page while the decoded content stays within
    MAX_CONTENT_BYTES and the text within MAX_TEXT; a first page over the limit is TooCostly."""
    pages, decoded, length = [], 0, 0
    for number, page in enumerate(reader.pages[:MAX_PAGES], start=1):
        size = _content_bytes(page)
        if decoded + size > MAX_CONTENT_BYTES:
            if not pages:
                raise TooCostly(
                    f"too large to read: page {number}'s content is {size:,} bytes decoded "
                    f"(at most {MAX_CONTENT_BYTES:,} are read)",
                    {"objects": objects, "pages": number - 1, "content_bytes": decoded + size},
                )
            break  # the pages before it are the text; the rest is not read
        decoded += size
        page_text = (page.extract_text() or "").strip()
        pages.append(page_text)
        length += len(page_text)
        if length >= MAX_TEXT:
            break
    return "\n\n".join(p for p in pages if p)


def _content_bytes(page) -> int:
    """The decoded size of what extracting ``page``'s text reads: its content streams and the
    forms (XObjects) they draw, and theirs, each counted once, at most MAX_CONTENT_OBJECTS
    objects looked at (an image is never decoded to be counted: it holds no text)."""
    total = 0
    seen: set[int] = set()
    todo = [(page.get("/Contents"), True), (page.get("/Resources"), False)]
    while todo:
        item, is_content = todo.pop()
        if item is None:
            continue
        ref = getattr(item, "idnum", None)
        if ref is not None:
            if ref in seen:
                continue
            seen.add(ref)
        if len(seen) + len(todo) > MAX_CONTENT_OBJECTS:
            return MAX_CONTENT_BYTES + 1  # too many objects to size: past the limit
        item = item.get_object()
        if isinstance(item, list):
            todo.extend((part, is_content) for part in item)
        elif hasattr(item, "get_data"):
            if is_content or item.get("/Subtype") == "/Form":
                total += len(item.get_data())
                todo.append((item.get("/Resources"), False))
        elif isinstance(item, dict) and not is_content:
            # a resource dictionary: only its forms hold content that extract_text reads
            xobjects = item.get("/XObject")
            xobjects = xobjects.get_object() if xobjects is not None else {}
            if isinstance(xobjects, dict):
                todo.extend((form, False) for form in xobjects.values())
        if total > MAX_CONTENT_BYTES:
            return total
    return total


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
