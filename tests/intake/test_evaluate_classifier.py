import json
from io import StringIO

import pytest
from django.core.management import call_command

from intake.evaluation import LABELLED, load_labelled


def run(*args):
    out = StringIO()
    call_command("evaluate_classifier", *args, stdout=out)
    return out.getvalue()


def test_labelled_set_has_the_hard_cases():
    rows = load_labelled()
    kinds = {row["kind"] for row in rows}
    assert len(rows) >= 40
    assert {"clear", "ambiguous", "contradictory", "retired"} <= kinds
    assert {row["label"] for row in rows} == {"website", "repairs", "waste", "unresolved"}
    assert len({row["id"] for row in rows}) == len(rows)


@pytest.mark.django_db
def test_reports_accuracy_abstention_and_confident_errors():
    data = json.loads(run("--json"))
    assert data["provider"] == "keywords"
    assert data["messages"] == len(load_labelled())
    assert data["answered"] + data["abstained"] == data["messages"]
    assert 0 < data["accuracy_on_answered"] <= 1
    assert data["abstained"] > 0
    # Negations fool keywords: the set is built to show it, and the report must say so.
    assert data["confidently_wrong"] > 0
    assert len(data["outcomes"]) == data["messages"]
    for outcome in data["outcomes"]:
        assert outcome["label"] in {"website", "repairs", "waste", "unresolved"}
        assert outcome["label"] != "parking"  # retired: never an answer


@pytest.mark.django_db
def test_plain_report_names_the_three_numbers():
    text = run()
    assert "accuracy on answered:" in text
    assert "abstained:" in text
    assert "confidently wrong" in text
    assert str(LABELLED) in text


@pytest.mark.django_db
def test_from_db_uses_the_admins_keywords(demo_categories):
    demo_categories["waste"].keywords = ""
    demo_categories["waste"].save()
    data = json.loads(run("--json", "--from-db"))
    assert data["outcomes"]
    assert all(o["label"] != "waste" for o in data["outcomes"])
