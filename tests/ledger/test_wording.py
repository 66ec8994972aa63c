"""The words residents receive (ledger.wording): templates that fill by plain substitution,
refused at save when they would not fill, inert whatever an admin or a reviewer types."""

from __future__ import annotations

import pytest

from ledger import wording
from ledger.models import JournalEntry, MessageTemplate

HOSTILE_TEMPLATE = (
    "Dear {name},\n\n{{ ''.__class__.__mro__ }} {{% load static %}} {{{{ request }}}}\n\n"
    "{message_to_resident}\n"
)


def test_every_shipped_template_fills():
    for kind, spec in wording.KINDS.items():
        assert wording.problems(kind, spec.subject, spec.body) == [], kind


@pytest.mark.parametrize(
    "body, said",
    [
        ("Hello {nme} {message_to_resident}", "{nme} is not a placeholder"),
        ("Hello {reference {message_to_resident}", "a brace is opened and not closed"),
        ("Hello } {message_to_resident}", "a brace is opened and not closed"),
        ("Hello {reference.__class__} {message_to_resident}", "is not a placeholder"),
        ("Hello {reference[0]} {message_to_resident}", "is not a placeholder"),
        ("Hello {reference!r} {message_to_resident}", "takes nothing after its name"),
        ("Hello {reference:>40} {message_to_resident}", "takes nothing after its name"),
        ("Hello {} {message_to_resident}", "{} is not a placeholder"),
        ("{% if x %}{message_to_resident}{% endif %}", "is not a placeholder"),
        ("Hello {destination_reference} {message_to_resident}", "is not a placeholder"),
        ("Hello {reference}", "it must say {message_to_resident}"),
    ],
)
def test_a_template_that_would_not_fill_is_refused(body, said):
    found = wording.problems(wording.NEEDS_INFORMATION, "About {reference}", body)
    assert any(said in problem for problem in found), found


def test_a_subject_is_one_line_and_checked_too():
    found = wording.problems(wording.PASSED_ON, "About {ref}\nBcc: x@example.org", "Hi")
    assert any("one line only" in p for p in found)
    assert any("{ref} is not a placeholder" in p for p in found)


def test_hostile_template_text_renders_inert():
    assert wording.problems(wording.NEEDS_INFORMATION, "Re {reference}", HOSTILE_TEMPLATE) == []
    text = wording.fill(
        HOSTILE_TEMPLATE, {"name": "Ann", "message_to_resident": "Your address, please."}
    )
    assert "{ ''.__class__.__mro__ }" in text  # the braces as written, nothing evaluated
    assert "{% load static %}" in text
    assert "{{ request }}" in text
    assert "<class" not in text and "object" not in text


def test_a_value_is_put_in_once_never_read_as_a_template():
    values = {
        "name": "{reference} {{ ''.__class__ }} {% csrf_token %}",
        "reference": "HX-1",
        "message_to_resident": "<script>alert(1)</script> & {name}",
    }
    text = wording.fill("Dear {name},\n{message_to_resident}\n{reference}", values)
    assert text == (
        "Dear {reference} {{ ''.__class__ }} {% csrf_token %},\n"
        "<script>alert(1)</script> & {name}\nHX-1\n"
    )
    html = wording.as_html(text)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in html


def test_a_line_whose_placeholders_are_all_empty_is_left_out():
    body = "Hello.\n\nTheir reference is {destination_reference}.\n\nSee {answer_link}\n\nBye."
    assert wording.fill(body, {"destination_reference": "", "answer_link": ""}) == (
        "Hello.\n\nBye.\n"
    )
    assert "Their reference is CRM-9." in wording.fill(body, {"destination_reference": "CRM-9"})


def test_every_message_links_the_residents_page_and_says_whether_replies_are_read(
    make_enquiry, settings
):
    enquiry = make_enquiry(email="a@example.org")
    settings.RESIDENT_REPLY_DOMAIN = ""
    for kind in wording.KINDS:
        body = wording.resident_payload(kind, enquiry, message_to_resident="x")["body"]
        linked = "{answer_link}" in wording.KINDS[kind].body
        assert ("/r/" in body) == linked and "{" not in body, kind
        assert wording.REPLIES_NOT_READ in body, kind
    settings.RESIDENT_REPLY_DOMAIN = "replies.example.org"
    body = wording.resident_payload(wording.NEEDS_INFORMATION, enquiry, message_to_resident="x")
    assert wording.REPLIES_READ in body["body"] and wording.REPLIES_NOT_READ not in body["body"]


def test_html_is_derived_from_the_text_with_links():
    html = wording.as_html("One <b>\nline\n\nSee https://example.org/a?b=1&c=2 now")
    assert "<p>One &lt;b&gt;<br>\nline</p>" in html
    assert '<a href="https://example.org/a?b=1&amp;c=2">https://example.org/a?b=1&amp;c=2</a>' in (
        html
    )


@pytest.mark.django_db
def test_publish_makes_the_next_version_journalled_with_its_reason(make_user):
    admin = make_user("admin")
    first = wording.current(wording.PASSED_ON)
    row = wording.publish(
        wording.PASSED_ON,
        subject="Passed on: {reference}",
        body="Dear {name},\n\nPassed on as {destination_reference}.\n",
        actor=admin,
        reason="plainer words agreed with customer services",
    )
    assert row.version == first.version + 1
    assert wording.current(wording.PASSED_ON) == row
    entry = JournalEntry.objects.get(subject_type="ledger.messagetemplate", subject_id=str(row.pk))
    assert entry.reason == "plainer words agreed with customer services"
    assert entry.evidence["previous_version"] == first.version


@pytest.mark.django_db
def test_publish_refuses_words_that_would_not_fill_and_saves_nothing(make_user):
    admin = make_user("admin")
    before = MessageTemplate.objects.count()
    with pytest.raises(ValueError, match="is not a placeholder"):
        wording.publish(
            wording.NOT_TAKEN_FORWARD,
            subject="{reference}",
            body="{{ x }} {message_to_resident} {secret_key}",
            actor=admin,
            reason="r",
        )
    assert MessageTemplate.objects.count() == before


@pytest.mark.django_db
def test_the_migration_ships_the_words_kinds_holds():
    # Migration 0021_message_templates writes version 1 of each message, and wording.current
    # makes the same from KINDS where a database has none (a flushed test database among them).
    import importlib

    shipped = importlib.import_module("ledger.migrations.0021_message_templates").SHIPPED
    assert set(shipped) == set(wording.KINDS)
    for kind, (subject, body) in shipped.items():
        assert (subject, body.strip()) == (
            wording.KINDS[kind].subject,
            wording.KINDS[kind].body.strip(),
        ), kind
