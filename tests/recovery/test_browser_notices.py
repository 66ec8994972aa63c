"""The e-mail pages in a real headless Chromium at 1440x900, with long and hostile values: the
Messages page (every template with its sample), a person's own page (/console/me/), and the
page of a message to an operator that failed (no enquiry)."""

from __future__ import annotations

from django.db import transaction

from ledger.models import Integration, Operation, OperationState
from ledger.notices import NOTICES
from ledger.wording import KINDS
from recovery.models import OperatorNotice
from tests.recovery.browser import BROWSER
from tests.recovery.test_browser_config import HOSTILE, LONG, login, shot, wide  # noqa: F401

pytestmark = BROWSER


def test_messages_page(wide, people):  # noqa: F811
    login(wide, people["admin"])
    wide.goto(wide.base + "/console/messages/")
    wide.wait_for_selector("#notice-operator_digest")
    # The residents' five messages, the new link and the operators' digest.
    assert wide.locator("section.notice").count() == len(KINDS) + len(NOTICES)
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


def _not_sent(user, message, *, status, kind="transient"):
    """A message to ``user`` the relay refused (its columns as the engine leaves them)."""
    from django.utils import timezone

    from ledger.services import propose_message

    username, email = user.get_username(), user.email
    key = f"operator:{user.pk}:notify.send:operator_digest:20261201T1400Z"
    with transaction.atomic():
        op, _ = propose_message(
            key[:200],
            {
                "to": email,
                "template": "operator_digest",
                "reference": f"operator {username}, 1 Dec 2026, 14:00 GMT",
                "person": username,
                "count": 1,
                "items": [{"why": "Assigned to you", "title": LONG, "link": "/console/"}],
                "interval": 15,
            },
        )
        op = Operation.objects.get(pk=op.pk)
        op.submit(actor="system:test", reason="claimed")
        op.attempt_count = 3
        op.last_error_class, op.last_error_status = kind, status
        op.last_error_message = message
        op.last_attempted_at = timezone.now()
        op.attention = "retry_budget_exhausted" if kind == "transient" else "invalid"
        op.fail(actor="system:test", reason=message[:100])
        op.save()
    return op


def test_who_could_not_be_told_and_the_people_page_at_1440_and_390(
    wide,  # noqa: F811
    people,
    make_user,
    integrations_rows,
):
    from django.contrib.auth import get_user_model

    long_name = ("a-very-long-username-" * 7)[:150]
    long_address = "o'brien+" + "x" * 50 + "@" + ("b" * 60 + ".") * 3 + "example"
    person = make_user("coordinator", username=long_name, email=long_address)
    casey = make_user("reviewer", username="casey", email="casey@council.example")
    nobody = make_user("coordinator", username="robin")
    for user in (person, casey):
        op = _not_sent(
            user,
            f"not connected to 127.0.0.1:2525: {HOSTILE} {LONG}"
            if user == person
            else "recipient casey@council.example refused: 550 5.1.1 User unknown",
            status=None if user == person else 550,
            kind="transient" if user == person else "invalid",
        )
        assert op.state == OperationState.FAILED
    OperatorNotice.objects.create(
        user=nobody, kind=OperatorNotice.ASSIGNED, key="robin:1", title=HOSTILE, link="/console/"
    )
    get_user_model().objects.filter(pk=people["reviewer"].pk).update(email="")

    login(wide, people["admin"])
    for width in (1440, 390):
        wide.set_viewport_size({"width": width, "height": 900 if width > 400 else 844})
        suffix = "" if width > 400 else "-phone"
        wide.goto(wide.base + "/console/dashboard/")
        lines = wide.locator("[data-untold]")
        assert lines.count() == 3
        said = " ".join(lines.all_inner_texts())
        assert f"Not told: {long_name} — the relay could not be reached at" in said
        assert "Not told: casey — the relay refused the address (550)" in said
        assert "Not told: robin — no e-mail address." in said
        assert HOSTILE not in said and "<script>" not in wide.content().split("<main")[1]
        assert wide.evaluate("document.documentElement.scrollWidth") <= width
        shot(wide, f"dashboard-not-told{suffix}")
        wide.goto(wide.base + "/console/people/")
        wide.wait_for_selector(f"text={long_address[:30]}")
        assert wide.evaluate("document.documentElement.scrollWidth") <= width
        shot(wide, f"people-addresses{suffix}")
        wide.goto(wide.base + f"/console/people/{casey.pk}/")
        assert wide.input_value("input[name=email]") == "casey@council.example"
        assert wide.evaluate("document.documentElement.scrollWidth") <= width
    # Set an address, with a reason: the page says what changed, never the address.
    wide.fill("input[name=email]", "casey.j@council.example")
    wide.fill("[name=reason]", "the old address bounced")
    wide.click("form.settings button[type=submit]")
    wide.wait_for_url(wide.base + "/console/people/")
    wide.goto(wide.base + f"/console/people/{casey.pk}/")
    history = wide.locator("table.history").inner_text()
    assert "E-mail address: an address → a new address" in history
    assert "council.example" not in history
    shot(wide, "person-address-phone")
    assert wide.js_errors == []
