import pytest

from intake.checks import intake_secrets_are_usable
from tests.intake.conftest import NEW_SECRET, SECRET


def ids(settings_value, settings):
    settings.INTAKE_SECRETS = settings_value
    return [e.id for e in intake_secrets_are_usable(None)]


def test_good_secrets_pass(settings):
    assert ids({"website": [SECRET, NEW_SECRET]}, settings) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["whsec_x"], ["intake.E001"]),
        ({"website": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, ["intake.E002"]),
        ({"website": []}, ["intake.E002"]),
        ({"website": ["not-prefixed"]}, ["intake.E003"]),
        ({"website": ["whsec_%%%"]}, ["intake.E003"]),
        ({"website": ["whsec_"]}, ["intake.E003"]),
    ],
)
def test_bad_secrets_fail_the_check(settings, value, expected):
    assert ids(value, settings) == expected
