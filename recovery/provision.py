"""Provisioning as code: people and roles, categories, queue owners and periods, integration
owners, read from a reviewed TOML file (``manage.py provision FILE``; docs/provision.toml is the
example, with a default policy set for every queue).

Everything goes through recovery.setup (and ledger.services for an integration's owner), so each
change is journalled field by field with the file's reason, by ``system:provision`` or the named
person. What already holds is left alone: running a file twice changes nothing the second time.
The file is checked whole before anything is written; one bad value writes nothing.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction

from intake.models import Category
from ledger import journal
from ledger import services as ledger_services
from ledger.integrations import ensure_integrations
from ledger.models import Integration
from ledger.services.common import require_permission
from recovery import setup
from recovery.durations import NotADuration, parse_duration
from recovery.models import Queue

ACTOR = "system:provision"
TOP = {"reason", "people", "categories", "queues", "integrations"}
PERSON = {"roles", "email", "may_recover", "active"}
CATEGORY = {"name", "description", "keywords", "active", "books_appointments", "tells_resident"}
QUEUE = {"owner", "backup_owner", "response_period", "review_cadence"}
INTEGRATION = {"owner"}


class ProvisionError(ValueError):
    """The file cannot be applied: says where (``people.alice.roles``) and why."""


@dataclass
class Plan:
    reason: str
    people: dict = field(default_factory=dict)
    categories: dict = field(default_factory=dict)
    queues: dict = field(default_factory=dict)
    integrations: dict = field(default_factory=dict)


def _table(value, where, allowed) -> dict:
    if not isinstance(value, dict):
        raise ProvisionError(f"{where}: expected a table")
    unknown = set(value) - allowed
    if unknown:
        known = ", ".join(sorted(allowed))
        raise ProvisionError(f"{where}.{sorted(unknown)[0]}: not known here (use: {known})")
    return value


def _typed(value, kind, where):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProvisionError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def read(path: Path) -> Plan:
    """Parse and check the whole file; nothing is read from or written to the database."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProvisionError(f"{path}: not TOML ({exc})") from None
    _table(data, "file", TOP)
    reason = data.get("reason", "")
    if not isinstance(reason, str) or not reason.strip():
        raise ProvisionError("reason: every change is journalled with one; say why (a ticket)")
    plan = Plan(reason=reason.strip())
    people = data.get("people", {})
    if not isinstance(people, dict):
        raise ProvisionError("people: expected a table of [people.<username>]")
    for username, person in people.items():
        where = f"people.{username}"
        _table(person, where, PERSON)
        roles = person.get("roles", [])
        if not isinstance(roles, list) or any(r not in setup.ROLES for r in roles):
            raise ProvisionError(f"{where}.roles: a list of {', '.join(setup.ROLES)}")
        for key, kind in (("email", str), ("may_recover", bool), ("active", bool)):
            if key in person:
                _typed(person[key], kind, f"{where}.{key}")
        plan.people[username] = person
    categories = data.get("categories", {})
    if not isinstance(categories, dict):
        raise ProvisionError("categories: expected a table of [categories.<key>]")
    for slug, category in categories.items():
        where = f"categories.{slug}"
        _table(category, where, CATEGORY)
        changes = {}
        for key in ("name", "description"):
            if key in category:
                changes[key] = _typed(category[key], str, f"{where}.{key}")
        if "keywords" in category:
            words = category["keywords"]
            if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
                raise ProvisionError(f"{where}.keywords: a list of words or phrases")
            changes["keywords"] = "\n".join(w.strip() for w in words if w.strip())
        for key in ("active", "books_appointments", "tells_resident"):
            if key in category:
                changes[key] = _typed(category[key], bool, f"{where}.{key}")
        plan.categories[slug] = changes
    queues = data.get("queues", {})
    if not isinstance(queues, dict):
        raise ProvisionError("queues: expected a table of [queues.<queue>]")
    for key, queue in queues.items():
        where = f"queues.{key}"
        if key != "default" and key not in Queue.values:
            raise ProvisionError(f"{where}: no such queue (use default, {', '.join(Queue.values)})")
        _table(queue, where, QUEUE)
        changes = {}
        for name in ("owner", "backup_owner"):
            if name in queue:
                changes[name] = _typed(queue[name], str, f"{where}.{name}")
        for name in ("response_period", "review_cadence"):
            if name in queue:
                try:
                    changes[name] = parse_duration(_typed(queue[name], str, f"{where}.{name}"))
                except NotADuration as exc:
                    raise ProvisionError(f"{where}.{name}: {exc}") from None
        plan.queues["" if key == "default" else key] = changes
    integrations = data.get("integrations", {})
    if not isinstance(integrations, dict):
        raise ProvisionError("integrations: expected a table of [integrations.<name>]")
    names = dict(Integration.NAMES)
    for name, row in integrations.items():
        where = f"integrations.{name}"
        if name not in names:
            raise ProvisionError(f"{where}: no such integration (use {', '.join(names)})")
        _table(row, where, INTEGRATION)
        plan.integrations[name] = {"owner": _typed(row.get("owner", ""), str, f"{where}.owner")}
    return plan


def _person(username: str, where: str, made: dict):
    user = made.get(username) or get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ProvisionError(f"{where}: no person {username!r} (add them under [people])")
    return user


def apply(plan: Plan, *, actor=ACTOR) -> list[str]:
    """Make the database say what the plan says, in one transaction; what changed, in words."""
    said = []
    reason = plan.reason
    users = get_user_model().objects
    with transaction.atomic():
        ensure_integrations()
        made = {}
        for username, person in plan.people.items():
            user = users.filter(username=username).first()
            if user is None:
                require_permission(actor, "auth.add_user")
                user = users.create_user(username=username, email=person.get("email", ""))
                user.set_unusable_password()  # set with manage.py changepassword, never here
                user.save(update_fields=["password"])
                journal.record(
                    user,
                    "recovery.person.created",
                    actor=actor,
                    reason=reason,
                    evidence={"username": username},
                )
                said.append(f"person {username}: created (set a password: changepassword)")
            made[username] = user
            fields = {}
            if "email" in person and user.email != person["email"]:
                fields["email"] = {"from": user.email, "to": person["email"]}
                user.email = person["email"]
            if "active" in person and user.is_active != person["active"]:
                fields["is_active"] = {"from": user.is_active, "to": person["active"]}
                user.is_active = person["active"]
            if fields:
                user.save(update_fields=[f for f in ("email", "is_active") if f in fields])
                journal.record(
                    user,
                    "recovery.person.configured",
                    actor=actor,
                    reason=reason,
                    evidence={"username": username, **fields},
                )
                said.append(f"person {username}: {', '.join(fields)}")
            diff = setup.set_roles(
                user,
                actor=actor,
                reason=reason,
                roles=person.get("roles", setup.roles_of(user)),
                may_recover=person.get("may_recover"),
            )
            if diff:
                said.append(f"person {username}: {', '.join(diff)}")
        for slug, changes in plan.categories.items():
            if not Category.objects.filter(slug=slug).exists() and "name" not in changes:
                raise ProvisionError(f"categories.{slug}.name: a new category needs a name")
            if setup.configure_category(slug, actor=actor, reason=reason, changes=changes):
                said.append(f"category {slug}: set")
        for queue, changes in plan.queues.items():
            where = f"queues.{setup.queue_key(queue)}"
            changes = dict(changes)
            for name in ("owner", "backup_owner"):
                if name in changes:
                    changes[name] = (
                        _person(changes[name], f"{where}.{name}", made) if changes[name] else None
                    )
            diff = setup.configure_policy(queue, actor=actor, reason=reason, changes=changes)
            if diff:
                said.append(f"queue {setup.queue_key(queue)}: {', '.join(diff)}")
        for name, row in plan.integrations.items():
            owner = (
                _person(row["owner"], f"integrations.{name}.owner", made) if row["owner"] else None
            )
            current = Integration.objects.get(name=name)
            if current.owner_id != (owner.pk if owner else None):
                ledger_services.configure_integration(
                    name, actor=actor, reason=reason, changes={"owner": owner}
                )
                said.append(f"integration {name}: owner")
    return said
