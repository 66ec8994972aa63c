"""config.destinations: the one rule for a destination's address, and the environment's use."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import destinations
from config.env import env_address


@pytest.mark.parametrize(
    "address",
    [
        "http://127.0.0.1:8765",
        "https://crm.example.org/",
        "https://crm.example.org/api",
        "http://crm:8000",  # a service name on an internal network
        "http://[::1]:8080",
        "http://10.0.0.5:5432",  # a valid port: the check shows a summary, never a body
        "https://bücher.example",
    ],
)
def test_addresses_that_are_allowed(address):
    assert destinations.address_problem(address) is None


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("", destinations.EMPTY),
        ("crm.example.org", destinations.SCHEME),
        ("ftp://crm.example.org", destinations.SCHEME),
        ("javascript:alert(1)", destinations.SCHEME),
        ("http://user:pass@crm.example.org", destinations.CREDENTIALS),
        ("http://token@crm.example.org", destinations.CREDENTIALS),
        ("http://crm.example.org:99999", destinations.PORT),
        ("http://crm.example.org:0", destinations.PORT),
        ("http://crm.example.org:٣", destinations.PORT),
        ("http://crm.example.org:", destinations.PORT),
        ("http://[::1", destinations.HOST),
        ("http://-x-.org", destinations.HOST),
        ("http://", destinations.NO_HOST),
        ("https://crm.example.org/?a=1", destinations.QUERY),
        ("https://crm.example.org/#top", destinations.QUERY),
        ("http://crm.example.org/\x00", destinations.SPACES),
        ("http://crm example.org", destinations.SPACES),
        ("http://" + "a" * 300 + ".org", destinations.TOO_LONG),
        ("http://\ud800.org", destinations.HOST),
    ],
)
def test_addresses_that_are_refused_say_why(address, problem):
    assert destinations.address_problem(address) == problem


def test_an_address_is_shown_without_credentials():
    shown = destinations.shown("http://admin:pw-s3cret@crm.example.org:8080/api")
    assert "s3cret" not in shown and "admin" not in shown
    assert shown.endswith("crm.example.org:8080/api")


def test_the_environment_is_held_to_the_same_rule(monkeypatch):
    monkeypatch.setenv("CRM_BASE_URL", "http://user:pw@crm.example.org")
    with pytest.raises(ImproperlyConfigured, match=r"CRM_BASE_URL: .*user name or password"):
        env_address("CRM_BASE_URL", "http://127.0.0.1:8765")
    monkeypatch.setenv("CRM_BASE_URL", "https://crm.example.org")
    assert env_address("CRM_BASE_URL", "http://127.0.0.1:8765") == "https://crm.example.org"
