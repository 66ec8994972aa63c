"""Just enough Markdown for the runbooks (headings, lists, tables, code, links, emphasis).

The runbooks live in docs/runbooks/ as Markdown so they read well in the repository too; the
console shows them with this. Everything is escaped first: no raw HTML passes through.
"""

import re
from html import escape

from django.utils.safestring import mark_safe

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_EM = re.compile(r"(?<![*\w])\*([^*]+)\*(?!\w)")


def _link(match):
    text, href = match.group(1), match.group(2)
    if href.endswith(".md") and "/" not in href:
        href = "../" + href[:-3] + "/"  # a sibling runbook, as the console serves it
    elif not href.startswith(("/", "http://", "https://", "#", "../")):
        href = "#"
    return f'<a href="{href}">{text}</a>'


def inline(text: str) -> str:
    text = escape(text)
    text = _CODE.sub(r"<code>\1</code>", text)
    text = _BOLD.sub(r"<strong>\1</strong>", text)
    text = _EM.sub(r"<em>\1</em>", text)
    return _LINK.sub(_link, text)


def render(source: str) -> str:
    out, para, items, list_tag, table, code = [], [], [], None, [], None

    def flush():
        nonlocal para, items, list_tag, table
        if para:
            out.append(f"<p>{inline(' '.join(para))}</p>")
            para = []
        if items:
            out.append(
                f"<{list_tag}>"
                + "".join(
                    f"<li>{inline(text)}"
                    + (
                        "<ul>" + "".join(f"<li>{inline(c)}</li>" for c in sub) + "</ul>"
                        if sub
                        else ""
                    )
                    + "</li>"
                    for text, sub in items
                )
                + f"</{list_tag}>"
            )
            items, list_tag = [], None
        if table:
            rows = [r for r in table if not re.fullmatch(r"\|?[\s:|-]+\|?", r)]
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            head, body = cells[0], cells[1:]
            out.append(
                "<table><thead><tr>"
                + "".join(f"<th>{inline(c)}</th>" for c in head)
                + "</tr></thead><tbody>"
                + "".join(
                    "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in body
                )
                + "</tbody></table>"
            )
            table = []

    for line in source.splitlines():
        if code is not None:
            if line.startswith("```"):
                out.append(f"<pre><code>{escape(chr(10).join(code))}</code></pre>")
                code = None
            else:
                code.append(line)
            continue
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            code = []
        elif not stripped:
            flush()
        elif m := re.match(r"(#{1,4})\s+(.*)", stripped):
            flush()
            level = min(len(m.group(1)) + 1, 4)  # the page title is the h1
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
        elif stripped.startswith("|"):
            if para or items:
                flush()
            table.append(stripped)
        elif items and line.startswith("  ") and (m := re.match(r"[-*]\s+(.*)", stripped)):
            items[-1][1].append(m.group(1))  # one level of nesting under the last item
        elif m := re.match(r"([-*]|\d+\.)\s+(.*)", stripped):
            tag = "ol" if m.group(1)[0].isdigit() else "ul"
            if para or table or (list_tag and list_tag != tag):
                flush()
            list_tag = tag
            items.append((m.group(2), []))
        elif items and line.startswith("  "):
            text, sub = items[-1]
            if sub:
                sub[-1] += " " + stripped
            else:
                items[-1] = (text + " " + stripped, sub)
        else:
            if items or table:
                flush()
            para.append(stripped)
    if code is not None:
        out.append(f"<pre><code>{escape(chr(10).join(code))}</code></pre>")
    flush()
    return mark_safe("\n".join(out))
