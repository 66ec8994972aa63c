"""Rows the benchmarks start from, made with bulk_create (never one save per row)."""

from __future__ import annotations

from datetime import timedelta

BATCH = 5000


def user(role: str, username: str):
    """A user in one of the role groups recovery's migration makes."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    person, created = get_user_model().objects.get_or_create(username=username)
    if created:
        person.set_unusable_password()
        person.save()
        person.groups.add(Group.objects.get(name=role))
    return person


def sandbox_integrations(sandbox_url: str, *, timeout: float = 5.0):
    """The four integration rows, pointing at the benchmark's sandbox."""
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    ensure_integrations()
    Integration.objects.update(
        base_url=sandbox_url,
        token="",
        timeout_seconds=timeout,
        retry_budget=3,
        backoff_seconds=0.5,
        supports_lookup=True,
        supports_idempotency_key=True,
        settle_delay_seconds=0.0,
        paused=False,
        awaiting_backlog_review=False,
    )
    return {row.name: row for row in Integration.objects.all()}


def enquiries(count: int, *, prefix: str, state: str, **fields):
    """``count`` enquiries in ``state`` with revision 1, references ``<prefix>-<n>`` (the names
    the bare loops in bench/baselines.py give their records)."""
    from django.utils import timezone

    from intake.models import Category, Enquiry, Revision

    now = timezone.now()
    # Filed under a category: the CRM requires one before an approval (ledger.kinds).
    category, _ = Category.objects.get_or_create(slug="waste", defaults={"name": "Bins"})
    fields.setdefault("category", category)
    made = []
    for start in range(0, count, BATCH):
        batch = [
            Enquiry(
                reference=f"{prefix}-{i}",
                source="bench",
                name=f"Resident {i}",
                email=f"resident{i % 997}@example.org",
                message="My bin was not collected on Tuesday.",
                state=state,
                created_at=now,
                state_changed_at=now,
                **fields,
            )
            for i in range(start, min(count, start + BATCH))
        ]
        Enquiry.objects.bulk_create(batch)
        Revision.objects.bulk_create(
            Revision(
                enquiry=e,
                number=1,
                category=e.category,
                fields={"name": e.name, "email": e.email, "message": e.message},
                created_at=now,
            )
            for e in batch
        )
        made.extend(batch)
    return made


def unknown_crm_operations(enquiry_rows, crm, *, age_seconds: float = 5.0):
    """One `unknown` CRM write per enquiry, its call attempt ended with no answer: the state a
    timeout after the destination committed leaves behind (the enquiry submission_unknown)."""
    from django.utils import timezone

    from ledger.models import Attempt, Operation, payload_hash

    then = timezone.now() - timedelta(seconds=age_seconds)
    ops = []
    for start in range(0, len(enquiry_rows), BATCH):
        batch = []
        for e in enquiry_rows[start : start + BATCH]:
            payload = {"reference": e.reference, "revision": 1, "fields": {"name": e.name}}
            batch.append(
                Operation(
                    enquiry=e,
                    action="crm.create_enquiry",
                    revision=1,
                    idempotency_key=Operation.make_key(e.pk, "crm.create_enquiry", 1),
                    payload=payload,
                    payload_hash=payload_hash(payload),
                    integration=crm,
                    state="unknown",
                    attempt_count=1,
                    budget_used=1,
                    last_error_class="uncertain",
                    last_error_message="no answer within 5s",
                    created_at=then,
                    state_changed_at=then,
                )
            )
        Operation.objects.bulk_create(batch)
        Attempt.objects.bulk_create(
            Attempt(
                operation=op,
                number=1,
                kind="call",
                worker="system:bench",
                started_at=then,
                ended_at=then,
                outcome="uncertain",
                error_class="uncertain",
            )
            for op in batch
        )
        ops.extend(batch)
    return ops
