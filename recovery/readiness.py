"""Is this install ready to go live? What is missing, in words, with where to fix it.

One list, read by two things: Django's system checks (``handover.W1xx``, recovery.checks: shown
by ``manage.py check`` and every command that runs the checks) and the banner admins see on
every console page (recovery.context). A fresh install (``migrate``, a superuser) shows every
finding; the console's setup pages clear them. A handful of small queries, whatever the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Max, Q

from recovery import messages
from recovery.models import Queue

# Notification kinds that speak e-mail (the smtp kind sends through Django's e-mail settings).
EMAIL_KINDS = ("smtp",)


@dataclass(frozen=True)
class Finding:
    id: str  # the system check's id, "handover.W101"
    text: str  # what is missing, in words
    fix: str  # what to do about it
    url: str  # the console page that fixes it ("" when it is a setting)


def email_configured(notify_kind: str | None) -> bool:
    """Does Handover reach people by e-mail? Residents' messages and operators' notices both
    go through the notification integration, so it is e-mail when that integration speaks it
    (kind ``smtp``, whose relay is the row's address). Django's ``EMAIL_HOST`` alone is not
    enough: it has a default (the local relay of ``make run``), so it says nothing.

    The one place that decides it: change it here when e-mail is configured another way.
    """
    return notify_kind in EMAIL_KINDS


def _queue_words(queues) -> str:
    return ", ".join(str(Queue(q).label) for q in queues)


def unowned_queues(policies) -> tuple[list[str], list[str]]:
    """(queues with no owner, queues with no response period) from the policy rows: a queue
    is covered by its own row or the default row, for every integration (no integration)."""
    no_owner, no_period = [], []
    for queue in Queue.values:
        if policies.value(queue, None, "response_period") is None:
            no_period.append(queue)
        if policies.value(queue, None, "owner_id") is None:
            no_owner.append(queue)
    return no_owner, no_period


def integrations_not_checked() -> list[str]:
    """Integrations whose last successful check is older than their last change, or absent."""
    from ledger.models import Integration, JournalEntry

    rows = (
        JournalEntry.objects.filter(
            subject_type="ledger.integration",
            action__in=("ledger.integration.checked", "ledger.integration.configured"),
        )
        .order_by()
        .values("subject_id")
        .annotate(
            ready=Max(
                "at",
                filter=Q(action="ledger.integration.checked", evidence__problems=[]),
            ),
            changed=Max("at", filter=Q(action="ledger.integration.configured")),
        )
    )
    seen = {r["subject_id"]: r for r in rows}
    pks = dict(Integration.objects.values_list("name", "pk"))
    late = []
    # Every integration Handover has, whether or not its row was made yet (a row is made from
    # the environment when first needed): one never checked is named too.
    for name, label in Integration.NAMES:
        row = seen.get(str(pks.get(name)), {})
        ready, changed = row.get("ready"), row.get("changed")
        if ready is None or (changed is not None and changed > ready):
            late.append(label)
    return late


def role_members() -> dict[str, int]:
    """Active people per role; an admin counts only with ``is_staff`` (Django's admin needs it)."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.filter(is_active=True)
    return {
        "reviewer": users.filter(groups__name="reviewer").count(),
        "admin": users.filter(groups__name="admin", is_staff=True).count(),
    }


def integrations_without_owner() -> list[str]:
    """Every integration Handover has whose row names no owner (or has no row yet)."""
    from ledger.models import Integration

    owned = set(Integration.objects.filter(owner__isnull=False).values_list("name", flat=True))
    return [str(label) for name, label in Integration.NAMES if name not in owned]


def people_without_address() -> list[str]:
    """Active people with a console role and no e-mail address, by username."""
    from django.contrib.auth import get_user_model

    from recovery.setup import ROLES

    users = get_user_model().objects.filter(is_active=True, groups__name__in=ROLES)
    blank = users.filter(Q(email="") | Q(email__isnull=True)).distinct()
    return sorted(blank.values_list("username", flat=True))


def _more_findings(setup: str, people: str) -> list[Finding]:
    """An integration without an owner, a person with a role and no address, no categories."""
    from django.urls import reverse

    from intake.models import Category

    found = []
    unowned = integrations_without_owner()
    if unowned:
        found.append(
            Finding(
                "handover.W107",
                messages.READY_INTEGRATION_NO_OWNER % {"integrations": ", ".join(unowned)},
                messages.READY_INTEGRATION_NO_OWNER_FIX,
                reverse("recovery:integrations"),
            )
        )
    unreachable = people_without_address()
    if unreachable:
        found.append(
            Finding(
                "handover.W108",
                messages.READY_NO_ADDRESS % {"people": ", ".join(unreachable)},
                messages.READY_NO_ADDRESS_FIX,
                people,
            )
        )
    if not Category.objects.filter(active=True).exists():
        found.append(
            Finding(
                "handover.W109",
                messages.READY_NO_CATEGORY,
                messages.READY_NO_CATEGORY_FIX,
                setup + "#categories",
            )
        )
    return found


def findings() -> list[Finding]:
    """What stops this install from telling the right person about the right work."""
    from django.urls import reverse

    from ledger.models import Integration
    from recovery.queue.policies import Policies

    found = []
    no_owner, no_period = unowned_queues(Policies.load())
    setup = reverse("recovery:setup")
    if no_owner:
        found.append(
            Finding(
                "handover.W101",
                messages.READY_NO_OWNER % {"queues": _queue_words(no_owner)},
                messages.READY_NO_OWNER_FIX,
                setup + "#queues",
            )
        )
    if no_period:
        found.append(
            Finding(
                "handover.W102",
                messages.READY_NO_PERIOD % {"queues": _queue_words(no_period)},
                messages.READY_NO_PERIOD_FIX,
                setup + "#queues",
            )
        )
    late = integrations_not_checked()
    if late:
        found.append(
            Finding(
                "handover.W103",
                messages.READY_NOT_CHECKED % {"integrations": ", ".join(late)},
                messages.READY_NOT_CHECKED_FIX,
                reverse("recovery:integrations"),
            )
        )
    notify_kind = next(
        iter(Integration.objects.filter(name=Integration.NOTIFY).values_list("kind", flat=True)),
        None,
    )
    if notify_kind is None:
        # The row is made at first use, from NOTIFY_KIND: until then that is what it will be.
        from ledger.integrations import environment_kind

        notify_kind = environment_kind(Integration.NOTIFY)
    if not email_configured(notify_kind):
        found.append(
            Finding("handover.W104", messages.READY_NO_EMAIL, messages.READY_NO_EMAIL_FIX, "")
        )
    members = role_members()
    people = reverse("recovery:people")
    if not members["reviewer"]:
        found.append(
            Finding("handover.W105", messages.READY_NO_REVIEWER, messages.READY_ROLE_FIX, people)
        )
    if not members["admin"]:
        found.append(
            Finding("handover.W106", messages.READY_NO_ADMIN, messages.READY_ROLE_FIX, people)
        )
    return found + _more_findings(setup, people)
