"""`bench/run.py --quick` end to end: real web server, cluster and sandbox, tiny sizes.

Checks only that the run completes and writes every figure the issue asks for; never a time
(the benchmark's figures are design goals, read in docs/benchmarks.md, not assertions).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

KEYS = {
    "intake": {"events_per_s", "baseline_per_s", "ratio", "p50_ms", "p99_ms"},
    "delivery": {
        "confirmed_per_s",
        "baseline_per_s",
        "ratio",
        "duplicates",
        "transport_floor",
        "ceiling",
    },
    "reconciliation": {"reconciled_per_s", "baseline_per_s", "ratio"},
    "queue_page": {
        "operations",
        "unresolved",
        "p50_ms",
        "p95_ms",
        "queries_first",
        "queries_filtered",
    },
    "drain": {
        "limit_per_s",
        "limit_asked_per_s",
        "capacity_per_s",
        "rate_per_s",
        "ratio",
        "max_in_any_second",
        "throttled",
        "duplicates",
        "missing",
    },
    "latency": {
        "p50_ms",
        "p99_ms",
        "capacity_per_s",
        "offered_per_s",
        "achieved_offered_per_s",
        "offered_met",
        "approvals_behind_schedule",
        "lag_p99_ms",
    },
    "acknowledgement": {
        "capacity_per_s",
        "offered_per_s",
        "achieved_per_s",
        "p50_ms",
        "p99_ms",
        "duplicates",
        "not_202",
    },
    "digest": {"items", "build_ms", "select_ms", "times_select", "cpu_ms"},
    "resident": {
        "page_p50_ms",
        "page_p99_ms",
        "baseline_p99_ms",
        "page_not_302",
        "page_revisions_missing",
        "inbound_cpu_ms_per_message",
        "baseline_cpu_ms_per_request",
        "inbound_not_200",
        "inbound_revisions_missing",
    },
}


def test_quick_bench_writes_every_figure(tmp_path):
    out = tmp_path / "latest.json"
    run = subprocess.run(
        [
            sys.executable,
            "bench/run.py",
            "--quick",
            "--runs",
            "1",
            "--events",
            "40",
            "--deliveries",
            "10",
            "--reconciliations",
            "10",
            "--queue-operations",
            "500",
            "--queue-unresolved",
            "50",
            "--page-samples",
            "2",
            "--drains",
            "40",
            "--latency-seconds",
            "2",
            "--acknowledgements",
            "10",
            "--digest-items",
            "50",
            "--resident-answers",
            "6",
            "--bench-database",
            f"handover_bench_smoke_{os.getpid()}",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    assert run.returncode == 0, f"bench failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    results = json.loads(out.read_text())
    for section, keys in KEYS.items():
        assert keys <= set(results[section]), (section, sorted(results[section]))
    assert results["delivery"]["duplicates"] == 0
    # The delivery ceiling delivered every one of its rows (it raises otherwise) and was metered.
    delivery_ceiling = results["delivery"]["ceiling"]
    assert delivery_ceiling["confirmed_per_s"] > 0
    assert delivery_ceiling["cpu_ms_per_op"]["cluster"] > 0, delivery_ceiling
    # The drain ran with one cluster and with two, and lost or doubled nothing.
    assert [r["clusters"] for r in results["drain"]["runs"]] == [1, 2]
    assert results["drain"]["duplicates"] == results["drain"]["missing"] == 0
    # R is kept well below what this machine delivered in the same run.
    drain = results["drain"]
    assert drain["limit_per_s"] <= max(1, round(drain["capacity_per_s"] / 2))
    # CPU by process was taken: the cluster and the sandbox did work in both sections.
    for section in ("delivery", "reconciliation"):
        cpu = results[section]["cpu_ms_per_op"]
        assert cpu["cluster"] > 0 and cpu["sandbox"] > 0, (section, cpu)
    # How the senders' connections sat on the two web server processes, for each run.
    (split,) = results["intake"]["connections_per_worker"]
    assert len(split) == 2 and 0 < sum(split) <= 8, split
    for figures in (results["intake"], results["intake"]["framework_ceiling"]):
        assert figures["cpu_ms_per_request"]["web"] > 0, figures
    # The framework ceiling answered every request (a 5xx there would make its figure a lie).
    ceiling = results["intake"]["framework_ceiling"]
    assert ceiling["errors"] == 0 and ceiling["per_s"] > 0
    assert results["queue_page"]["operations"] == 500
    assert "figure" in run.stdout  # the table was printed


def _quick(tmp_path, *args) -> tuple[dict, str]:
    out = tmp_path / "latest.json"
    run = subprocess.run(
        [
            sys.executable,
            "bench/run.py",
            "--quick",
            "--runs",
            "1",
            *args,
            "--bench-database",
            f"handover_bench_smoke_{os.getpid()}",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    assert run.returncode == 0, f"bench failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(out.read_text()), run.stdout


def test_quick_digest_builds_one_message_for_every_notice(tmp_path):
    results, stdout = _quick(tmp_path, "--only", "digest", "--digest-items", "30")
    digest = results["digest"]
    assert KEYS["digest"] <= set(digest), sorted(digest)
    assert digest["items"] == 30
    assert len(digest["build_ms_by_run"]) == 1
    assert "operators' digest build" in stdout


def test_quick_acknowledgement_matches_every_event_to_one_message(tmp_path):
    results, stdout = _quick(
        tmp_path,
        "--only",
        "acknowledgement",
        "--acknowledgements",
        "6",
        "--latency-seconds",
        "2",
    )
    ack = results["acknowledgement"]
    assert KEYS["acknowledgement"] <= set(ack), sorted(ack)
    # Every event was answered 202 and acknowledged exactly once at the relay.
    assert ack["not_202"] == 0 and ack["duplicates"] == 0
    assert ack["count"] >= 20 and ack["capacity_per_s"] > 0
    assert "intake to SMTP 250" in stdout


def test_quick_resident_section_lands_every_answer_once_and_prints_both_figures(tmp_path):
    results, stdout = _quick(
        tmp_path, "--only", "resident", "--resident-answers", "8", "--resident-clients", "4"
    )
    resident = results["resident"]
    assert KEYS["resident"] <= set(resident), sorted(resident)
    # Every page POST and every inbound post was a real answer: one revision by the resident.
    assert resident["page_not_302"] == resident["page_revisions_missing"] == 0
    assert resident["inbound_not_200"] == resident["inbound_revisions_missing"] == 0
    assert resident["inbound_cpu_ms_per_message"]["web"] > 0
    assert resident["baseline_cpu_ms_per_request"]["web"] > 0
    assert "resident page POST p99" in stdout and "inbound reply CPU/message" in stdout


def test_quick_latency_reports_the_achieved_rate_beside_the_offered(tmp_path):
    results, stdout = _quick(
        tmp_path, "--only", "latency", "--deliveries", "10", "--latency-seconds", "2"
    )
    latency = results["latency"]
    assert KEYS["latency"] <= set(latency), sorted(latency)
    assert latency["approvers"] == 4
    assert 0 <= latency["approvals_behind_schedule"] <= latency["count"]
    assert "achieved" in stdout
    assert ("NOT the offered rate" in stdout) is not latency["offered_met"]
