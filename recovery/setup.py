"""Setting an install up: queue owners and response periods, categories, people's roles.

Each change has a reason and one journal row with the fields it changed, from and to, as an
integration's settings have (ledger.services.configure_integration). The console's setup pages
and ``manage.py provision`` both come here; so a provisioned install and a hand-made one leave
the same evidence. A change that changes nothing writes nothing (provision run twice is quiet).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.db import transaction

from intake.models import Category
from ledger import journal
from ledger.services.common import require_permission, require_reason
from recovery.models import Queue, ResponsePolicy
from recovery.roles import ROLE_PERMISSIONS

POLICY_FIELDS = ("owner", "backup_owner", "response_period", "review_cadence")
CATEGORY_FIELDS = (
    "name",
    "description",
    "keywords",
    "active",
    "books_appointments",
    "tells_resident",
)
ROLES = tuple(ROLE_PERMISSIONS)  # coordinator, reviewer, admin: each a group of that name
# Given per person beside a role: retry and complete failed writes by hand (the owner of failed
# work needs it; the coordinator role does not have it by default).
RECOVER = "ledger.recover_operation"
PEOPLE_PERMISSION = "auth.change_user"


def _shown(value):
    """A value as the journal keeps it: a person by username, a duration in seconds."""
    if isinstance(value, AbstractBaseUser):
        return value.get_username()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _apply(row, changes: dict, fields) -> dict:
    """Set ``changes`` on ``row``; field -> {from, to} for each one that changed."""
    unknown = set(changes) - set(fields)
    if unknown:
        raise ValueError(f"not settable here: {', '.join(sorted(unknown))}")
    diff = {}
    for field, value in changes.items():
        before = _shown(getattr(row, field))
        setattr(row, field, value)
        after = _shown(getattr(row, field))
        if before != after:
            diff[field] = {"from": before, "to": after}
    return diff


def queue_key(queue: str) -> str:
    """The URL's and the provisioning file's name for a queue ("default" for every queue)."""
    return queue or "default"


def configure_policy(queue: str, *, actor, reason, changes: dict) -> dict:
    """Set the owner, backup owner, response period or cadence of one queue (``""``: the
    default row, for every queue without its own). Made on first use. Returns the diff."""
    reason = require_reason(reason)
    require_permission(actor, "recovery.change_responsepolicy")
    if queue and queue not in Queue.values:
        raise ValueError(f"no queue {queue!r}")
    with transaction.atomic():
        row = (
            ResponsePolicy.objects.select_for_update()
            .filter(queue=queue, integration__isnull=True)
            .first()
        )
        created = row is None
        row = row or ResponsePolicy(queue=queue)
        diff = _apply(row, changes, POLICY_FIELDS)
        if created:  # the journal says what a new row started as, defaults included
            diff = {f: {"from": None, "to": _shown(getattr(row, f))} for f in POLICY_FIELDS}
        if not diff:
            return {}
        row.full_clean(validate_unique=False)
        row.save()
        journal.record(
            row,
            "recovery.policy.created" if created else "recovery.policy.configured",
            actor=actor,
            reason=reason,
            evidence={"queue": queue_key(queue), **diff},
        )
    return diff


def configure_category(slug: str, *, actor, reason, changes: dict) -> dict:
    """Add a category or change one (name, description, keywords, active, books appointments).
    Retiring one is ``active: False``: a category is never deleted (enquiries name it)."""
    reason = require_reason(reason)
    with transaction.atomic():
        row = Category.objects.select_for_update().filter(slug=slug).first()
        created = row is None
        require_permission(actor, "intake.add_category" if created else "intake.change_category")
        row = row or Category(slug=slug, name=slug)
        diff = _apply(row, changes, CATEGORY_FIELDS)
        if created:  # the journal says what a new row started as, defaults included
            diff = {f: {"from": None, "to": _shown(getattr(row, f))} for f in CATEGORY_FIELDS}
        if not diff:
            return {}
        row.full_clean()
        row.save()
        journal.record(
            row,
            "intake.category.created" if created else "intake.category.configured",
            actor=actor,
            reason=reason,
            evidence={"slug": slug, **diff},
        )
    return diff


def roles_of(user) -> list[str]:
    return sorted(g.name for g in user.groups.all() if g.name in ROLES)


def set_roles(user, *, actor, reason, roles, may_recover: bool | None = None, staff=None) -> dict:
    """Give a person exactly ``roles`` (a role is the group of that name), and optionally the
    recover permission and staff status. An admin needs ``is_staff`` to open Django's admin:
    granting the admin role sets it, removing the role clears it (a superuser keeps it)."""
    reason = require_reason(reason)
    require_permission(actor, PEOPLE_PERMISSION)
    roles = sorted(set(roles))
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"no role {sorted(unknown)[0]!r}")
    with transaction.atomic():
        person = get_user_model().objects.select_for_update().get(pk=user.pk)
        diff = {}
        had = roles_of(person)
        if had != roles:
            groups = Group.objects.filter(name__in=ROLES)
            person.groups.remove(*[g for g in groups if g.name not in roles])
            person.groups.add(*[g for g in groups if g.name in roles])
            diff["roles"] = {"from": had, "to": roles}
        if staff is None and "admin" in set(roles) ^ set(had):
            staff = "admin" in roles or person.is_superuser
        if staff is not None and person.is_staff != staff:
            diff["is_staff"] = {"from": person.is_staff, "to": staff}
            person.is_staff = staff
            person.save(update_fields=["is_staff"])
        if may_recover is not None:
            app_label, codename = RECOVER.split(".")
            permission = Permission.objects.get(
                content_type__app_label=app_label, codename=codename
            )
            has = person.user_permissions.filter(pk=permission.pk).exists()
            if has != may_recover:
                if may_recover:
                    person.user_permissions.add(permission)
                else:
                    person.user_permissions.remove(permission)
                diff["may_recover"] = {"from": has, "to": may_recover}
        if diff:
            journal.record(
                person,
                "recovery.person.roles",
                actor=actor,
                reason=reason,
                evidence={"username": person.get_username(), **diff},
            )
    return diff
