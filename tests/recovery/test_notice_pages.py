"""The console's Messages page: every template an admin can read, rendered with its sample."""

import pytest

from ledger.notices import NOTICES

pytestmark = pytest.mark.django_db


def test_every_message_is_shown_with_its_sample(client_for):
    assert NOTICES
    response = client_for("admin").get("/console/messages/")
    assert response.status_code == 200
    page = response.content.decode()
    for notice in NOTICES.values():
        assert f'id="notice-{notice.name}"' in page
    # The residents' messages, each with its words filled, when it is sent and when not.
    from ledger import wording

    for kind in wording.KINDS:
        assert f'id="notice-{kind}"' in page
        assert f'href="/console/messages/{kind}/"' in page  # an admin edits the words
    assert "HX-2026-000123" in page
    assert "Nobody has read it yet" in page


def test_people_without_a_console_role_are_refused(make_user):
    from django.test import Client

    client = Client()
    client.force_login(make_user(None))
    assert client.get("/console/messages/").status_code == 403


def test_post_is_not_allowed(client_for):
    assert client_for("admin").post("/console/messages/").status_code == 405


def test_a_person_turns_their_messages_off_and_on(client_for, people):
    from ledger.models import JournalEntry
    from recovery.models import NoticePreference

    client = client_for("coordinator")
    page = client.get("/console/me/")
    assert page.status_code == 200 and "E-mail me about work that needs me" in page.content.decode()
    assert client.post("/console/me/", {}).status_code == 302
    assert NoticePreference.objects.get(user=people["coordinator"]).enabled is False
    assert client.post("/console/me/", {"enabled": "on"}).status_code == 302
    assert NoticePreference.objects.get(user=people["coordinator"]).enabled is True
    rows = JournalEntry.objects.filter(action="recovery.person.notices_changed")
    assert [r.evidence["enabled"] for r in rows] == [False, True]


def test_my_page_says_when_there_is_no_address(client_for, people):
    people["reviewer"].email = ""
    people["reviewer"].save()
    assert "no address" in client_for("reviewer").get("/console/me/").content.decode()


@pytest.fixture
def failed_message(integrations_rows):
    from django.db import transaction

    from ledger.models import Operation
    from ledger.services import propose_message

    with transaction.atomic():
        op, _ = propose_message(
            "operator:1:notify.send:operator_digest:20261201T1400Z",
            {
                "to": "casey@example.org",
                "template": "operator_digest",
                "reference": "operator casey, 1 Dec 2026, 14:00 GMT",
                "person": "casey",
                "count": 1,
                "items": [{"what": "Assigned to you", "title": "ENQ-1", "link": "/console/"}],
                "interval": 15,
            },
        )
        op = Operation.objects.get(pk=op.pk)
        op.submit(actor="system:test", reason="claimed")
        op.fail(actor="system:test", reason="550 User unknown")
        op.save()
    return op


def test_a_failed_message_to_an_operator_is_cancelled_on_its_own_page(client_for, failed_message):
    from ledger.models import OperationState

    client = client_for("admin")
    url = f"/console/operations/{failed_message.pk}/"
    page = client.get(url)
    assert page.status_code == 200 and "A message to an operator" in page.content.decode()
    # The card partial (htmx) has nothing to show for it: its page instead.
    assert client.get(url + "card/").status_code == 302
    refused = client.post(url + "cancel/", {"reason": " "})
    assert refused.status_code == 302
    failed_message.refresh_from_db()
    assert failed_message.state == OperationState.FAILED  # a reason is required
    done = client.post(url + "cancel/", {"reason": "casey was told by phone"})
    assert done.status_code == 302 and done["Location"].startswith(url)
    failed_message.refresh_from_db()
    assert failed_message.state == OperationState.CANCELLED
    # Offered nothing it cannot do: no reassign on its page.
    assert client.post(url + "reassign/", {"reason": "x", "owner": ""}).status_code == 302
    failed_message.refresh_from_db()
    assert failed_message.state == OperationState.CANCELLED


def test_my_page_says_which_notices_were_left_out_and_why(client_for, people):
    from recovery.models import OperatorNotice

    OperatorNotice.objects.create(
        user=people["coordinator"],
        kind=OperatorNotice.ASSIGNED,
        key="k-left",
        title="Assigned to you by boss: ENQ-ABCDEFGH: Create the enquiry in the CRM",
        link="/console/",
        left_out="resolved",
    )
    page = client_for("coordinator").get("/console/me/").content.decode()
    assert "not sent: resolved before the message was made" in page
