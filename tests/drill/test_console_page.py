"""The console's drill page: the latest report with its time and who ran it; an admin records a
reviewer's conclusion, kept with the run; nobody else may."""

import re

import pytest
from django.utils import timezone

from recovery.models import DrillConclusion, DrillRun

URL = "/console/drill/"


def make_run(**extra):
    now = timezone.now()
    report = {
        "integration": "sandbox at http://127.0.0.1:1",
        "started_at": now.isoformat(),
        "finished_at": now.isoformat(),
        "run": "20260101000000abcd",
        "cases": [
            {
                "name": "valid new event",
                "input_reference": "DRILL-20260101000000abcd-valid",
                "expected": "one intake, one acknowledged destination record",
                "observed": "intake 202, ENQ-TEST0001; enquiry confirmed",
                "destination_records": 1,
                "passed": True,
            }
        ],
    }
    defaults = dict(
        started_at=now,
        finished_at=now,
        integration=report["integration"],
        ran_by="ops@host",
        passed=True,
        cases_total=1,
        cases_passed=1,
        report=report,
    )
    defaults.update(extra)
    return DrillRun.objects.create(**defaults)


@pytest.mark.django_db
def test_no_run_yet(client, make_user):
    client.force_login(make_user("coordinator"))
    response = client.get(URL)
    assert response.status_code == 200
    assert "No drill has run yet" in response.content.decode()


@pytest.mark.django_db
def test_the_latest_run_is_shown_with_who_ran_it(client, make_user):
    make_run(ran_by="older@host", started_at=timezone.now() - timezone.timedelta(days=1))
    make_run()
    client.force_login(make_user("coordinator"))
    page = client.get(URL).content.decode()
    assert "ops@host" in page and "DRILL-20260101000000abcd-valid" in page
    assert "Every case passed" in page
    assert "older@host" in page  # listed under earlier runs
    assert "Record conclusion" not in page  # a coordinator cannot record one


@pytest.mark.django_db
def test_an_admin_records_a_conclusion_kept_with_the_run(client, make_user):
    run = make_run()
    admin = make_user("admin")
    client.force_login(admin)
    response = client.post(URL, {"run": run.pk, "conclusion": "Checked the sandbox counts."})
    assert response.status_code == 302
    conclusion = DrillConclusion.objects.get()
    assert (conclusion.run, conclusion.reviewer) == (run, admin)
    assert conclusion.at is not None
    page = client.get(URL).content.decode()
    assert "Checked the sandbox counts." in page and admin.get_username() in page


@pytest.mark.django_db
def test_others_may_not_record_a_conclusion(client, make_user):
    run = make_run()
    client.force_login(make_user("reviewer"))
    response = client.post(URL, {"run": run.pk, "conclusion": "fine"})
    assert response.status_code == 403
    assert not DrillConclusion.objects.exists()


@pytest.mark.django_db
def test_an_empty_conclusion_is_refused(client, make_user):
    run = make_run()
    client.force_login(make_user("admin"))
    client.post(URL, {"run": run.pk, "conclusion": "  "})
    assert not DrillConclusion.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("run", ["abc", "٣", "²", "1_000", "-1", "0", "99999999999", ""])
def test_a_run_that_is_not_a_run_number_is_refused_clearly(client, make_user, run):
    made = make_run()
    client.force_login(make_user("admin"))
    response = client.post(URL, {"run": run, "conclusion": "looked at it"})
    assert response.status_code == 400
    assert "not a run number" in response.content.decode()
    assert not DrillConclusion.objects.exists()
    # The page still shows the latest run to conclude on.
    assert made.ran_by in response.content.decode()


def test_drill_report_marks_failures_and_links_references(settings):
    from recovery.drill.report import render_html

    settings.CONSOLE_URL = "https://console.example.org/"
    report = {
        "integration": "sandbox",
        "started_at": "2026-12-01T14:00:00+00:00",
        "finished_at": "2026-12-01T14:05:00+00:00",
        "run": "r1",
        "ran_by": "casey",
        "passed": False,
        "cases": [
            {
                "name": "ok case",
                "passed": True,
                "enquiry_reference": "HO-1",
                "input_reference": "e1",
            },
            {
                "name": "broken case",
                "passed": False,
                "enquiry_reference": "HO-2, HO-3, not/a ref",
                "input_reference": "e2",
            },
        ],
    }
    html = render_html(report)
    bad = re.search(r'<tr class="bad">.*?</tr>', html, re.S)[0]
    assert "✗ FAILED" in bad and "broken case" in bad
    assert '<a href="https://console.example.org/console/enquiries/HO-2/">HO-2</a>' in bad
    assert '<a href="https://console.example.org/console/enquiries/HO-3/">HO-3</a>' in bad
    assert ", not/a ref</small>" in bad  # shown, not linked, never a broken page
    assert "✗ FAILED" not in re.search(r'<tr class="ok">.*?</tr>', html, re.S)[0]
    assert "1 Dec 2026, 14:00 GMT" in html
