"""Mermaid state diagrams drawn from the transition methods themselves, so they cannot drift.

``python manage.py state_diagram --write`` regenerates docs/state-diagram.md and the marked block
in docs/intake.md; ``--check`` (and a test) fails when the code and the documents disagree.
"""

import re
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django_fsm import FSMFieldMixin

DOCS = Path(settings.BASE_DIR) / "docs"
DIAGRAM_FILE = DOCS / "state-diagram.md"
INTAKE_FILE = DOCS / "intake.md"
BLOCK = re.compile(
    r"(<!-- state-diagram:(?P<label>[\w.]+) -->\n).*?(<!-- /state-diagram -->)", re.DOTALL
)


def fsm_models():
    """(model, field) for every model with a state machine, in a stable order."""
    found = []
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if isinstance(f, FSMFieldMixin):
                found.append((model, f))
    return sorted(found, key=lambda pair: pair[0]._meta.label_lower)


def transitions(model, field):
    """Every transition of ``field`` as django-fsm declares it, in declaration order: the one
    walk of a state machine that the documents' diagrams (edges) and the console's picture
    (recovery.diagram) both read."""
    return list(field.get_all_transitions(model))


def edges(model, field) -> list[tuple[str, str, str, str]]:
    """(source, target, method, who) for every transition of ``field``."""
    rows = set()
    for t in transitions(model, field):
        who = []
        if t.permission:
            # A permission decided per object is a function: its ``label`` says what it asks.
            label = getattr(t.permission, "label", t.permission)
            who.append(str(label).split(".")[-1])
        who.extend((t.custom or {}).get("actors", ()))
        rows.add((str(t.source), str(t.target), t.name, ", ".join(who) or "nobody"))
    return sorted(rows)


def mermaid(model, field) -> str:
    rows = edges(model, field)
    sources = {s for s, _, _, _ in rows}
    states = [str(value) for value, _ in field.choices]
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {field.get_default()}"]
    lines += [f"    {s} --> {t} : {name} ({who})" for s, t, name, who in rows]
    lines += [f"    {s} --> [*]" for s in states if s not in sources]
    lines.append("```")
    return "\n".join(lines) + "\n"


def diagram_document() -> str:
    parts = [
        "# State diagrams\n\n",
        "Generated from the transition methods by `python manage.py state_diagram --write`; a "
        "test fails when\nthis file and the code disagree. Each arrow is a transition method; "
        "in brackets, who may fire it:\na permission (people) and/or an actor prefix (`system`, "
        "`model`). `[*]` marks where a record\nstarts and the states with no way out.\n",
    ]
    for model, field in fsm_models():
        parts.append(f"\n## {model._meta.label} (`{field.name}`)\n\n{mermaid(model, field)}")
    return "".join(parts)


def render_blocks(text: str) -> str:
    """Refresh every <!-- state-diagram:app.model --> block in a hand-written document."""
    by_label = {model._meta.label_lower: (model, f) for model, f in fsm_models()}

    def refresh(match):
        model, f = by_label[match.group("label").lower()]
        return match.group(1) + mermaid(model, f) + match.group(3)

    return BLOCK.sub(refresh, text)


def expected_files() -> dict[Path, str]:
    files = {DIAGRAM_FILE: diagram_document()}
    if INTAKE_FILE.exists():
        files[INTAKE_FILE] = render_blocks(INTAKE_FILE.read_text())
    return files
