"""Reading a console page as a person does: its words, one operation's card, an item's URL."""

import re
from html import unescape

from django.urls import reverse


def text(response) -> str:
    """The page's words, tags and runs of white space dropped."""
    html = response.content.decode()
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    return unescape(re.sub(r" ([,.:;])", r"\1", words))


def card(response, op) -> str:
    """The HTML of one operation's card on an item page."""
    html = response.content.decode()
    start = html.index(f'id="op-{op.pk}"')
    end = html.find('<section class="card op', start + 1)
    return html[start : end if end != -1 else len(html)]


def item_url(op):
    return reverse("recovery:enquiry", args=[op.enquiry.reference])
