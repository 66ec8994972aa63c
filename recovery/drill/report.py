"""The drill's evidence report: JSON (the record), HTML (for people), a DrillRun row."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from recovery.models import DrillRun


def build(*, integration: str, started_at, finished_at, cases, run_id="", ran_by="") -> dict:
    return {
        "integration": integration,
        "started_at": started_at.isoformat(),
        "finished_at": finished_at.isoformat(),
        "cases": [case.as_dict() for case in cases],
        "run": run_id,
        "ran_by": ran_by,
        "passed": bool(cases) and all(case.passed for case in cases),
    }


def render_html(report: dict, *, standalone: bool = True) -> str:
    # The file is opened outside the console: its links to enquiries are absolute.
    console_url = settings.CONSOLE_URL.rstrip("/") if standalone else ""
    return render_to_string(
        "recovery/drill_report.html",
        {"report": report, "standalone": standalone, "console_url": console_url},
    )


def write(report: dict, *, json_path: Path | None = None, html_path: Path | None = None):
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    if html_path is not None:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(render_html(report))


def save(report: dict) -> DrillRun:
    cases = report["cases"]
    parse = timezone.datetime.fromisoformat
    return DrillRun.objects.create(
        started_at=parse(report["started_at"]),
        finished_at=parse(report["finished_at"]),
        integration=report["integration"][:300],
        ran_by=(report.get("ran_by") or "")[:150],
        passed=report["passed"],
        cases_total=len(cases),
        cases_passed=sum(1 for c in cases if c["passed"]),
        report=report,
    )
