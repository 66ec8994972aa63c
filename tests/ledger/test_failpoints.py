"""ledger.failpoints: armed for any operation, or for one by its id or idempotency key."""

from types import SimpleNamespace

import pytest

from ledger import failpoints

OURS = SimpleNamespace(pk="11111111-1111-1111-1111-111111111111", idempotency_key="e1:crm:r1")
OTHER = SimpleNamespace(pk="22222222-2222-2222-2222-222222222222", idempotency_key="e2:crm:r1")


@pytest.mark.parametrize(
    ("armed_as", "fires_for_ours", "fires_for_other"),
    [
        ("after_call_succeeded", True, True),
        (f"after_call_succeeded@{OURS.pk}", True, False),
        (f"after_call_succeeded@{OURS.idempotency_key}", True, False),
        ("during_call", False, False),
        (f"during_call@{OURS.pk}", False, False),
    ],
)
def test_a_failpoint_fires_for_what_it_was_armed_for(
    settings, armed_as, fires_for_ours, fires_for_other
):
    settings.FAILPOINTS = [armed_as]
    assert failpoints.armed("after_call_succeeded", OURS) is fires_for_ours
    assert failpoints.armed("after_call_succeeded", OTHER) is fires_for_other


def test_inside_a_call_the_operation_being_called_is_the_one_asked_about(settings):
    settings.FAILPOINTS = [f"during_call@{OURS.idempotency_key}"]
    assert not failpoints.armed("during_call")
    with failpoints.operation(OTHER):
        assert not failpoints.armed("during_call")
    with failpoints.operation(OURS):
        assert failpoints.armed("during_call")
    assert not failpoints.armed("during_call")
