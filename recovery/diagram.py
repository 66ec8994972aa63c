"""The lifecycle as a picture: an SVG drawn from a model's FSM transitions, never by hand.

Layout: states are put in columns by their longest distance from the initial state along the
transitions (edges that lead back to a state already on the path, like retry or "information
received", are drawn dashed), rows in the order the model declares them. Lines run only in the
gaps between columns and in lanes above and below the rows, so none crosses a box (``route``).
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


def _rounded(points, radius=6):
    """An SVG path through orthogonal ``points`` with its corners rounded."""
    (x0, y0), rest = points[0], points[1:]
    d = [f"M{x0:.0f},{y0:.0f}"]
    for i, (x, y) in enumerate(rest):
        px, py = points[i]
        if i == len(rest) - 1:
            d.append(f"L{x:.0f},{y:.0f}")
            break
        nx, ny = rest[i + 1]
        r = min(radius, abs(x - px + y - py) / 2, abs(nx - x + ny - y) / 2)

        def toward(ax, ay, bx, by, r=r):
            length = abs(bx - ax) + abs(by - ay) or 1
            return ax + (bx - ax) * r / length, ay + (by - ay) * r / length

        bx, by = toward(x, y, px, py)
        ax, ay = toward(x, y, nx, ny)
        d.append(f"L{bx:.0f},{by:.0f} Q{x:.0f},{y:.0f} {ax:.0f},{ay:.0f}")
    return " ".join(d)


def route(states, edges, positions, back, node_w=NODE_W):
    """Every edge as orthogonal points that never enter a box but its own two, at their sides.

    Boxes stand in columns; the gaps between columns and the lanes above and below the rows hold
    no box, so the lines run only there. An edge leaves its source's side into the gap beside
    it; one to the next column (or a back edge to the column just before) turns there and enters
    its target's side. A longer forward edge climbs to a lane of its own above the rows, a longer
    back edge drops to one below, runs along it, and comes back down (up) in the gap beside its
    target. Each edge has its own track in each gap, and ports are spread along each side.

    Returns (paths {edge: points}, box {state: (x, y)}, width, height).
    """
    edges = [
        e for e in edges if e.source != e.target and e.source in positions and e.target in positions
    ]
    col = {v: positions[v][0] for v in positions}
    columns = max(col.values()) + 1
    counts = {}
    for c, _ in positions.values():
        counts[c] = counts.get(c, 0) + 1
    max_rows = max(counts.values())

    # Which gap each edge runs in (gap i lies right of column i; gap -1 left of column 0).
    def gaps_of(edge):
        s, t = col[edge.source], col[edge.target]
        if edge in back:
            first, last = s - 1, t if t < s else s - 1
        else:
            first, last = s, t - 1
        return first, last

    # Lines to one target share their last track, their lane and their arrowhead; lines from
    # one source share their first track: each state's edges read as one branching line.
    def direction(edge):
        return "back" if edge in back else "forward"

    def out_key(edge):
        return ("out", edge.source, direction(edge))

    def in_key(edge):
        return ("in", edge.target, direction(edge))

    def lane_of(edge):
        first, last = gaps_of(edge)
        return None if first == last else in_key(edge)

    lanes = {"forward": [], "back": []}
    for edge in edges:
        key = lane_of(edge)
        if key and key not in lanes[key[2]]:
            lanes[key[2]].append(key)
    tracks = {}
    for edge in edges:
        first, last = gaps_of(edge)
        keys = (
            [(last, in_key(edge))]
            if first == last
            else [(first, out_key(edge)), (last, in_key(edge))]
        )
        for g, key in keys:
            if key not in tracks.setdefault(g, []):
                tracks[g].append(key)
    widest = max((len(v) for v in tracks.values()), default=1)
    gap_x = max(GAP_X, 16 + 8 * widest)
    lane = 8
    top = PAD + (len(lanes["forward"]) * lane + 8 if lanes["forward"] else 0)
    body_h = max_rows * NODE_H + (max_rows - 1) * GAP_Y
    bottom = top + body_h + (len(lanes["back"]) * lane + 8 if lanes["back"] else 0)
    left = PAD + (gap_x if -1 in tracks else 0)
    width = left + columns * node_w + (columns - 1) * gap_x + PAD
    height = bottom + PAD

    box = {}
    for value, (c, row) in positions.items():
        offset = (body_h - (counts[c] * NODE_H + (counts[c] - 1) * GAP_Y)) / 2
        box[value] = (left + c * (node_w + gap_x), top + offset + row * (NODE_H + GAP_Y))

    def track_x(g, key):
        members = tracks[g]
        gap_left = left + g * (node_w + gap_x) + node_w if g >= 0 else left - gap_x
        step = gap_x / (len(members) + 1)
        return gap_left + step * (members.index(key) + 1)

    def t_side(edge):
        return "left" if (edge not in back or col[edge.target] == col[edge.source]) else "right"

    # Ports: on each side of a box, one for the lines leaving and one for those arriving.
    sides = {}
    for edge in edges:
        s_side = "left" if edge in back else "right"
        for key in ((edge.source, s_side), (edge.target, t_side(edge))):
            sides.setdefault(key, set())
        sides[(edge.source, s_side)].add("out")
        sides[(edge.target, t_side(edge))].add("in")

    def port(value, side, way):
        ways = sorted(sides[(value, side)], reverse=side == "left")  # "out" above on the right
        offset = 0 if len(ways) == 1 else (-5 if ways.index(way) == 0 else 5)
        y = box[value][1] + NODE_H / 2 + offset
        x = box[value][0] + (node_w if side == "right" else 0)
        return x, y

    paths = {}
    for edge in edges:
        first, last = gaps_of(edge)
        side = t_side(edge)
        sx, sy = port(edge.source, "left" if edge in back else "right", "out")
        tx, ty = port(edge.target, side, "in")
        bx = track_x(last, in_key(edge))
        if first == last:
            points = [(sx, sy), (bx, sy), (bx, ty), (tx, ty)]
        else:
            ax = track_x(first, out_key(edge))
            key = lane_of(edge)
            if edge in back:
                y = top + body_h + 8 + lanes["back"].index(key) * lane
            else:
                y = top - 8 - lanes["forward"].index(key) * lane
            points = [(sx, sy), (ax, sy), (ax, y), (bx, y), (bx, ty), (tx, ty)]
        # the arrowhead's tip rests on the box's side
        points[-1] = (tx - 2 if side == "left" else tx + 2, ty)
        paths[edge] = [p for i, p in enumerate(points) if i == 0 or p != points[i - 1]]
    return paths, box, width, height


def render_svg(model, current=None, visited=(), field_name="state", title=""):
    states, edges, initial = fsm_graph(model, field_name)
    positions, back, _ = layout(states, edges, initial)
    node_w = max(NODE_W, max(len(label) for _, label in states) * 7 + 20)
    paths, box, width, height = route(states, edges, positions, back, node_w)

    visited = {str(v) for v in visited}
    parts = [
        f'<svg class="fsm" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} '
        f'{height:.0f}" role="img" aria-label="{escape(title or model._meta.verbose_name)} '
        f'lifecycle{", now " + escape(str(current)) if current else ""}">',
        '<defs><marker id="fsm-arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" class="fsm-arrowhead"/></marker></defs>',
    ]
    for edge, points in paths.items():
        label = escape(f"{edge.name}: {edge.source} \u2192 {edge.target}")
        cls = "fsm-edge back" if edge in back else "fsm-edge"
        if current is not None and edge.source == str(current):
            cls += " next"
        parts.append(
            f'<path class="{cls}" d="{_rounded(points)}" marker-end="url(#fsm-arrow)">'
            f"<title>{label}</title></path>"
        )
    for value, label in states:
        x, y = box[value]
        cls = "fsm-node"
        if current is not None and value == str(current):
            cls += " current"
        elif value in visited:
            cls += " visited"
        parts.append(
            f'<g class="{cls}" data-state="{escape(value)}"><rect x="{x:.0f}" y="{y:.0f}" '
            f'width="{node_w}" height="{NODE_H}" rx="17"/><text x="{x + node_w / 2:.0f}" '
            f'y="{y + NODE_H / 2 + 4:.0f}" text-anchor="middle">{escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
