"""The queue page's poll for owner changes (recovery.views.queue.queue_moved): whatever ``since``
holds, a clear answer, never a 500."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

URL = reverse("recovery:queue-moved")
SINCE = st.one_of(
    st.text(max_size=60),
    st.datetimes().map(lambda d: d.isoformat()),
    st.builds(lambda d, h: f"{d.isoformat()}{h:+03d}:00", st.datetimes(), st.integers(-23, 23)),
)


@pytest.mark.parametrize(
    "since",
    [
        "0001-01-01T00:00:00",
        "0001-01-01T00:00:00%2B01:00",  # before datetime.min once in UTC
        "9999-12-31T23:59:59-14:00",  # after datetime.max once in UTC
        "%ED%A0%80",  # a lone surrogate, UTF-8 encoded
        "99999999999999999999999999",
        "yesterday",
        "2026-13-45T00:00",
    ],
)
def test_a_poll_from_no_moment_of_the_last_week_answers_an_empty_notice(client_for, since):
    response = client_for("coordinator").get(f"{URL}?since={since}")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="moved-live"' in html and "hx-get" not in html


def test_a_poll_with_a_nul_is_a_clear_400(client_for):
    assert client_for("coordinator").get(f"{URL}?since=%00").status_code == 400


def test_a_poll_from_a_recent_moment_keeps_polling(client_for):
    since = (timezone.now() - timedelta(minutes=3)).isoformat().replace("+", "%2B")
    response = client_for("coordinator").get(f"{URL}?since={since}")
    assert response.status_code == 200
    assert "hx-get" in response.content.decode()


@given(SINCE)
def test_poll_moment_takes_any_text(raw):
    from recovery.views.queue import poll_moment

    moment = poll_moment(raw)
    if moment is not None:
        assert abs(timezone.now() - moment) <= timedelta(days=8)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SINCE)
def test_no_since_makes_the_poll_answer_5xx(client_for, raw):
    from urllib.parse import quote

    response = client_for("coordinator").get(f"{URL}?since={quote(raw)}")
    assert response.status_code in (200, 400)
