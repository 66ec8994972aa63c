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
    assert "HX-2026-000123" in page
    assert "Please tell us the address of the property" in page


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
