"""config.postgresql: Django's PostgreSQL backend, a few rows bulk-inserted as VALUES."""

import datetime

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from config.postgresql.compiler import UNNEST_FROM_ROWS
from ledger.models import JournalEntry

pytestmark = pytest.mark.django_db

AWKWARD = [
    "plain",
    'it\'s "quoted" \\ back\\slashed',
    "ünïcödé ✓ and emoji 🙂",
    "",
    '{"looks": ["like", "an array"]}',
    "NULL",
]


def _rows(count, tag):
    at = datetime.datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=datetime.UTC)
    return [
        JournalEntry(
            at=at + datetime.timedelta(microseconds=i),
            subject_type="bench.row",
            subject_id=f"{tag}-{i}",
            action="test.bulk",
            from_state="",
            to_state="b" * 32,
            actor="system:test",
            reason=AWKWARD[i % len(AWKWARD)],
            evidence={"i": i, "text": AWKWARD[i % len(AWKWARD)], "none": None, "list": [1, "2"]},
        )
        for i in range(count)
    ]


def _insert(count, tag):
    with CaptureQueriesContext(connection) as queries:
        JournalEntry.objects.bulk_create(_rows(count, tag))
    (sql,) = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    return sql


def _stored(tag):
    fields = ["at", "subject_id", "to_state", "reason", "evidence", "enquiry_id", "actor_user_id"]
    return [
        {**row, "subject_id": row["subject_id"].split("-", 1)[1]}
        for row in JournalEntry.objects.filter(subject_id__startswith=f"{tag}-")
        .order_by("at")
        .values(*fields)
    ]


def test_the_backend_is_django_postgresql_underneath():
    assert connection.vendor == "postgresql"
    assert type(connections["default"]).__module__ == "config.postgresql.base"


@pytest.mark.parametrize("count", [2, UNNEST_FROM_ROWS - 1])
def test_a_few_rows_are_one_values_insert(count):
    sql = _insert(count, "few")
    assert "UNNEST" not in sql and sql.count("), (") == count - 1
    assert len(_stored("few")) == count


def test_a_batch_is_still_one_unnest_insert():
    sql = _insert(UNNEST_FROM_ROWS, "batch")
    assert "UNNEST" in sql
    assert len(_stored("batch")) == UNNEST_FROM_ROWS


def test_both_ways_store_the_same_values():
    count = UNNEST_FROM_ROWS - 1
    _insert(count, "values")
    _insert(count + 1, "unnest")
    values, unnest = _stored("values"), _stored("unnest")
    assert values == unnest[:count]
    assert values[1]["reason"] == AWKWARD[1] and values[2]["evidence"]["text"] == AWKWARD[2]
    assert values[0]["at"] == datetime.datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=datetime.UTC)
