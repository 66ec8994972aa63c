"""The lifecycle picture: drawn from the FSM definitions, current state marked."""

import re

from django.template import Context, Template

from intake.models import Enquiry, EnquiryState
from ledger.models import Op, Operation
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
    svg = render_svg(Operation, current=Op.UNKNOWN, visited={"proposed", "approved"})
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
