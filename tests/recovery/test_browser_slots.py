"""The review page's appointment slots in a real headless Chromium at 1440x900: a page that
has never read the calendar asks a worker for a read and shows the slots when they arrive (a
real Radicale, a real cluster, htmx polling); fresh, stale and unreadable reads as people see
them. Screenshots go where tests/recovery/browser.py says (SCREENSHOTS)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from intake.models import Revision
from ledger import appointments
from ledger.models import Integration, Operation, OperationState
from tests.intake.factories import CategoryFactory
from tests.ledger.conftest import (  # noqa: F401 (fixtures)
    point_appointments,
    radicale,
    radicale_process,
)
from tests.ledger.factories import make_operation
from tests.recovery.browser import BROWSER, SCREENSHOTS, login

pytestmark = BROWSER

HOSTILE = '<script>alert("x")</script> “quoted” ' + "Ä" * 40 + " " + "x" * 300


@pytest.fixture
def visit(make_enquiry):
    category = CategoryFactory(
        slug="home-visit", name="Home visit (assessment) " + "Ω" * 30, books_appointments=True
    )

    def make(message="The kitchen ceiling is leaking; someone needs to look at it."):
        enquiry = make_enquiry(message=message)
        Revision.objects.filter(enquiry=enquiry).update(category=category)
        return enquiry

    return make


def read(enquiry, state, *, age=0, number=1, version=None):
    row = Integration.objects.get(name="appointments")
    op = make_operation(enquiry, state, action="appointments.read", integration=row)
    as_of = timezone.now() - timedelta(seconds=age)
    day = appointments.working_days(as_of, 2)[1]
    busy = [
        (
            timezone.make_aware(timezone.datetime.combine(day, timezone.datetime.min.time()))
            + timedelta(hours=9),
            timezone.make_aware(timezone.datetime.combine(day, timezone.datetime.min.time()))
            + timedelta(hours=11),
        )
    ]
    result = appointments.read_result(
        as_of=as_of, busy=busy, version=version or {"ctag": '"c-1"'}, max_age_seconds=300
    )
    Operation.objects.filter(pk=op.pk).update(
        result=result if state == OperationState.CONFIRMED else {},
        idempotency_key=f"{enquiry.pk}:appointments.read:read{number}:r1",
        payload={"read": number},
        created_at=as_of + timedelta(microseconds=number),
    )
    return Operation.objects.get(pk=op.pk)


def shot(page, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#slots").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / name))


def test_never_read_asks_a_worker_and_shows_the_slots_when_they_arrive(
    page,
    make_user,
    visit,
    radicale,  # noqa: F811
    point_appointments,  # noqa: F811
    start_cluster,
    wait_for,
):
    point_appointments(radicale)
    day = appointments.working_days(timezone.now(), 2)[1]
    nine = timezone.make_aware(timezone.datetime.combine(day, timezone.datetime.min.time()))
    radicale.add_busy(nine + timedelta(hours=9), nine + timedelta(hours=12))
    enquiry = visit(message=HOSTILE)
    cluster = start_cluster()
    reviewer = make_user("reviewer", username="robin")

    login(page, reviewer.username)
    page.goto(page.base + f"/console/review/{enquiry.reference}/")
    # The page asked (htmx posted the card's form on load); a worker reads the calendar.
    wait_for(
        lambda: Operation.objects.filter(
            enquiry=enquiry, action="appointments.read", state=OperationState.CONFIRMED
        ).exists(),
        timeout=60,
        message=f"the cluster reads the calendar\n{cluster.log()[-3000:]}",
    )
    page.locator("#slots.slots-fresh").wait_for()
    card = page.locator("#slots").inner_text()
    assert "current" in card and "As of" in card
    assert page.locator("#slots .slot-list li").count() == appointments.SHOWN
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    assert Operation.objects.filter(enquiry=enquiry, action="appointments.read").count() == 1
    assert radicale.event_count() == 1  # read, never written
    shot(page, "review-slots-fresh.png")


def test_stale_unreadable_and_held_as_people_see_them(page, make_user, visit):
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    owner = make_user("admin", username="calendar-owner")
    Integration.objects.filter(name="appointments").update(max_age_seconds=300, owner=owner)
    reviewer = make_user("reviewer", username="robin")
    stale = visit()
    read(stale, OperationState.CONFIRMED, age=23 * 60)
    failed = visit()
    read(failed, OperationState.CONFIRMED, age=47 * 60, number=1, version={"ctag": '"c-1"'})
    broken = read(failed, OperationState.FAILED, number=2)
    Operation.objects.filter(pk=broken.pk).update(
        attention="retry_budget_exhausted",
        owner=owner,
        attempt_count=3,
        last_attempted_at=timezone.now(),
        last_error_message="503: service_unavailable " + "y" * 400,
    )
    login(page, reviewer.username)

    page.goto(page.base + f"/console/review/{failed.reference}/")
    card = page.locator("#slots").inner_text()
    assert "The calendar could not be read" in card
    assert "calendar-owner" in card and "stale" in card and "47 min ago" in card
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    shot(page, "review-slots-unavailable.png")

    # Without JavaScript the stale read is shown as it is, and the page asks for nothing.
    plain = page.context.new_page()
    plain.route("**/*.js", lambda route: route.abort())
    plain.goto(page.base + f"/console/review/{stale.reference}/")
    text = plain.locator("#slots").inner_text()
    assert "stale" in text and "23 min ago" in text and "older than the 5 min allowed" in text
    shot(plain, "review-slots-stale.png")
    plain.close()
    assert not Operation.objects.filter(enquiry=stale, state=OperationState.APPROVED).exists()

    # With it, the page asks a worker for a read; the integration is paused, so it is held.
    Integration.objects.filter(name="appointments").update(paused=True)
    page.goto(page.base + f"/console/review/{stale.reference}/")
    page.locator("#slots.slots-reading").get_by_text("is paused").wait_for()
    new = Operation.objects.filter(enquiry=stale, action="appointments.read").latest("created_at")
    assert new.state == OperationState.APPROVED and new.held
    shot(page, "review-slots-held.png")
