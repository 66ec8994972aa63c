"""Setting an install up: queue owners and response periods, categories, people's roles and
e-mail addresses.

Each change has a reason and one journal row with the fields it changed, from and to, as an
integration's settings have (ledger.services.configure_integration). The console's setup pages
and ``manage.py provision`` both come here; so a provisioned install and a hand-made one leave
the same evidence. A change that changes nothing writes nothing (provision run twice is quiet).

A person's e-mail address is personal data, and the journal is kept for ever: its row says that
the address was set, changed or removed, never the address.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group, Permission
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from intake.models import Category
from intake.workflow import ActionRefused
from ledger import journal, mailaddress
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


ADMIN_ROLE = "admin"
PERSON_CHANGED = "recovery.person.roles"  # every change to a person's roles or flags
LAST_ADMIN = (
    "{person} is the last active member of the admin role: give the role to someone else "
    "first. Without one, nobody could grant roles or set Handover up."
)


class LastAdmin(ActionRefused):
    """The change would leave no active member of the admin role."""


def refuse_losing_last_admin(person, *, stays_admin: bool) -> None:
    """Refuse (LastAdmin) a change after which ``person`` is no active admin-role member when
    they are the only one now. Run inside the change's transaction, before the person's row is
    locked: the admin group's row is locked first, so two admins demoting each other at once
    are taken one after the other (the second sees the first's change) and cannot deadlock."""
    if stays_admin:
        return
    list(Group.objects.select_for_update().filter(name=ADMIN_ROLE).values_list("pk", flat=True))
    admins = set(
        get_user_model()
        .objects.filter(groups__name=ADMIN_ROLE, is_active=True)
        .values_list("pk", flat=True)
    )
    if admins == {person.pk}:
        raise LastAdmin(LAST_ADMIN.format(person=person.get_username()))


def record_person_change(person, *, actor, reason, diff: dict) -> None:
    """One journal row for a change to a person's roles or flags (the console's People page,
    provisioning, Django's admin): the same action, so a person's history reads as one."""
    journal.record(
        person,
        PERSON_CHANGED,
        actor=actor,
        reason=reason,
        evidence={"username": person.get_username(), **diff},
    )


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
        refuse_losing_last_admin(user, stays_admin=ADMIN_ROLE in roles and user.is_active)
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
            record_person_change(person, actor=actor, reason=reason, diff=diff)
    return diff


# What the journal says of an address: that there is one, never what it is.
ADDRESS_WORDS = {False: "", True: "an address"}


def clean_address(value: str) -> str:
    """An address as Handover keeps it: trimmed, its domain in lower case, valid as Django
    validates one and as the relay is written to (ledger.mailaddress: an international domain
    must have an IDNA 2008 form), at most 254 characters. ValueError otherwise."""
    email = get_user_model().objects.normalize_email((value or "").strip())
    if not email:
        return ""
    if len(email) > 254:  # lower case can be longer than what was typed
        raise ValueError("An address has at most 254 characters.")
    try:
        validate_email(email)
        mailaddress.parse(email)
    except (ValidationError, mailaddress.AddressError) as exc:
        raise ValueError("Enter a valid e-mail address.") from exc
    return email


def set_email(user, *, actor, reason, email: str) -> dict:
    """Give a person the e-mail address Handover tells them at (recovery.notices); "" removes
    it. Checked by ``clean_address`` (ValueError otherwise). Journalled as
    ``recovery.person.email_changed`` without the address itself."""
    reason = require_reason(reason)
    require_permission(actor, PEOPLE_PERMISSION)
    email = clean_address(email)
    with transaction.atomic():
        person = get_user_model().objects.select_for_update().get(pk=user.pk)
        if person.email == email:
            return {}
        diff = {
            "email": {
                "from": ADDRESS_WORDS[bool(person.email)],
                "to": "a new address" if person.email and email else ADDRESS_WORDS[bool(email)],
            }
        }
        person.email = email
        person.save(update_fields=["email"])
        journal.record(
            person,
            "recovery.person.email_changed",
            actor=actor,
            reason=reason,
            evidence={"username": person.get_username(), **diff},
        )
    user.email = email
    return diff


def change_person(user, *, actor, reason, roles, may_recover=None, email=None) -> dict:
    """The person page's one save: roles (``set_roles``) and, when given, the e-mail address
    (``set_email``), in one transaction; field -> change for what changed."""
    with transaction.atomic():
        diff = set_roles(user, actor=actor, reason=reason, roles=roles, may_recover=may_recover)
        if email is not None:
            diff.update(set_email(user, actor=actor, reason=reason, email=email))
    return diff
