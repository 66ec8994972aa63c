"""The runbooks' Markdown as HTML, through markdown-it-py (CommonMark plus tables).

The runbooks live in docs/runbooks/ as Markdown so they read well in the repository too; the
console shows them with this. Raw HTML is off, so none passes through: it is shown as text.
Two things are ours: a link to a sibling runbook (``unknown-outcome.md``) goes to that runbook's
console page, and a link to anything but the console, the web or this page becomes ``#``.
Headings move down one level (the page title is the h1), and the HTML is compact (no line
breaks inside lists and tables) so the markup reads as it always has.
"""

from django.utils.safestring import mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

_ALLOWED = ("/", "http://", "https://", "#", "../")
# Kept on their own line in the output: the top-level blocks and code.
_OWN_LINE = ("fence", "code_block", "hr")


def _href(href: str) -> str:
    if href.endswith(".md") and "/" not in href:
        return "../" + href[:-3] + "/"  # a sibling runbook, as the console serves it
    if not href.startswith(_ALLOWED):
        return "#"  # javascript:, data:, a relative path the console does not serve
    return href


def _link_open(self, tokens, idx, options, env):
    token = tokens[idx]
    token.attrSet("href", _href(str(token.attrGet("href") or "")))
    return self.renderToken(tokens, idx, options, env)


def _heading(self, tokens, idx, options, env):
    token = tokens[idx]
    token.tag = f"h{min(int(token.tag[1]) + 1, 4)}"  # the page title is the h1
    return self.renderToken(tokens, idx, options, env)


def _code(self, tokens, idx, options, env):
    return f"<pre><code>{escapeHtml(tokens[idx].content.removesuffix(chr(10)))}</code></pre>\n"


def _compact(state) -> None:
    # markdown-it puts a line break after every block tag; only a closing top-level block keeps
    # one here, so lists and tables come out on one line each.
    for token in state.tokens:
        if token.type not in _OWN_LINE and not (token.level == 0 and token.nesting == -1):
            token.block = False


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")
    md.validateLink = lambda url: True  # every href goes through _href instead
    md.core.ruler.push("compact", _compact)
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("heading_open", _heading)
    md.add_render_rule("heading_close", _heading)
    md.add_render_rule("fence", _code)
    md.add_render_rule("code_block", _code)
    md.add_render_rule("softbreak", lambda self, tokens, idx, options, env: " ")
    return md


_MD = _parser()


def inline(text: str) -> str:
    """One line of Markdown (code, emphasis, links) as HTML, no block around it."""
    return mark_safe(_MD.renderInline(text))


def render(source: str) -> str:
    return mark_safe(_MD.render(source).rstrip("\n"))
