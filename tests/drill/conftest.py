"""Fixtures of the drill tests: the ledger's real clusters on the test database."""

from tests.ledger.conftest import start_cluster  # noqa: F401
