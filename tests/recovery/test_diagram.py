"""The lifecycle picture: drawn from the FSM definitions, current state marked."""

import re
from itertools import pairwise

from django.template import Context, Template

from intake.models import Enquiry, EnquiryState
from ledger.models import Operation, OperationState
from recovery.diagram import fsm_graph, layout, render_svg


def test_every_state_and_transition_of_the_enquiry_is_drawn():
    svg = render_svg(Enquiry, current=EnquiryState.SUBMISSION_UNKNOWN)
    states = re.findall(r'data-state="([^"]+)"', svg)
    assert sorted(states) == sorted(EnquiryState.values)
    transitions = list(Enquiry._meta.get_field("state").get_all_transitions(Enquiry))
    assert transitions
    for transition in transitions:
        sources = transition.source if isinstance(transition.source, list) else [transition.source]
        for source in sources:
            if source != transition.target:
                assert f"{transition.name}: {source} \u2192 {transition.target}" in svg


def test_the_current_state_is_marked_and_only_it():
    svg = render_svg(Operation, current=OperationState.UNKNOWN, visited={"proposed", "approved"})
    assert svg.count('class="fsm-node current"') == 1
    assert 'class="fsm-node current" data-state="unknown"' in svg
    assert 'class="fsm-node visited" data-state="approved"' in svg
    assert 'aria-label="operation lifecycle, now unknown"' in svg


def test_layout_follows_the_workflow_left_to_right():
    states, edges, initial = fsm_graph(Enquiry)
    positions, back, _ = layout(states, edges, initial)
    col = {state: position[0] for state, position in positions.items()}
    assert initial == "received" and col["received"] == 0
    assert col["received"] < col["validated"] < col["ready_for_review"] < col["approved"]
    assert col["approved"] < col["submitted"] < col["submission_unknown"] < col["confirmed"]
    # Going back (information received, a new revision) is drawn as a back edge, not a column.
    assert any(e.name == "information_received" for e in back)


def test_the_template_tag_renders_inline_svg_for_an_instance(db):
    enquiry = Enquiry(source="website", message="hello")
    html = Template("{% load console %}{% lifecycle enquiry %}").render(
        Context({"enquiry": enquiry})
    )
    assert html.startswith('<svg class="fsm"')
    assert 'class="fsm-node current" data-state="received"' in html


def test_labels_are_escaped():
    svg = render_svg(Enquiry, current="<script>")
    assert "<script>" not in svg


def _points_along(d, steps=40):
    """Points along an SVG path made of M, L, Q and C commands (all the diagram draws)."""
    tokens = re.findall(r"[MLQC]|-?\d+(?:\.\d+)?", d)
    points, here, i = [], None, 0
    while i < len(tokens):
        command = tokens[i]
        arity = {"M": 1, "L": 1, "Q": 2, "C": 3}[command]
        coords = [
            (float(tokens[i + 1 + 2 * k]), float(tokens[i + 2 + 2 * k])) for k in range(arity)
        ]
        i += 1 + 2 * arity
        if command == "M":
            here = coords[0]
            continue
        control = [here, *coords]
        for step in range(steps + 1):
            t = step / steps
            layer = control
            while len(layer) > 1:  # de Casteljau
                layer = [
                    (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t) for a, b in pairwise(layer)
                ]
            points.append(layer[0])
        here = coords[-1]
    return points


def test_no_line_crosses_a_box():
    """Issue 27, defect 10: the arcs ran through the boxes they passed (and their own)."""
    for model in (Enquiry, Operation):
        svg = render_svg(model)
        boxes = [
            tuple(map(float, m))
            for m in re.findall(
                r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg
            )
        ]
        paths = re.findall(r'<path class="fsm-edge[^"]*" d="([^"]+)"', svg)
        assert paths
        for d in paths:
            for px, py in _points_along(d):
                for x, y, w, h in boxes:
                    inside = x + 3 < px < x + w - 3 and y + 3 < py < y + h - 3
                    assert not inside, (model.__name__, d, (x, y, w, h))


def test_every_label_fits_its_box():
    svg = render_svg(Enquiry)
    width = float(re.search(r'<rect [^>]*width="([\d.]+)"', svg).group(1))
    longest = max(len(label) for _, label in fsm_graph(Enquiry)[0])
    assert width >= longest * 7 + 20  # "submission unknown" at 11.5 px bold
