import json
from pathlib import Path

import pytest

from tests.intake.factories import CategoryFactory
from tests.intake.signing import signed_headers

FIXTURES = Path(__file__).parent / "fixtures"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# A second secret for the same source, as during a rotation.
NEW_SECRET = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3"
OTHER_SOURCE_SECRET = "whsec_c2Vjb25kLXNvdXJjZS1zZWNyZXQtMDEyMzQ1Njc="
URL = "/intake/events/website/"


def load_fixture(name: str):
    return json.loads((FIXTURES / name).read_text())


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@pytest.fixture(autouse=True)
def intake_secrets(settings):
    settings.INTAKE_SECRETS = {"website": [SECRET, NEW_SECRET], "partner": [OTHER_SOURCE_SECRET]}
    return settings.INTAKE_SECRETS


@pytest.fixture
def post_event(client):
    """post_event(body_bytes, **overrides) -> response; signed with the website secret."""

    def post(body: bytes, *, url=URL, secret=SECRET, headers=None, content_type=None, **sign):
        signed = signed_headers(body, secret, **sign)
        signed.update(headers or {})
        return client.generic(
            "POST",
            url,
            body,
            content_type=content_type or "application/json",
            headers=signed,
        )

    return post


@pytest.fixture
def demo_categories(db):
    """The demo set: website, repairs, waste active; parking retired."""
    rows = json.loads(
        (Path(__file__).resolve().parents[2] / "intake/classifier_eval/categories.json").read_text()
    )
    return {
        row["slug"]: CategoryFactory(
            slug=row["slug"],
            name=row["name"],
            active=row["active"],
            keywords="\n".join(row["keywords"]),
        )
        for row in rows
    }
