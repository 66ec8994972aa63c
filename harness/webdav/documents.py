"""Small real documents for the WebDAV share, made with pypdf itself: a PDF form whose
AcroForm fields hold given values, and a PDF with a line of text and no form."""

from __future__ import annotations

from io import BytesIO

from pypdf import PdfWriter
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    FloatObject,
    NameObject,
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
