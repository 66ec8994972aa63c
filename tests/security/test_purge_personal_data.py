"""purge_personal_data: closed enquiries past retention lose personal data, keep their evidence."""

import hashlib
import io
import json
from datetime import timedelta
from importlib import import_module

import pytest
from django.apps import apps as django_apps
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone

from intake.models import Document, Enquiry, EventConflict, IntakeEvent, Revision, Suggestion
from intake.retention import REDACTED
from ledger.models import Attempt, Integration, JournalEntry, Operation, payload_hash

NAME = "Philippa Quenby-Marchetti"
EMAIL = "philippa.quenby@example.org"
PHONE = "+44 7700 900417"
SUBJECT = "Leak under the Quenby kitchen sink"
MESSAGE = "Water has come through the ceiling at 14 Larkspur Row since Tuesday."
PERSONAL = [NAME, EMAIL, PHONE, SUBJECT, MESSAGE, "Larkspur Row"]
SYSTEM = "system:security-tests"


def later(days):
    return (timezone.now() + timedelta(days=days)).isoformat()


def purge(*args):
    out = io.StringIO()
    call_command("purge_personal_data", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def crm(db):
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    return Integration.objects.get(name="crm")


def make_enquiry(*, close=None, crm=None, reviewer=None, op_state="confirmed"):
    """An enquiry carrying personal data everywhere intake and the ledger keep it."""
    body = json.dumps({"name": NAME, "email": EMAIL, "phone": PHONE, "message": MESSAGE})
    enquiry = Enquiry.objects.create(
        source="website", name=NAME, email=EMAIL, phone=PHONE, subject=SUBJECT, message=MESSAGE
    )
    fields = {"name": NAME, "email": EMAIL, "phone": PHONE, "subject": SUBJECT}
    Revision.objects.create(enquiry=enquiry, number=1, fields={**fields, "message": MESSAGE})
    event = IntakeEvent.objects.create(
        source="website",
        event_id=f"msg_{enquiry.pk.hex}",
        body=body,
        body_sha256=hashlib.sha256(body.encode()).hexdigest(),
        enquiry=enquiry,
    )
    EventConflict.objects.create(event=event, body_sha256="0" * 64, body=body + " ")
    Document.objects.create(
        enquiry=enquiry,
        document_id="doc-1",
        version="1",
        status="extracted",
        extracted={"tenant": NAME, "address": "14 Larkspur Row", "pages": 2},
        corrected={"tenant": NAME},
    )
    Document.objects.create(
        enquiry=enquiry,
        document_id="tenancy.pdf",
        version="2146808-1796171100-1204",
        status="extracted",
        text=f"Tenancy agreement between the council and {NAME}, 14 Larkspur Row.",
    )
    Suggestion.objects.create(
        enquiry=enquiry,
        revision=1,
        provider="keywords",
        label="repairs",
        validation="valid",
        explanation=f"{NAME} mentions a leak at 14 Larkspur Row.",
    )
    with transaction.atomic():
        enquiry.validate(actor=SYSTEM)
        enquiry.mark_ready_for_review(actor=SYSTEM)
        enquiry.save()
    # Revision 2, a reviewer's edit (the phone number corrected).
    Revision.objects.create(
        enquiry=enquiry,
        number=2,
        fields={**fields, "phone": "+44 7700 900418", "message": MESSAGE},
        note=f"Called {NAME} to check the number.",
        origin="reviewer",
    )
    with transaction.atomic():
        enquiry.revise(actor=reviewer, reason="phone corrected")
        enquiry.current_revision = 2
        enquiry.save()
    if close == "reject":
        with transaction.atomic():
            enquiry.reject(
                actor=reviewer, reason="duplicate", evidence={"resident_message": "A duplicate."}
            )
            enquiry.save()
    elif close == "confirm":
        approver = reviewer.__class__.objects.create_user("approver-" + enquiry.reference[-4:])
        approver.is_superuser = True
        approver.save()
        with transaction.atomic():
            enquiry.approve(actor=approver)
            enquiry.save()
        payload = {"reference": enquiry.reference, **fields, "message": MESSAGE}
        op = Operation.objects.create(
            enquiry=enquiry,
            action="crm.create_enquiry",
            revision=2,
            idempotency_key=Operation.make_key(enquiry.pk, "crm.create_enquiry", 2),
            payload=payload,
            payload_hash=payload_hash(payload),
            integration=crm,
        )
        Attempt.objects.create(
            operation=op,
            number=1,
            worker="w1",
            request_summary={"url": "/crm/enquiries", "body": payload},
            response_status=201,
            response_body=json.dumps({"id": "crm-1", "name": NAME}),
            outcome="success",
        )
        with transaction.atomic():
            op.approve(actor=SYSTEM)
            op.submit(actor=SYSTEM)
            op.confirm(actor=SYSTEM)
            op.save()
            enquiry.submit(actor=SYSTEM)
            enquiry.confirm(actor=SYSTEM)
            enquiry.save()
        notify_payload = {"reference": enquiry.reference, "to": EMAIL}
        notify = Operation.objects.create(
            enquiry=enquiry,
            action="notify.send",
            revision=2,
            idempotency_key=Operation.make_key(enquiry.pk, "notify.send", 2),
            payload=notify_payload,
            payload_hash=payload_hash(notify_payload),
            integration=Integration.objects.get(name="notify"),
        )
        with transaction.atomic():
            last = "confirm" if op_state == "confirmed" else "fail"
            for step in ("approve", "submit", last):
                getattr(notify, step)(actor=SYSTEM)
            notify.save()
    # The messages its transitions sent the resident (passed on, not taken forward), as a
    # running worker would have sent them.
    Operation.objects.filter(enquiry=enquiry, action="notify.send", state="approved").update(
        state="confirmed"
    )
    enquiry.refresh_from_db()
    return enquiry


def everything_about(enquiry) -> str:
    """Every stored row about the enquiry, as text, to search for personal values."""
    rows = [
        Enquiry.objects.filter(pk=enquiry.pk).values(),
        Revision.objects.filter(enquiry=enquiry).values(),
        IntakeEvent.objects.filter(enquiry=enquiry).values(),
        EventConflict.objects.filter(event__enquiry=enquiry).values(),
        Document.objects.filter(enquiry=enquiry).values(),
        Suggestion.objects.filter(enquiry=enquiry).values(),
        Operation.objects.filter(enquiry=enquiry).values(),
        Attempt.objects.filter(operation__enquiry=enquiry).values(),
    ]
    return json.dumps([list(r) for r in rows], default=str)


@pytest.fixture
def reviewer(make_user):
    user = make_user("reviewer", username="rita")
    user.is_superuser = True  # may also reject and approve in these fixtures
    user.save()
    return user


def test_closed_enquiry_past_retention_is_redacted_and_keeps_its_evidence(crm, reviewer):
    enquiry = make_enquiry(close="confirm", crm=crm, reviewer=reviewer)
    assert all(value in everything_about(enquiry) for value in PERSONAL)
    reference, state, closed_at = enquiry.reference, enquiry.state, enquiry.closed_at
    sha = enquiry.event.body_sha256
    hashes = dict(Operation.objects.filter(enquiry=enquiry).values_list("pk", "payload_hash"))
    journal_before = list(JournalEntry.objects.filter(enquiry=enquiry).values())

    out = purge("--now", later(366))

    assert enquiry.reference in out and "Redacted 1 of 1" in out
    enquiry.refresh_from_db()
    stored = everything_about(enquiry)
    leaked = [value for value in PERSONAL if value in stored]
    assert not leaked, f"still stored after redaction: {leaked}"
    assert (enquiry.reference, enquiry.state, enquiry.closed_at) == (reference, state, closed_at)
    assert enquiry.message == REDACTED and enquiry.email == "" and enquiry.redacted_at
    event = IntakeEvent.objects.get(enquiry=enquiry)
    assert event.body == "" and event.body_sha256 == sha
    assert dict(Operation.objects.filter(enquiry=enquiry).values_list("pk", "payload_hash")) == (
        hashes
    )
    document = Document.objects.get(enquiry=enquiry, document_id="doc-1")
    assert document.extracted == {"tenant": REDACTED, "address": REDACTED, "pages": 2}
    text = Document.objects.get(enquiry=enquiry, document_id="tenancy.pdf").text
    assert text == REDACTED  # a document's text is all content
    revision = Revision.objects.get(enquiry=enquiry, number=2)
    assert (
        revision.fields["name"] == REDACTED
        and revision.note == f"Called {REDACTED} to check the number."
    )
    # The journal survives untouched, plus one row saying what was done (without the data).
    journal_after = list(JournalEntry.objects.filter(enquiry=enquiry).values())
    assert journal_after[: len(journal_before)] == journal_before
    [row] = journal_after[len(journal_before) :]
    assert row["action"] == "intake.enquiry.redacted"
    assert row["actor"] == "system:purge_personal_data"
    assert row["evidence"]["retention_days"] == 365
    assert not [v for v in PERSONAL if v in json.dumps(row, default=str)]


def test_a_second_run_changes_nothing(crm, reviewer):
    enquiry = make_enquiry(close="confirm", crm=crm, reviewer=reviewer)
    purge("--now", later(366))
    before = everything_about(enquiry), JournalEntry.objects.count()
    out = purge("--now", later(400))
    assert "Redacted 0 of 0" in out
    assert (everything_about(enquiry), JournalEntry.objects.count()) == before


def test_open_enquiry_is_never_redacted(crm, reviewer):
    enquiry = make_enquiry(close=None, reviewer=reviewer)
    assert enquiry.state == "ready_for_review"
    journal = JournalEntry.objects.count()
    purge("--now", later(3650))
    enquiry.refresh_from_db()
    assert enquiry.redacted_at is None and enquiry.name == NAME and enquiry.message == MESSAGE
    assert JournalEntry.objects.count() == journal


def test_closed_within_retention_is_kept(crm, reviewer):
    enquiry = make_enquiry(close="reject", reviewer=reviewer)
    out = purge("--now", later(364))
    enquiry.refresh_from_db()
    assert enquiry.redacted_at is None and enquiry.email == EMAIL
    assert "Redacted 0 of 0" in out


def test_rejected_enquiry_past_retention_is_redacted(crm, reviewer, settings):
    settings.PERSONAL_DATA_RETENTION_DAYS = 30
    enquiry = make_enquiry(close="reject", reviewer=reviewer)
    purge("--now", later(31))
    enquiry.refresh_from_db()
    assert enquiry.state == "rejected" and enquiry.redacted_at is not None
    assert not [value for value in PERSONAL if value in everything_about(enquiry)]


def test_dry_run_changes_nothing(crm, reviewer):
    enquiry = make_enquiry(close="confirm", crm=crm, reviewer=reviewer)
    before = everything_about(enquiry), JournalEntry.objects.count()
    out = purge("--dry-run", "--now", later(366))
    assert "Would redact 1 of 1" in out and enquiry.reference in out
    assert (everything_about(enquiry), JournalEntry.objects.count()) == before


def test_an_operation_still_open_keeps_its_enquiry_until_it_is_finished(crm, reviewer):
    """The CRM write is confirmed but the notification failed and is still being worked."""
    enquiry = make_enquiry(close="confirm", crm=crm, reviewer=reviewer, op_state="failed")
    out = purge("--now", later(366))
    assert "skipped" in out and "notify.send failed" in out
    enquiry.refresh_from_db()
    assert enquiry.redacted_at is None and enquiry.email == EMAIL


def test_a_bad_now_is_refused(db):
    with pytest.raises(CommandError, match="ISO"):
        purge("--now", "next tuesday")


def test_the_message_is_still_never_overwritten_outside_redaction(db):
    enquiry = Enquiry.objects.create(source="website", message=MESSAGE)
    enquiry = Enquiry.objects.get(pk=enquiry.pk)
    enquiry.message = REDACTED
    with pytest.raises(ValueError, match="never overwritten"):
        enquiry.save()


def test_a_persons_reasons_are_erased_with_the_enquiry_and_the_row_stays(crm, reviewer):
    """The journal is append-only, so a person's free text is kept beside its row
    (ErasableReason): the purge empties it; who, when and which action stay."""
    from ledger.models import ErasableReason, PurgeRun

    enquiry = make_enquiry(close="reject", reviewer=reviewer)
    row = JournalEntry.objects.get(enquiry=enquiry, action="intake.enquiry.revise")
    assert row.reason == "phone corrected" and row.kept_reason == ""
    assert ErasableReason.objects.get(entry=row).text == "phone corrected"
    other = JournalEntry.objects.get(enquiry=enquiry, action="intake.enquiry.validate")
    evidence = list(JournalEntry.objects.filter(enquiry=enquiry).values())

    out = purge("--now", later(366))

    assert "erased 2 reason(s)" in out  # the revision's and the rejection's
    row = JournalEntry.objects.get(pk=row.pk)
    assert row.reason.startswith("(reason erased ") and "phone corrected" not in row.reason
    assert (row.actor, row.actor_user, row.action) == (
        "user:rita",
        reviewer,
        "intake.enquiry.revise",
    )
    after = list(JournalEntry.objects.filter(enquiry=enquiry).values())
    assert after[: len(evidence)] == evidence  # then one row: intake.enquiry.redacted
    assert JournalEntry.objects.get(pk=other.pk).reason == other.reason  # a system's: kept
    assert not ErasableReason.objects.exclude(text="").filter(entry__enquiry=enquiry).exists()
    run = PurgeRun.objects.get()
    assert (run.redacted, run.reasons_erased, run.ran_by) == (
        1,
        2,
        "manage.py purge_personal_data",
    )
    assert "erased" not in purge("--now", later(400))  # nothing left to erase


def test_a_reason_about_no_enquiry_is_erased_once_past_retention(db, make_user):
    from ledger import journal
    from ledger.models import ErasableReason

    ensure = Integration.objects.get_or_create
    row, _ = ensure(name="crm", defaults={"base_url": "http://crm.test"})
    admin = make_user("admin", username="ada")
    with transaction.atomic():
        entry = journal.record(row, "ledger.integration.paused", actor=admin, reason="Ada's call")
    purge("--now", later(10))
    assert JournalEntry.objects.get(pk=entry.pk).reason == "Ada's call"
    purge("--now", later(366))
    assert ErasableReason.objects.get(entry_id=entry.pk).erased_at is not None
    assert "Ada" not in JournalEntry.objects.get(pk=entry.pk).reason


@pytest.mark.django_db(transaction=True)
def test_after_erasure_the_journal_still_refuses_update_and_delete(make_user):
    import psycopg
    from django.db import connection

    from ledger import journal

    admin = make_user("admin", username="ada")
    row, _ = Integration.objects.get_or_create(name="crm", defaults={"base_url": "http://x.test"})
    with transaction.atomic():
        journal.record(row, "ledger.integration.paused", actor=admin, reason="Ada's call")
    purge("--now", later(366))
    params = connection.get_connection_params()
    for key in ("options", "cursor_factory", "context"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as raw:
        for statement in (
            "UPDATE ledger_journalentry SET reason = 'rewritten'",
            "DELETE FROM ledger_journalentry",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                raw.execute(statement)
        assert raw.execute("SELECT count(*) FROM ledger_journalentry").fetchone()[0] == 1


def test_the_purge_is_scheduled_daily_and_its_last_run_is_on_the_dashboard(crm, reviewer):
    from django.test import Client
    from django_q.models import Schedule

    from ledger.purge import scheduled_purge

    # The schedule is the data migration's row (get_or_create), which a transactional test's
    # flush on this process may have emptied: the migration's own function makes it again.
    migration = import_module("ledger.migrations.0014_h25day_purge_schedule")
    migration.create_schedule(django_apps, None)
    schedule = Schedule.objects.get(name="ledger.purge_personal_data")
    assert (schedule.func, schedule.schedule_type) == ("ledger.purge.scheduled_purge", "D")
    make_enquiry(close="reject", reviewer=reviewer)
    client = Client()
    client.force_login(reviewer)
    page = client.get("/console/dashboard/").content.decode()
    assert "The purge has not run yet" in page

    assert scheduled_purge() == {"redacted": 0, "reasons_erased": 0}  # closed just now: kept

    page = client.get("/console/dashboard/").content.decode()
    assert "Last run" in page and "0 enquiries redacted" in page
