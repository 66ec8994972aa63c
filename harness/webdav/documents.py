"""Small real documents for the WebDAV share, made with pypdf itself: a PDF form whose
AcroForm fields hold given values, and a PDF with a line of text and no form."""

from __future__ import annotations

import zlib
from io import BytesIO

from pypdf import PdfWriter
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    FloatObject,
    NameObject,
    NumberObject,
    StreamObject,
    TextStringObject,
)


def form_pdf(fields: dict[str, str]) -> bytes:
    """A one-page PDF form: one text field per item, its value filled in."""
    writer = PdfWriter()
    page = writer.add_blank_page(width=612, height=792)
    widgets = ArrayObject()
    for position, (name, value) in enumerate(fields.items()):
        top = 740 - 30 * position
        widget = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Annot"),
                NameObject("/Subtype"): NameObject("/Widget"),
                NameObject("/FT"): NameObject("/Tx"),
                NameObject("/T"): TextStringObject(name),
                NameObject("/V"): TextStringObject(value),
                NameObject("/Rect"): ArrayObject(
                    [FloatObject(50), FloatObject(top - 20), FloatObject(400), FloatObject(top)]
                ),
            }
        )
        widgets.append(writer._add_object(widget))
    page[NameObject("/Annots")] = widgets
    writer._root_object[NameObject("/AcroForm")] = writer._add_object(
        DictionaryObject({NameObject("/Fields"): ArrayObject(list(widgets))})
    )
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def text_pdf(text: str) -> bytes:
    """A one-page PDF with ``text`` (ASCII) written on it, and no form."""
    writer = PdfWriter()
    page = writer.add_blank_page(width=612, height=792)
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    page[NameObject("/Resources")] = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
    )
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = DecodedStreamObject()
    stream.set_data(f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1"))
    page[NameObject("/Contents")] = writer._add_object(stream)
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def text_heavy_pdf(
    decoded_bytes: int, *, pages: int = 1, line: bytes = b"(Hello world) Tj 0 -1 Td\n"
) -> bytes:
    """A small PDF whose every page draws ``decoded_bytes`` of text operators (``line`` again
    and again), Flate-compressed: a few kilobytes on the wire that pypdf takes seconds of CPU a
    page to turn into text. Each page's text starts with "page N"."""
    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for number in range(1, pages + 1):
        page = writer.add_blank_page(width=612, height=792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        head = f"BT /F1 12 Tf 72 720 Td (page {number}) Tj 0 -1 Td\n".encode()
        data = head + line * max((decoded_bytes - len(head) - 2) // len(line), 0) + b"ET"
        stream = StreamObject()
        stream.set_data(zlib.compress(data, 9))
        stream[NameObject("/Filter")] = NameObject("/FlateDecode")
        page[NameObject("/Contents")] = writer._add_object(stream)
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def many_objects_pdf(objects: int) -> bytes:
    """A one-page PDF with ``objects`` small objects besides the page's own."""
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    for number in range(objects):
        writer._add_object(NumberObject(number))
    out = BytesIO()
    writer.write(out)
    return out.getvalue()
