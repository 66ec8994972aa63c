"""Durations as people write them: one parser, one formatter, one form field, one filter."""

from datetime import timedelta

import pytest
from django import forms

from recovery.durations import (
    DurationField,
    NotADuration,
    SecondsField,
    format_duration,
    parse_duration,
)
from recovery.templatetags.console import period


@pytest.mark.parametrize(
    "text,value",
    [
        ("3 h", timedelta(hours=3)),
        ("1 d", timedelta(days=1)),
        ("90 s", timedelta(seconds=90)),
        ("1 h 30 min", timedelta(hours=1, minutes=30)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2.5 s", timedelta(seconds=2.5)),
        ("2,5 s", timedelta(seconds=2.5)),
        ("15 minutes", timedelta(minutes=15)),
        ("1 day, 2 hours", timedelta(days=1, hours=2)),
        ("2 weeks", timedelta(days=14)),
        ("  4 H ", timedelta(hours=4)),
        ("0 s", timedelta(0)),
    ],
)
def test_parse(text, value):
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    "text,says",
    [
        ("", "Enter a duration"),
        ("3", "needs a unit"),
        ("3 x", "“x” in “3 x” is not a unit"),
        ("1 day, 0:00:00", "is not a duration"),
        ("h 3", "is not a duration"),
        ("1 h 3", "is not a duration"),
        ("1 d 1 d", "the same unit twice"),
        ("400 d", "more than a year"),
        ("²", "is not a duration"),
        ("1e9 s", "not a unit"),
        ("-5 s", "is not a duration"),
        ("9" * 500, "too long"),
        ("\x00", "is not a duration"),
    ],
)
def test_refusals_say_what_to_write(text, says):
    with pytest.raises(NotADuration, match=says):
        parse_duration(text)


@pytest.mark.parametrize(
    "value,text",
    [
        (timedelta(days=1), "1 d"),
        (timedelta(hours=1, minutes=30), "1 h 30 min"),
        (timedelta(days=1, minutes=30), "1 d 30 min"),  # nothing rounded away
        (timedelta(seconds=90), "1 min 30 s"),
        (10.0, "10 s"),
        (2.5, "2.5 s"),
        (0.1, "0.1 s"),
        (0, "0 s"),
        (None, ""),
    ],
)
def test_format_is_exact_and_reads_back(value, text):
    assert format_duration(value) == text
    assert period(value) == text
    if text:
        back = parse_duration(text)
        expected = value if isinstance(value, timedelta) else timedelta(seconds=value)
        assert back == expected


def test_form_field_messages_and_bounds():
    class Form(forms.Form):
        wait = DurationField(minimum=timedelta(minutes=1), maximum=timedelta(days=2))
        timeout = SecondsField(required=False)

    form = Form({"wait": "30 s", "timeout": "1 h 30 min"})
    assert not form.is_valid()
    assert form.errors["wait"] == ["At least 1 min."]
    assert Form({"wait": "3 d"}).errors["wait"] == ["At most 2 d."]
    bad = Form({"wait": "soon"})
    assert "Enter a valid duration" not in str(bad.errors)
    assert "“soon” is not a duration" in str(bad.errors)
    good = Form({"wait": "1 d 12 h", "timeout": "2.5 s"})
    assert good.is_valid()
    assert good.cleaned_data == {"wait": timedelta(days=1, hours=12), "timeout": 2.5}
    shown = Form(initial={"wait": timedelta(hours=4), "timeout": 10.0})
    assert 'value="4 h"' in str(shown["wait"]) and 'value="10 s"' in str(shown["timeout"])


def test_response_periods_in_the_admin_are_written_as_people_write_them(make_user, client):
    from recovery.models import ResponsePolicy

    policy = ResponsePolicy.objects.create(queue="unknown")
    client.force_login(make_user("admin", is_staff=True))
    url = f"/admin/recovery/responsepolicy/{policy.pk}/change/"
    html = client.get(url).content.decode()
    assert 'value="4 h"' in html and 'value="1 d"' in html
    assert "1 day, 0:00:00" not in html
    listing = client.get("/admin/recovery/responsepolicy/").content.decode()
    assert "4 h" in listing and "1 day, 0:00:00" not in listing
    data = {"queue": "unknown", "response_period": "1 h 30 min", "review_cadence": "soon"}
    refused = client.post(url, data).content.decode()
    assert "“soon” is not a duration" in refused and "Enter a valid duration" not in refused
    data["review_cadence"] = "2 d"
    assert client.post(url, data).status_code == 302
    policy.refresh_from_db()
    assert (policy.response_period, policy.review_cadence) == (
        timedelta(hours=1, minutes=30),
        timedelta(days=2),
    )
