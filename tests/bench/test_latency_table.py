"""The latency row says at what rate its p99 was taken: an offered rate the approvers did not
meet is not the p99's rate (bench/drain.py, ``offered_met``). No time is measured here."""

from bench.run import table

LATENCY = {
    "p50_ms": 150.0,
    "p99_ms": 900.0,
    "offered_per_s": 37.0,
    "offered_from": "--latency-rate",
    "capacity_per_s": 30.0,
    "capacity_from": "a burst",
    "achieved_offered_per_s": 31.0,
    "approvals_behind_schedule": 726,
    "count": 742,
    "late_after_ms": 50.0,
    "lag_p99_ms": 4000.0,
}


def test_a_rate_not_met_is_named_beside_the_p99():
    text = table({"latency": {**LATENCY, "offered_met": False}})
    assert "approval to confirmed p99 at 31.0/s, NOT the offered rate" in text


def test_a_rate_met_reads_as_before():
    text = table({"latency": {**LATENCY, "offered_met": True}})
    assert "NOT the offered rate" not in text
    assert "approval to confirmed p99 " in text
