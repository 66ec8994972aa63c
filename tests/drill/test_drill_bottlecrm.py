"""`manage.py drill` against a real BottleCRM: the CRM row of kind bottlecrm (as an admin would
configure it), the drill's fault proxy in front of it, every case counted at BottleCRM."""

import json
import os
import subprocess
import sys

import pytest

from ledger.integrations import ensure_integrations
from ledger.models import Integration
from recovery.models import DrillRun
from tests.drill.test_drill_command import DESIGN_TABLE, integration_settings
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

pytestmark = [pytest.mark.slow, pytest.mark.bottlecrm, pytest.mark.django_db(transaction=True)]


def test_the_drill_against_bottlecrm_runs_every_case_there_and_names_it(bottlecrm, tmp_path):
    ensure_integrations()
    Integration.objects.filter(name="crm").update(
        kind="bottlecrm", base_url=bottlecrm.url, token=bottlecrm.token
    )
    before = integration_settings()
    crm_before = Integration.objects.values("kind", "base_url", "token").get(name="crm")
    json_path, html_path = tmp_path / "drill.json", tmp_path / "drill.html"

    finished = subprocess.run(
        [sys.executable, "manage.py", "drill", "--json", str(json_path), "--html", str(html_path)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DATABASE_URL": child_database_url()},
        capture_output=True,
        text=True,
        timeout=1500,
        start_new_session=True,
    )
    output = (finished.stdout + finished.stderr)[-6000:]
    assert json_path.exists(), output
    report = json.loads(json_path.read_text())

    destination = report["destination"]
    assert (destination["name"], destination["kind"]) == ("BottleCRM", "bottlecrm"), destination
    assert destination["url"] == bottlecrm.url
    assert destination["proxy"].startswith("http://127.0.0.1:")
    assert destination["proxy"] != bottlecrm.url
    assert "look-up" in destination["counted_by"]
    assert f"BottleCRM (kind bottlecrm) at {bottlecrm.url}" in report["integration"]

    assert [case["name"] for case in report["cases"]] == DESIGN_TABLE
    for case in report["cases"]:
        assert case["passed"] is True, f"{case['name']}: {case['observed']}\n{output}"
        # The cases that write to the CRM name it; the documents', appointments' and e-mail
        # cases use only their own destination.
        if not case["destination"].startswith(("documents:", "appointments:", "notify:")):
            assert "crm: BottleCRM (bottlecrm) through the fault proxy" in case["destination"]
    by_name = {case["name"]: case for case in report["cases"]}
    documents = by_name["document access removed"]["destination"]
    assert documents.startswith("documents: WsgiDAV (webdav) through the fault proxy")
    assert "notify: sandbox" in by_name["CRM succeeds, notification fails"]["destination"]
    assert finished.returncode == 0, output

    html = html_path.read_text()
    assert "BottleCRM" in html and "<code>bottlecrm</code>" in html
    assert "through the fault proxy at" in html
    assert DrillRun.objects.get().report["destination"]["kind"] == "bottlecrm"

    # The rows are as they were: the CRM back at BottleCRM itself, not at the drill's proxy.
    assert integration_settings() == before
    assert Integration.objects.values("kind", "base_url", "token").get(name="crm") == crm_before
