"""Appointment slots on the review page (recovery.views.slots): what it shows for each state of
the last read, and a reviewer's request for a read (an operation for a worker, never a call
from the web request)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from intake.models import Revision
from ledger import appointments
from ledger.models import Integration, JournalEntry, Operation, OperationState
from tests.intake.factories import CategoryFactory
from tests.ledger.factories import make_operation


@pytest.fixture
def row(integrations_rows):
    Integration.objects.filter(name="appointments").update(max_age_seconds=300)
    return Integration.objects.get(name="appointments")


@pytest.fixture
def visit(make_enquiry, row):
    """An enquiry ready for review in a category that needs a visit."""
    category = CategoryFactory(slug="home-visit", name="Home visit", books_appointments=True)
    enquiry = make_enquiry()
    Revision.objects.filter(enquiry=enquiry).update(category=category)
    return enquiry


def read(enquiry, row, state="confirmed", *, age=0, number=1, version=None):
    """A read of ``enquiry`` in ``state``; confirmed ones carry a result ``age`` seconds old."""
    op = make_operation(enquiry, state, action="appointments.read", integration=row)
    as_of = timezone.now() - timedelta(seconds=age)
    busy = [(as_of + timedelta(days=1), as_of + timedelta(days=1, hours=2))]
    result = appointments.read_result(
        as_of=as_of, busy=busy, version=version or {"ctag": "v1"}, max_age_seconds=300
    )
    Operation.objects.filter(pk=op.pk).update(
        result=result if state == OperationState.CONFIRMED else {},
        idempotency_key=f"{enquiry.pk}:appointments.read:read{number}:r1",
        payload={"read": number},
        created_at=timezone.now() - timedelta(seconds=age) + timedelta(microseconds=number),
    )
    op.refresh_from_db()
    return op


def page(client, enquiry):
    response = client.get(reverse("recovery:review-item", args=[enquiry.reference]))
    assert response.status_code == 200
    return response.content.decode()


def test_no_card_for_a_category_without_visits(make_enquiry, row, client_for):
    enquiry = make_enquiry()
    assert 'id="slots"' not in page(client_for("reviewer"), enquiry)


def test_never_read_the_card_asks_for_a_read_and_the_get_reads_nothing(visit, client_for):
    html = page(client_for("reviewer"), visit)
    assert "has not been read for this enquiry yet" in html
    assert 'hx-trigger="load"' in html  # the page asks for a read; the GET itself made none
    assert not Operation.objects.filter(enquiry=visit, action="appointments.read").exists()


def test_fresh_shows_the_slots_with_their_age_and_asks_for_nothing(visit, row, client_for):
    read(visit, row, age=180)
    html = page(client_for("reviewer"), visit)
    assert "current" in html and "3 min ago" in html and "As of" in html
    assert 'class="slot-list"' in html
    assert 'hx-trigger="load"' not in html
    assert 'hx-trigger="every 30s"' in html


def test_stale_is_said_with_its_age_never_as_current(visit, row, client_for):
    read(visit, row, age=1200)
    html = page(client_for("reviewer"), visit)
    assert "stale" in html and "20 min ago" in html and "older than the 5 min allowed" in html
    assert 'class="slot-list stale"' in html
    assert ">current<" not in html
    assert 'hx-trigger="load"' in html


def test_a_failed_read_shows_its_owner_and_the_last_good_read_as_stale(
    visit, row, client_for, people
):
    Integration.objects.filter(pk=row.pk).update(owner=people["admin"])
    read(visit, row, age=1200)
    failed = read(visit, row, "failed", number=2)
    Operation.objects.filter(pk=failed.pk).update(
        attention="retry_budget_exhausted", owner=people["admin"], attempt_count=3
    )
    html = page(client_for("reviewer"), visit)
    assert "The calendar could not be read" in html
    assert "the-admin" in html and "3 attempts" in html
    assert "Runbook: appointment slots stale or unreadable" in html
    assert 'class="slot-list stale"' in html
    assert 'hx-trigger="load"' not in html  # a person decides: no loop of reads


def test_a_read_under_way_polls_its_card(visit, row, client_for):
    read(visit, row, "approved")
    html = page(client_for("reviewer"), visit)
    assert "Reading the calendar" in html and 'hx-trigger="every 2s"' in html
    card = client_for("reviewer").get(
        reverse("recovery:enquiry-slots-card", args=[visit.reference])
    )
    assert card.status_code == 200 and card.content.decode().startswith("\n<section")


def test_the_calendar_changed_is_said(visit, row, client_for):
    read(visit, row, age=600, number=1, version={"ctag": "v1"})
    read(visit, row, age=10, number=2, version={"ctag": "v2"})
    assert "calendar changed" in page(client_for("reviewer"), visit)


def test_asking_for_a_read_proposes_one_operation_for_a_worker(visit, client_for):
    client = client_for("reviewer")
    url = reverse("recovery:enquiry-slots", args=[visit.reference])
    response = client.post(url, headers={"HX-Request": "true"})
    assert response.status_code == 200 and "Reading the calendar" in response.content.decode()
    again = client.post(url)  # a second ask while the first is under way: the same read
    assert again.status_code == 302 and again.url.endswith("#slots")
    ops = Operation.objects.filter(enquiry=visit, action="appointments.read")
    assert [(op.state, op.payload) for op in ops] == [(OperationState.APPROVED, {"read": 1})]
    assert ops[0].task_enqueued_at is not None
    entry = JournalEntry.objects.get(subject_id=str(ops[0].pk), action="ledger.operation.proposed")
    assert entry.reason == "slots needed to review the enquiry"
    assert entry.actor_user.get_username() == "the-reviewer"


def test_a_fresh_read_is_not_asked_again(visit, row, client_for):
    fresh = read(visit, row, age=10)
    url = reverse("recovery:enquiry-slots", args=[visit.reference])
    client_for("reviewer").post(url, headers={"HX-Request": "true"})
    assert list(Operation.objects.filter(enquiry=visit, action="appointments.read")) == [fresh]


def test_refused_for_a_category_without_visits_and_for_other_roles(
    make_enquiry, visit, row, client_for
):
    plain = make_enquiry()
    url = reverse("recovery:enquiry-slots", args=[plain.reference])
    answer = client_for("reviewer").post(url, headers={"HX-Request": "true"})
    assert answer.status_code == 200 and "does not need a visit" in answer.content.decode()
    visit_url = reverse("recovery:enquiry-slots", args=[visit.reference])
    assert client_for("coordinator").post(visit_url).status_code == 403
    assert client_for(None).post(visit_url).status_code == 302  # to the log-in page
    assert client_for("reviewer").get(visit_url).status_code == 405
    assert client_for("reviewer").post("/console/enquiries/NO-SUCH/slots/").status_code == 404
    assert not Operation.objects.filter(action="appointments.read").exists()
