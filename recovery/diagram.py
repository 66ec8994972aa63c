"""The lifecycle as a picture: an SVG drawn from a model's FSM transitions, never by hand.

Layout: states are put in columns by their longest distance from the initial state along the
transitions (edges that lead back to a state already on the path, like retry or "information
received", are drawn as dashed arcs underneath), rows in the order the model declares them.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from intake.diagram import transitions

NODE_W, NODE_H = 138, 34
GAP_X, GAP_Y = 44, 22
PAD = 14


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    name: str


def fsm_graph(model, field_name="state"):
    """(states [(value, label)], edges [Edge], initial) from the model's transitions."""
    field = model._meta.get_field(field_name)
    states = [(str(value), str(label)) for value, label in field.choices]
    values = [v for v, _ in states]
    edges = []
    for transition in transitions(model, field):
        sources = values if transition.source in ("*", "+") else [str(transition.source)]
        target = transition.target
        if target is None:
            continue
        for source in sources:
            edge = Edge(source, str(target), transition.name)
            if edge not in edges:
                edges.append(edge)
    default = field.default() if callable(field.default) else field.default
    return states, edges, str(default)


def layout(states, edges, initial):
    """{state: (column, row)} and the set of back edges."""
    order = {value: i for i, (value, _) in enumerate(states)}
    out = {value: [] for value in order}
    for edge in edges:
        if edge.source != edge.target and edge.target in order and edge.source in order:
            out[edge.source].append(edge)
    for value in out:
        out[value].sort(key=lambda e: order[e.target])
    back, on_path, seen = set(), set(), set()

    def visit(value):
        seen.add(value)
        on_path.add(value)
        for edge in out[value]:
            if edge.target in on_path:
                back.add(edge)
            elif edge.target not in seen:
                visit(edge.target)
        on_path.discard(value)

    visit(initial)
    for value in order:  # states the initial state cannot reach still get drawn
        if value not in seen:
            visit(value)
    column = {value: 0 for value in order}
    changed = True
    while changed:  # longest path on the acyclic part (tiny graphs: a few passes)
        changed = False
        for value in order:
            for edge in out[value]:
                if edge in back:
                    continue
                if column[edge.target] < column[value] + 1:
                    column[edge.target] = column[value] + 1
                    changed = True
    rows, positions = {}, {}
    for value, _ in states:
        col = column[value]
        positions[value] = (col, rows.get(col, 0))
        rows[col] = rows.get(col, 0) + 1
    return positions, back, max(rows.values())


def render_svg(model, current=None, visited=(), field_name="state", title=""):
    states, edges, initial = fsm_graph(model, field_name)
    positions, back, max_rows = layout(states, edges, initial)
    columns = max(col for col, _ in positions.values()) + 1
    width = PAD * 2 + columns * NODE_W + (columns - 1) * GAP_X
    body_h = max_rows * NODE_H + (max_rows - 1) * GAP_Y
    height = PAD * 2 + body_h + 46  # room for the back arcs underneath
    counts = {}
    for col, _ in positions.values():
        counts[col] = counts.get(col, 0) + 1

    def box(value):
        col, row = positions[value]
        offset = (body_h - (counts[col] * NODE_H + (counts[col] - 1) * GAP_Y)) / 2
        return PAD + col * (NODE_W + GAP_X), PAD + offset + row * (NODE_H + GAP_Y)

    visited = {str(v) for v in visited}
    parts = [
        f'<svg class="fsm" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} '
        f'{height:.0f}" role="img" aria-label="{escape(title or model._meta.verbose_name)} '
        f'lifecycle{", now " + escape(str(current)) if current else ""}">',
        '<defs><marker id="fsm-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" class="fsm-arrowhead"/></marker></defs>',
    ]
    arc = 0
    for edge in edges:
        if edge.source == edge.target:
            continue
        sx, sy = box(edge.source)
        tx, ty = box(edge.target)
        label = escape(f"{edge.name}: {edge.source} \u2192 {edge.target}")
        if edge in back:
            arc += 1
            x1, y1 = sx + NODE_W / 2, sy + NODE_H
            x2, y2 = tx + NODE_W / 2 + 8, ty + NODE_H
            low = PAD + body_h + 10 + (arc % 3) * 12
            d = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{low:.0f} {x2:.0f},{low:.0f} {x2:.0f},{y2 + 2:.0f}"
            cls = "fsm-edge back"
        else:
            x1, y1 = sx + NODE_W, sy + NODE_H / 2
            x2, y2 = tx, ty + NODE_H / 2
            mid = (x1 + x2) / 2
            d = f"M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} {x2 - 2:.0f},{y2:.0f}"
            cls = "fsm-edge"
        if current is not None and edge.source == str(current):
            cls += " next"
        parts.append(
            f'<path class="{cls}" d="{d}" marker-end="url(#fsm-arrow)">'
            f"<title>{label}</title></path>"
        )
    for value, label in states:
        x, y = box(value)
        cls = "fsm-node"
        if current is not None and value == str(current):
            cls += " current"
        elif value in visited:
            cls += " visited"
        parts.append(
            f'<g class="{cls}" data-state="{escape(value)}"><rect x="{x:.0f}" y="{y:.0f}" '
            f'width="{NODE_W}" height="{NODE_H}" rx="17"/><text x="{x + NODE_W / 2:.0f}" '
            f'y="{y + NODE_H / 2 + 4:.0f}" text-anchor="middle">{escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
