"""Provisioning as code: people and roles, categories, queue owners and periods, integration
owners, read from a reviewed TOML file (``manage.py provision FILE``; docs/provision.toml is the
example, with a default policy set for every queue).

Everything goes through recovery.setup (and ledger.services for an integration's owner), so each
change is journalled field by field with the file's reason, by ``system:provision`` or the named
person. What already holds is left alone: running a file twice changes nothing the second time.
The file is checked whole before anything is written; one bad value writes nothing, and is
told as a message naming its key (``people."a b"``, ``categories.waste.keywords``), never a
traceback: a control character anywhere (a line break only in a description), a value the
model's field refuses (a username, an e-mail address, a slug, a name too long), more keywords
than a category may have, a period outside the console's bounds, a number or a nesting too large
to read. A queue's or an integration's owner must be an active person with a console role.
"""

from __future__ import annotations

import json
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from intake.models import Category, keyword_problem
from ledger import journal
from ledger import services as ledger_services
from ledger.integrations import ensure_integrations
from ledger.models import Integration
from ledger.services.common import require_permission
from recovery import setup
from recovery.durations import NotADuration, format_duration, parse_duration
from recovery.models import Queue
from recovery.setupforms import PERIOD_BOUNDS

ACTOR = "system:provision"
TOP = {"reason", "people", "categories", "queues", "integrations"}
PERSON = {"roles", "email", "may_recover", "active"}
CATEGORY = {"name", "description", "keywords", "active", "books_appointments", "tells_resident"}
QUEUE = {"owner", "backup_owner", "response_period", "review_cadence"}
INTEGRATION = {"owner"}


REASON_MAX = 2000


class ProvisionError(ValueError):
    """The file cannot be applied: says where (``people.alice.roles``) and why."""


def _key(name: str) -> str:
    """A table's key as a message shows it: bare when it is a plain word, else quoted and
    escaped (a NUL, a line break), at most 60 characters."""
    if name.replace("-", "").replace("_", "").isalnum() and name.isascii() and len(name) <= 60:
        return name
    quoted = json.dumps(name)
    return quoted if len(quoted) <= 60 else quoted[:56] + '..."'


def _shown(value) -> str:
    """A value as a message shows it, at most 80 characters (a 5,000-digit number's repr
    raises ValueError before it could be cut)."""
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:77] + "..."


def _unstorable(data) -> None:
    """Refuse, naming the key, a text the database cannot hold or a line cannot show: a NUL or
    another control character (a line break only in a description), keys included."""
    queue = deque([(data, "")])
    while queue:
        value, where = queue.popleft()
        if isinstance(value, dict):
            for key, item in value.items():
                inner = f"{where}.{_key(key)}" if where else _key(key)
                _refuse_controls(key, inner, lines=False)
                queue.append((item, inner))
        elif isinstance(value, list):
            queue.extend((item, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _refuse_controls(value, where, lines=where.endswith(".description"))


def _refuse_controls(text: str, where: str, *, lines: bool) -> None:
    allowed = "\n\r\t" if lines else ""
    bad = next((ch for ch in text if ch < " " or ch == "\x7f"), None)
    if bad is not None and bad not in allowed:
        raise ProvisionError(
            f"{where}: remove the control character U+{ord(bad):04X} (a NUL, a line break...): "
            "it cannot be stored or shown"
        )


def _field_clean(model, name: str, value, where: str):
    """``value`` as the model's field ``name`` takes it (its length, its validators), or a
    ProvisionError naming ``where``."""
    try:
        return model._meta.get_field(name).clean(value, None)
    except ValidationError as exc:
        raise ProvisionError(f"{where}: {' '.join(exc.messages)}") from None


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
        raise ProvisionError(f"{where}: expected {kind.__name__}, got {_shown(value)}")
    return value


def _load(path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProvisionError(f"{path}: not TOML ({exc})") from None
    except RecursionError:
        raise ProvisionError(f"{path}: arrays or tables nested too deeply to read") from None
    except ValueError as exc:  # a whole number of more than 4,300 digits
        raise ProvisionError(f"{path}: a value cannot be read ({exc})") from None


def _tables(data: dict, name: str, shown: str) -> dict:
    tables = data.get(name, {})
    if not isinstance(tables, dict):
        raise ProvisionError(f"{name}: expected a table of [{name}.<{shown}>]")
    return tables


def _read_person(username: str, person) -> dict:
    where = f"people.{_key(username)}"
    user_model = get_user_model()
    _field_clean(user_model, "username", username, where)
    _table(person, where, PERSON)
    roles = person.get("roles", [])
    if not isinstance(roles, list) or any(r not in setup.ROLES for r in roles):
        raise ProvisionError(f"{where}.roles: a list of {', '.join(setup.ROLES)}")
    for key, kind in (("email", str), ("may_recover", bool), ("active", bool)):
        if key in person:
            _typed(person[key], kind, f"{where}.{key}")
    if "email" in person:
        _field_clean(user_model, "email", person["email"], f"{where}.email")
    return person


def _read_keywords(words, where: str) -> str:
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ProvisionError(f"{where}: a list of words or phrases")
    keywords = "\n".join(w.strip() for w in words if w.strip())
    problem = keyword_problem(keywords)
    if problem:
        raise ProvisionError(f"{where}: {problem}")
    return keywords


def _read_category(slug: str, category) -> dict:
    where = f"categories.{_key(slug)}"
    _field_clean(Category, "slug", slug, where)
    _table(category, where, CATEGORY)
    changes = {}
    for key in ("name", "description"):
        if key in category:
            value = _typed(category[key], str, f"{where}.{key}")
            changes[key] = _field_clean(Category, key, value, f"{where}.{key}")
    if "keywords" in category:
        changes["keywords"] = _read_keywords(category["keywords"], f"{where}.keywords")
    for key in ("active", "books_appointments", "tells_resident"):
        if key in category:
            changes[key] = _typed(category[key], bool, f"{where}.{key}")
    return changes


def _read_period(value, where: str):
    try:
        period = parse_duration(_typed(value, str, where))
    except NotADuration as exc:
        raise ProvisionError(f"{where}: {exc}") from None
    low, high = PERIOD_BOUNDS
    if not low <= period <= high:
        raise ProvisionError(
            f"{where}: between {format_duration(low)} and {format_duration(high)}, as on the "
            "console's queue page"
        )
    return period


def _read_queue(key: str, queue) -> dict:
    where = f"queues.{_key(key)}"
    if key != "default" and key not in Queue.values:
        raise ProvisionError(f"{where}: no such queue (use default, {', '.join(Queue.values)})")
    _table(queue, where, QUEUE)
    changes = {}
    for name in ("owner", "backup_owner"):
        if name in queue:
            changes[name] = _typed(queue[name], str, f"{where}.{name}")
    for name in ("response_period", "review_cadence"):
        if name in queue:
            changes[name] = _read_period(queue[name], f"{where}.{name}")
    return changes


def _read_integration(name: str, row) -> dict:
    where = f"integrations.{_key(name)}"
    names = dict(Integration.NAMES)
    if name not in names:
        raise ProvisionError(f"{where}: no such integration (use {', '.join(names)})")
    _table(row, where, INTEGRATION)
    return {"owner": _typed(row.get("owner", ""), str, f"{where}.owner")}


def read(path: Path) -> Plan:
    """Parse and check the whole file; nothing is read from or written to the database."""
    data = _load(path)
    _table(data, "file", TOP)
    _unstorable(data)
    reason = data.get("reason", "")
    if not isinstance(reason, str) or not reason.strip():
        raise ProvisionError("reason: every change is journalled with one; say why (a ticket)")
    if len(reason) > REASON_MAX:
        raise ProvisionError(f"reason: at most {REASON_MAX} characters (it has {len(reason)})")
    plan = Plan(reason=reason.strip())
    for username, person in _tables(data, "people", "username").items():
        plan.people[username] = _read_person(username, person)
    for slug, category in _tables(data, "categories", "key").items():
        plan.categories[slug] = _read_category(slug, category)
    for key, queue in _tables(data, "queues", "queue").items():
        plan.queues["" if key == "default" else key] = _read_queue(key, queue)
    for name, row in _tables(data, "integrations", "name").items():
        plan.integrations[name] = _read_integration(name, row)
    return plan


def _person(username: str, where: str, made: dict):
    user = made.get(username) or get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ProvisionError(f"{where}: no person {username!r} (add them under [people])")
    return user


def _owner(username: str, where: str, made: dict):
    """The person who will own a queue or an integration: one who can open the console (an
    active person with a role), or a ProvisionError naming ``where``."""
    user = _person(username, where, made)
    if not (user.is_active and setup.roles_of(user)):
        raise ProvisionError(
            f"{where}: {username!r} has no console role ({', '.join(setup.ROLES)}) or is not "
            f"active, so could not see what they own: give them a role under [people.{username}]"
        )
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
                roles = person.get("roles", setup.roles_of(user))
                setup.refuse_losing_last_admin(
                    user, stays_admin=setup.ADMIN_ROLE in roles and user.is_active
                )
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
                        _owner(changes[name], f"{where}.{name}", made) if changes[name] else None
                    )
            diff = setup.configure_policy(queue, actor=actor, reason=reason, changes=changes)
            if diff:
                said.append(f"queue {setup.queue_key(queue)}: {', '.join(diff)}")
        for name, row in plan.integrations.items():
            owner = (
                _owner(row["owner"], f"integrations.{name}.owner", made) if row["owner"] else None
            )
            current = Integration.objects.get(name=name)
            if current.owner_id != (owner.pk if owner else None):
                ledger_services.configure_integration(
                    name, actor=actor, reason=reason, changes={"owner": owner}
                )
                said.append(f"integration {name}: owner")
    return said
