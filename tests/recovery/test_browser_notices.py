"""The e-mail pages in a real headless Chromium at 1440x900, with long and hostile values: the
Messages page (every template with its sample), a person's own page (/console/me/), and the
page of a message to an operator that failed (no enquiry)."""

from __future__ import annotations

from django.db import transaction

from ledger.models import Integration, Operation, OperationState
from recovery.models import OperatorNotice
from tests.recovery.browser import BROWSER
from tests.recovery.test_browser_config import HOSTILE, LONG, login, shot, wide  # noqa: F401

pytestmark = BROWSER


def test_messages_page(wide, people):  # noqa: F811
    login(wide, people["admin"])
    wide.goto(wide.base + "/console/messages/")
    wide.wait_for_selector("#notice-operator_digest")
    # The residents' five messages and the operators' digest.
    assert wide.locator("section.notice").count() == 6
    shot(wide, "messages")
    assert wide.js_errors == []


def test_my_page_and_a_failed_message_to_an_operator(wide, people, integrations_rows):  # noqa: F811
    from ledger.services import propose_message

    casey = people["coordinator"]
    casey.email = ""
    casey.save()
    for i in range(3):
        OperatorNotice.objects.create(
            user=casey,
            kind=OperatorNotice.ASSIGNED,
            key=f"k{i}",
            title=f"{HOSTILE} {LONG}"[:300],
            link="/console/",
        )
    with transaction.atomic():
        op, _ = propose_message(
            "operator:1:notify.send:operator_digest:20261201T1400Z",
            {
                "to": "casey@example.org",
                "template": "operator_digest",
                "reference": "operator casey, 1 Dec 2026, 14:00 GMT",
                "person": HOSTILE,
                "count": 1,
                "items": [{"what": "Assigned to you", "title": LONG, "link": "/console/"}],
                "interval": 15,
            },
        )
        op = Operation.objects.get(pk=op.pk)
        op.submit(actor="system:test", reason="claimed")
        op.attention = "invalid"
        op.last_error_message = "550 5.1.1 <casey@example.org>: " + LONG
        op.fail(actor="system:test", reason="550")
        op.save()
    OperatorNotice.objects.filter(key="k0").update(operation=op)
    assert Operation.objects.get(pk=op.pk).state == OperationState.FAILED
    assert Integration.objects.filter(name="notify").exists()

    login(wide, casey)
    wide.goto(wide.base + "/console/me/")
    wide.wait_for_selector("text=no address")
    shot(wide, "my-messages")
    login(wide, people["admin"])
    wide.goto(wide.base + f"/console/operations/{op.pk}/")
    wide.wait_for_selector("text=A message to an operator")
    shot(wide, "operator-message-failed")
    wide.goto(wide.base + "/console/")
    wide.wait_for_selector(f"[data-key='{op.pk}']")
    shot(wide, "queue-with-operator-message")
    assert wide.js_errors == []
