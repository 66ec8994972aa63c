"""The fast tier (make test-fast: ``pytest -m "not slow"``) starts no process.

A test is marked ``slow`` by the fixtures it asks for (tests/conftest.py PROCESS_FIXTURES), and
a test that is not slow and starts a process anyway fails, named, at the moment it tries.
"""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROCESS_FIXTURES, StartedAProcess, pytest_collection_modifyitems

TESTS = Path(__file__).resolve().parent


def test_a_test_that_is_not_slow_cannot_start_a_process():
    with pytest.raises(StartedAProcess, match=r"test_fast_tier\.py.*not marked slow"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with pytest.raises(StartedAProcess):
        os.system("true")
    with pytest.raises(StartedAProcess):
        if os.fork() == 0:  # never reached while the guard holds; a child would leave at once
            os._exit(0)


@pytest.mark.slow
def test_a_slow_test_may_start_one():
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0


class _Item:
    def __init__(self, *fixturenames):
        self.fixturenames = list(fixturenames)
        self.markers = set()

    def add_marker(self, marker):
        self.markers.add(marker.name)


def test_asking_for_a_process_fixture_marks_a_test_slow():
    assert PROCESS_FIXTURES
    items = [_Item("db", name, "client") for name in sorted(PROCESS_FIXTURES)]
    plain = _Item("db", "client", "settings", "make_user")
    pytest_collection_modifyitems([*items, plain])
    assert all("slow" in item.markers for item in items)
    assert plain.markers == set()
    crm = _Item("bottlecrm")
    pytest_collection_modifyitems([crm])
    assert crm.markers == {"slow", "bottlecrm"}


def _fixtures_defined_under(root: Path) -> set[str]:
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                "fixture" in ast.unparse(decorator) for decorator in node.decorator_list
            ):
                names.add(node.name)
    return names


def test_every_process_fixture_named_is_a_fixture_of_the_suite():
    defined = _fixtures_defined_under(TESTS)
    assert defined
    assert defined >= PROCESS_FIXTURES, sorted(PROCESS_FIXTURES - defined)


def test_every_collected_test_that_asks_for_a_process_fixture_is_slow(request):
    items = request.session.items
    assert items  # this test at least
    unmarked = [
        item.nodeid
        for item in items
        if PROCESS_FIXTURES & set(item.fixturenames) and item.get_closest_marker("slow") is None
    ]
    assert unmarked == []
