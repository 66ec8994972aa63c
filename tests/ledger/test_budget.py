"""ledger.budget: a function run in a child process within a CPU and a memory budget. Bounds
proven by what the kernel counted (the child's CPU time, the signal that ended it), never by
the wall clock."""

import pytest

from ledger import budget

pytestmark = pytest.mark.usefixtures("child_process")


def _square(n):
    return n * n


def _spin():
    while True:
        pass


def _grow(step):
    kept = []
    while True:
        kept.append(bytearray(step))


def _refuse(message):
    raise ValueError(message)


class Unpicklable(Exception):
    def __init__(self, a, b):
        super().__init__(a)
        self.b = b


def _raise_unpicklable():
    raise Unpicklable("odd", lambda: None)


def test_the_childs_result_comes_back():
    assert budget.run(_square, 12, cpu_seconds=5) == 144


def test_the_childs_exception_is_raised_in_the_parent():
    with pytest.raises(ValueError, match="not a number"):
        budget.run(_refuse, "not a number", cpu_seconds=5)


def test_an_exception_that_cannot_travel_is_still_told():
    with pytest.raises(budget.ChildFailed):
        budget.run(_raise_unpicklable, cpu_seconds=5)


def test_a_child_that_never_stops_computing_is_ended_by_its_cpu_budget():
    """The kernel's RLIMIT_CPU ends it: the CPU time it was allowed, and one second's grace
    for the hard limit, is all it used."""
    with pytest.raises(budget.Exceeded) as caught:
        budget.run(_spin, cpu_seconds=1)
    assert caught.value.what == "cpu"
    assert 0 < caught.value.cpu_seconds <= 2.5
    assert "more than 1 s of CPU" in str(caught.value)


def test_a_child_that_grows_without_end_is_stopped_by_its_memory_budget():
    """64 MB more than the parent has: the child's allocations fail there, and the parent
    holds none of it."""
    with pytest.raises(budget.Exceeded) as caught:
        budget.run(_grow, 8 * 2**20, cpu_seconds=30, memory_bytes=64 * 2**20)
    assert caught.value.what == "memory"
    assert "more than 64 MB" in str(caught.value)


def test_the_parents_database_connection_survives_the_child(db):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert budget.run(_square, 3, cpu_seconds=5) == 9
    with connection.cursor() as cursor:
        cursor.execute("SELECT 2")
        assert cursor.fetchone() == (2,)


def test_a_child_ended_by_its_cpu_budget_leaves_no_core_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(budget.Exceeded):
        budget.run(_spin, cpu_seconds=1)
    assert list(tmp_path.iterdir()) == []
