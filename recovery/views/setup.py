"""Setting up: queue owners and response periods, categories, people and their roles.

Every save has a reason and is journalled field by field (recovery.setup); each edit page shows
the changes made there, as an integration's settings page does.
"""

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

import recovery.messages
from intake.models import Category
from ledger.models import JournalEntry
from recovery import durations, setup
from recovery.models import Queue, ResponsePolicy
from recovery.readiness import findings
from recovery.setupforms import CategoryForm, PersonForm, PolicyForm
from recovery.views.common import REFUSALS, console_view, require

POLICY_PERMISSION = "recovery.change_responsepolicy"
DURATIONS = ("response_period", "review_cadence")
LABELS = {
    "owner": "Owner",
    "backup_owner": "Backup owner",
    "response_period": "Respond within",
    "review_cadence": "Opened at least every",
    "books_appointments": "Books appointments",
    "may_recover": "May retry failed writes",
    "is_staff": "Staff (Django's admin)",
    "email": "E-mail address",
    # Changed in Django's admin (recovery/people_admin.py), journalled as the People page does.
    "is_superuser": "Superuser",
    "is_active": "Active",
    "groups": "Groups",
    "permissions": "Permissions",
}
PERSON_ACTIONS = ("recovery.person.roles", "recovery.person.email_changed")


def _written(field, value) -> str:
    if value is None or value == "" or value == []:
        return "(none)"
    if field in DURATIONS:
        return durations.format_duration(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value)
    return str(value)


def history(subject, actions, limit=20) -> list[dict]:
    """The last changes journalled about ``subject``: who, when, why, field by field."""
    meta = subject._meta
    entries = JournalEntry.objects.filter(
        subject_type=f"{meta.app_label}.{meta.model_name}",
        subject_id=str(subject.pk),
        action__in=actions,
    ).order_by("-at", "-id")[:limit]
    return [
        {
            "entry": entry,
            "fields": [
                (
                    LABELS.get(field, field.replace("_", " ").capitalize()),
                    _written(field, change.get("from")),
                    _written(field, change.get("to")),
                )
                for field, change in (entry.evidence or {}).items()
                if isinstance(change, dict)
            ],
        }
        for entry in entries
    ]


def _queue(key: str) -> str:
    if key == "default":
        return ""
    if key not in Queue.values:
        raise Http404("No such queue.")
    return key


@require_GET
@console_view
def setup_page(request):
    require(request.user, POLICY_PERMISSION, "set up queues and categories")
    rows = {
        p.queue: p
        for p in ResponsePolicy.objects.filter(integration__isnull=True).select_related(
            "owner", "backup_owner"
        )
    }
    default = rows.get("")
    queues = [{"key": "default", "label": "Every queue without its own row", "policy": default}] + [
        {"key": q.value, "label": q.label, "policy": rows.get(q.value)} for q in Queue
    ]
    for q in queues[1:]:
        q["falls_back"] = q["policy"] is None and default is not None
    specific = ResponsePolicy.objects.filter(integration__isnull=False).select_related(
        "integration", "owner", "backup_owner"
    )
    return render(
        request,
        "recovery/setup.html",
        {
            "queues": queues,
            "specific": specific,
            "categories": Category.objects.order_by("-active", "name"),
            "findings": findings(),
        },
    )


def _save(request, form, call, back, done):
    """Call a setup service with the form's reason; said on the form when refused."""
    try:
        diff = call(form.cleaned_data["reason"])
    except REFUSALS as exc:
        form.add_error(None, str(exc))
        return None
    messages.success(request, done if diff else recovery.messages.SETUP_NOTHING_CHANGED)
    return redirect(back)


@require_http_methods(["GET", "POST"])
@console_view
def policy_edit(request, key):
    require(request.user, POLICY_PERMISSION, "set a queue's owner and response period")
    queue = _queue(key)
    policy = ResponsePolicy.objects.filter(queue=queue, integration__isnull=True).first()
    label = Queue(queue).label if queue else "Every queue without its own row"
    form = PolicyForm(request.POST if request.method == "POST" else None, policy=policy)
    if request.method == "POST" and form.is_valid():
        done = _save(
            request,
            form,
            lambda reason: setup.configure_policy(
                queue, actor=request.user, reason=reason, changes=form.changes()
            ),
            reverse("recovery:setup") + "#queues",
            recovery.messages.SETUP_QUEUE_SAVED % {"queue": label},
        )
        if done:
            return done
    return render(
        request,
        "recovery/setup_edit.html",
        {
            "title": label,
            "what": "queue",
            "form": form,
            "history": history(policy, ("recovery.policy.created", "recovery.policy.configured"))
            if policy
            else [],
        },
        status=400 if form.is_bound and form.errors else 200,
    )


@require_http_methods(["GET", "POST"])
@console_view
def category_edit(request, slug=None):
    category = get_object_or_404(Category, slug=slug) if slug else Category()
    require(
        request.user,
        "intake.change_category" if slug else "intake.add_category",
        "change categories" if slug else "add a category",
    )
    form = CategoryForm(request.POST if request.method == "POST" else None, instance=category)
    if request.method == "POST" and form.is_valid():
        key = slug or form.cleaned_data["slug"]
        done = _save(
            request,
            form,
            lambda reason: setup.configure_category(
                key, actor=request.user, reason=reason, changes=form.changes()
            ),
            reverse("recovery:setup") + "#categories",
            recovery.messages.SETUP_CATEGORY_SAVED % {"category": form.cleaned_data["name"]},
        )
        if done:
            return done
    return render(
        request,
        "recovery/setup_edit.html",
        {
            "title": category.name if slug else "A new category",
            "what": "category",
            "form": form,
            "history": history(category, ("intake.category.created", "intake.category.configured"))
            if slug
            else [],
        },
        status=400 if form.is_bound and form.errors else 200,
    )


@require_GET
@console_view
def people_page(request):
    require(request.user, setup.PEOPLE_PERMISSION, "see people and their roles")
    users = (
        get_user_model()
        .objects.prefetch_related("groups", "user_permissions")
        .order_by("-is_active", "username")
    )
    rows = [
        {
            "user": u,
            "roles": setup.roles_of(u),
            "may_recover": any(p.codename == "recover_operation" for p in u.user_permissions.all()),
        }
        for u in users
    ]
    return render(request, "recovery/people.html", {"rows": rows, "roles": setup.ROLES})


@require_http_methods(["GET", "POST"])
@console_view
def person_edit(request, pk):
    require(request.user, setup.PEOPLE_PERMISSION, "change a person's roles")
    person = get_object_or_404(get_user_model(), pk=pk)
    initial = {
        "roles": setup.roles_of(person),
        "may_recover": person.user_permissions.filter(codename="recover_operation").exists(),
        "email": person.email,
    }
    form = PersonForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        done = _save(
            request,
            form,
            lambda reason: setup.change_person(
                person,
                actor=request.user,
                reason=reason,
                roles=form.cleaned_data["roles"],
                may_recover=form.cleaned_data["may_recover"],
                email=form.cleaned_data["email"],
            ),
            reverse("recovery:people"),
            recovery.messages.SETUP_PERSON_SAVED % {"person": person.get_username()},
        )
        if done:
            return done
    return render(
        request,
        "recovery/setup_edit.html",
        {
            "title": person.get_username(),
            "what": "person",
            "person": person,
            "form": form,
            "history": history(person, PERSON_ACTIONS),
        },
        status=400 if form.is_bound and form.errors else 200,
    )
