"""The backlog review after a resume: nothing is chosen to start with, an empty choice releases
nothing, and a summary of what will be sent (per action, oldest, newest) comes before release."""

import re
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ

from ledger import services
from ledger.models import Integration, JournalEntry, Operation


@pytest.fixture
def held(story, people):
    """Three held CRM writes and one notification on a resumed CRM, oldest first."""
    admin = people["admin"]
    ops = [story.operation("approved") for _ in range(3)]
    ops.append(story.operation("approved", action="notify.send", integration="crm"))
    now = timezone.now()
    for hours, op in zip((30, 20, 10, 5), ops, strict=True):
        Operation.objects.filter(pk=op.pk).update(created_at=now - timedelta(hours=hours))
    services.pause_integration("crm", actor=admin, reason="mapping changed")
    services.resume_integration("crm", actor=admin, reason="mapping fixed")
    return ops


def held_ids():
    return set(Operation.objects.filter(held=True).values_list("pk", flat=True))


def messages_of(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_backlog_starts_with_nothing_ticked(held, client_for):
    html = client_for("admin").get(reverse("recovery:backlog", args=["crm"])).content.decode()
    assert html.count('name="operations"') == 4
    assert not re.search(r"<input[^>]* checked", html)
    assert 'data-select-all="operations"' in html
    assert "<script>" not in html and "js/select-all.js" in html  # no inline script (CSP)


def test_an_empty_choice_releases_nothing(held, client_for):
    queued = OrmQ.objects.count()
    response = client_for("admin").post(
        reverse("recovery:release", args=["crm"]), {"reason": "all good", "confirmed": "1"}
    )
    assert response.status_code == 302
    assert any("nothing is released unless it is chosen" in m for m in messages_of(response))
    assert held_ids() == {op.pk for op in held}
    assert OrmQ.objects.count() == queued
    assert not JournalEntry.objects.filter(action="ledger.integration.backlog_released")


def test_the_choice_is_summarised_before_anything_is_sent(held, client_for):
    chosen = [held[0], held[2], held[3]]
    response = client_for("admin").post(
        reverse("recovery:release", args=["crm"]),
        {"reason": "checked <three> records", "operations": [str(op.pk) for op in chosen]},
    )
    assert response.status_code == 200
    assert held_ids() == {op.pk for op in held}  # nothing released yet
    summary = {row["action"]: row for row in response.context["summary"]}
    assert summary["crm.create_enquiry"]["count"] == 2
    assert summary["notify.send"]["count"] == 1
    crm = summary["crm.create_enquiry"]
    assert (crm["newest"] - crm["oldest"]).total_seconds() == pytest.approx(20 * 3600, abs=5)
    html = response.content.decode()
    assert "Send 3 held writes to CRM?" in html
    assert "1 other held write stays held." in html
    assert "1 d 6 h ago" in html and "10 h ago" in html
    assert "checked &lt;three&gt; records" in html
    assert html.count('type="hidden" name="operations"') == 3


def test_confirming_releases_exactly_the_choice(held, client_for):
    chosen = [held[0], held[3]]
    response = client_for("admin").post(
        reverse("recovery:release", args=["crm"]),
        {"reason": "checked", "operations": [str(op.pk) for op in chosen], "confirmed": "1"},
    )
    assert response.status_code == 302
    assert "Released 2 writes: they run now. 2 stay held." in messages_of(response)
    assert held_ids() == {held[1].pk, held[2].pk}
    entry = JournalEntry.objects.get(action="ledger.integration.backlog_released")
    assert set(entry.evidence["released"]) == {str(op.pk) for op in chosen}
    assert Integration.objects.get(name="crm").awaiting_backlog_review


def test_a_write_released_since_the_summary_is_refused_not_resent(held, client_for, people):
    ids = [str(op.pk) for op in held[:2]]
    services.release_backlog(
        "crm", actor=people["admin"], reason="other tab", operation_ids=[held[0].pk]
    )
    response = client_for("admin").post(
        reverse("recovery:release", args=["crm"]),
        {"reason": "checked", "operations": ids, "confirmed": "1"},
    )
    assert any("no longer held" in m for m in messages_of(response))
    assert held_ids() == {op.pk for op in held[1:]}


def test_releasing_a_backlog_is_the_registrys_action(held, client_for, people):
    """Who may release is the registry's row (recovery/operator_actions.py ``release``), read by
    the page and by the service alike; a person who may not is told the row's label."""
    from html import unescape

    from django.core.exceptions import PermissionDenied

    from recovery.operator_actions import RELEASE

    for role, person in people.items():
        if RELEASE.may(person):
            continue
        page = client_for(role).post(
            reverse("recovery:release", args=["crm"]),
            {"reason": "go", "operations": [str(held[0].pk)], "confirmed": "1"},
        )
        assert page.status_code == 403
        assert f"You may not {RELEASE.label.lower()}" in unescape(page.content.decode())
        with pytest.raises(PermissionDenied):
            services.release_backlog("crm", actor=person, reason="go")
        assert held_ids() == {op.pk for op in held}
    allowed = [person for person in people.values() if RELEASE.may(person)]
    assert allowed
    assert services.release_backlog("crm", actor=allowed[0], reason="go")
    assert not held_ids()
