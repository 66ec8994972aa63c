from io import StringIO

from django.core.management import call_command

from intake.diagram import DIAGRAM_FILE, INTAKE_FILE, expected_files


def test_docs_match_the_transition_methods():
    """If this fails, a transition changed: run `python manage.py state_diagram --write`."""
    expected = expected_files()
    assert expected
    for path, text in expected.items():
        assert path.read_text() == text, f"{path} is stale: run manage.py state_diagram --write"


def test_both_machines_are_drawn():
    text = DIAGRAM_FILE.read_text()
    assert "## intake.Enquiry" in text
    assert "## ledger.Operation" in text
    assert "<!-- state-diagram:intake.enquiry -->\n```mermaid" in INTAKE_FILE.read_text()


def test_check_command_passes():
    call_command("state_diagram", "--check", stdout=StringIO())
