"""Integrations: their state, pause and resume, and the backlog reviewed before release."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

import recovery.messages
from config.destinations import shown
from ledger import policies as ledger_policies
from ledger import reads
from ledger import services as ledger_services
from ledger.models import Action, Integration, JournalEntry, Operation
from recovery import durations, queue
from recovery.explain import RUNBOOKS
from recovery.forms import LABELS, SECONDS, IntegrationForm, ReasonForm, ReleaseForm
from recovery.models import ResponsePolicy
from recovery.operator_actions import RELEASE
from recovery.permissions import CONFIGURE_PERMISSION, INTEGRATION_PERMISSION
from recovery.views.common import (
    REFUSALS,
    console_view,
    form_refused,
    require,
    run,
)


@require_GET
@console_view
def integration_list(request):
    integrations = list(
        Integration.objects.select_related("owner", "paused_by")
        .annotate(held=queue.held_count())
        .order_by("name")
    )
    for row in integrations:
        # E-mail is retried for hours (EMAIL_RETRY_*), not by the row's budget: said so.
        schedule = ledger_policies.retry_schedule(
            Operation(action=Action.SEND_NOTICE, integration=row)
        )
        row.retry_window = schedule if schedule.window is not None else None
        # Reads' share of the workers (ledger.reads): only where Handover reads.
        row.reads_share = reads.share(row) if row.name in Integration.READ_FROM else None
    policies = list(
        ResponsePolicy.objects.select_related("integration", "owner", "backup_owner").order_by(
            "queue", "integration__name"
        )
    )
    return render(
        request,
        "recovery/integrations.html",
        {
            "integrations": integrations,
            "policies": policies,
            "can_pause": request.user.has_perm(INTEGRATION_PERMISSION),
            "can_configure": request.user.has_perm(CONFIGURE_PERMISSION),
            "pause_runbook": RUNBOOKS["pause-procedure"],
            "now": timezone.now(),
            "reads_per_enquiry": reads.per_enquiry(),
        },
    )


def _integration(name):
    return get_object_or_404(Integration, name=name)


@require_POST
@console_view
def pause(request, name):
    require(request.user, INTEGRATION_PERMISSION, "pause an integration")
    integration = _integration(name)
    back = reverse("recovery:integrations")
    form = ReasonForm(request.POST)
    if not form.is_valid():
        return form_refused(request, form, back)
    if integration.paused:
        messages.error(request, recovery.messages.ALREADY_PAUSED % {"integration": integration})
        return redirect(back)
    return run(
        request,
        back,
        lambda: ledger_services.pause_integration(
            name, actor=request.user, reason=form.cleaned_data["reason"]
        ),
        recovery.messages.PAUSED % {"integration": integration},
    )


@require_POST
@console_view
def resume(request, name):
    require(request.user, INTEGRATION_PERMISSION, "resume an integration")
    integration = _integration(name)
    back = reverse("recovery:integrations")
    form = ReasonForm(request.POST)
    if not form.is_valid():
        return form_refused(request, form, back)
    if not integration.paused:
        messages.error(request, recovery.messages.NOT_PAUSED % {"integration": integration})
        return redirect(back)
    response = run(
        request,
        reverse("recovery:backlog", args=[name]),
        lambda: ledger_services.resume_integration(
            name, actor=request.user, reason=form.cleaned_data["reason"]
        ),
        recovery.messages.RESUMED % {"integration": integration},
    )
    integration.refresh_from_db()
    return response if not integration.paused else redirect(back)


@require_POST
@console_view
def check(request, name):
    """Ask the destination whether it is ready; nothing there changes, the result is
    journalled. Said on the page: each problem in the destination's and the kind's words."""
    require(request.user, INTEGRATION_PERMISSION, "check an integration")
    integration = _integration(name)
    problems = ledger_services.check_integration(name, actor=request.user)
    if problems:
        for problem in problems:
            messages.error(
                request,
                recovery.messages.CHECK_PROBLEM % {"integration": integration, "problem": problem},
            )
    else:
        messages.success(
            request,
            recovery.messages.CHECK_READY
            % {"integration": integration, "url": shown(integration.base_url)},
        )
    return redirect(reverse("recovery:integrations"))


def _backlog(name):
    return list(ledger_services.backlog(name).select_related("enquiry", "owner"))


@require_GET
@console_view
def backlog(request, name):
    integration = _integration(name)
    held = _backlog(name)
    return render(
        request,
        "recovery/backlog.html",
        {
            "integration": integration,
            "backlog": held,
            # Writes can be chosen for release by an admin once the integration runs again.
            "choose": request.user.has_perm(INTEGRATION_PERMISSION) and not integration.paused,
            "pause_runbook": RUNBOOKS["pause-procedure"],
        },
    )


def release_summary(chosen) -> list[dict]:
    """Per action: how many writes, the oldest and the newest held (what will be sent)."""
    by_action = {}
    for op in chosen:
        by_action.setdefault(op.action, []).append(op)
    return [
        {
            "action": action,
            "count": len(ops),
            "oldest": min(op.created_at for op in ops),
            "newest": max(op.created_at for op in ops),
        }
        for action, ops in sorted(by_action.items())
    ]


@require_POST
@console_view
def release(request, name):
    """Two steps: the chosen writes and a reason give a summary to confirm; the confirmation
    (``confirmed``, the same choice and reason) releases them."""
    if not RELEASE.may(request.user):  # the registry's row (recovery/operator_actions.py)
        require(request.user, RELEASE.permissions[0], RELEASE.label.lower())
    integration = _integration(name)
    back = reverse("recovery:backlog", args=[name])
    held = _backlog(name)
    form = ReleaseForm(request.POST, backlog=held)
    if not form.is_valid():
        return form_refused(request, form, back)
    if integration.paused:
        messages.error(
            request, recovery.messages.PAUSED_BEFORE_RELEASE % {"integration": integration}
        )
        return redirect(back)
    wanted = set(form.cleaned_data["operations"])
    chosen = [op for op in held if str(op.pk) in wanted]
    if not form.cleaned_data["confirmed"]:
        return render(
            request,
            "recovery/backlog_confirm.html",
            {
                "integration": integration,
                "chosen": chosen,
                "summary": release_summary(chosen),
                "reason": form.cleaned_data["reason"],
                "left": len(held) - len(chosen),
                "pause_runbook": RUNBOOKS["pause-procedure"],
            },
        )
    n = len(chosen)
    return run(
        request,
        back,
        lambda: ledger_services.release_backlog(
            name,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            operation_ids=[op.pk for op in chosen],
        ),
        recovery.messages.RELEASED % {"n": n}
        + (" " + recovery.messages.STAY_HELD % {"n": len(held) - n} if len(held) > n else ""),
    )


def _label(field: str) -> str:
    return LABELS.get(field, field.replace("_", " "))


def _written(field: str, value) -> str:
    """A journalled value in words: durations as people write them, a whole number without
    ".0" (a FloatField stores 20 as 20.0), nothing as what nothing means for that field."""
    if value is None or value == "":
        return str(EMPTY_MEANS.get(field, "(empty)"))
    if field in SECONDS:
        return durations.format_duration(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# What an empty setting means, said in the history instead of "(none)".
EMPTY_MEANS = {
    "max_requests_per_second": "no limit",
    "max_in_flight": "no limit",
    "read_share": "the default (READS_MAX_IN_FLIGHT)",
    "owner": "nobody",
    "base_url": "(empty)",
}


def settings_history(integration, limit=20) -> list[dict]:
    """The last changes to the integration's settings: who, when, why, field by field."""
    entries = JournalEntry.objects.filter(
        subject_type="ledger.integration",
        subject_id=str(integration.pk),
        action="ledger.integration.configured",
    ).order_by("-at", "-id")[:limit]
    history = []
    for entry in entries:
        fields = []
        for field, change in (entry.evidence or {}).items():
            if isinstance(change, dict):
                fields.append(
                    (
                        _label(field),
                        _written(field, change.get("from")),
                        _written(field, change.get("to")),
                    )
                )
            else:  # a secret: "changed", "set" or "removed", never its value
                fields.append((_label(field), None, f"{change}"))
        history.append({"entry": entry, "fields": fields})
    return history


@require_http_methods(["GET", "POST"])
@console_view
def integration_settings(request, name):
    """An admin edits an integration's settings; every change is journalled with a reason."""
    require(request.user, CONFIGURE_PERMISSION, "change an integration's settings")
    integration = _integration(name)
    if request.method == "POST":
        form = IntegrationForm(request.POST, instance=_integration(name))
        if form.is_valid():
            changes = form.changes()
            try:
                ledger_services.configure_integration(
                    name, actor=request.user, reason=form.cleaned_data["reason"], changes=changes
                )
            except ValidationError as exc:  # changed by someone else since the form was read
                for field, errors in exc.message_dict.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            except REFUSALS as exc:
                form.add_error(None, str(exc))
            else:
                changed = ", ".join(_label(field).lower() for field in changes)
                messages.success(
                    request,
                    recovery.messages.SETTINGS_SAVED
                    % {"integration": integration, "changed": changed},
                )
                return redirect(reverse("recovery:integrations") + f"#integration-{name}")
    else:
        form = IntegrationForm(instance=integration)
    return render(
        request,
        "recovery/integration_settings.html",
        {
            "integration": integration,
            "form": form,
            "invalid": [field.label.lower() for field in form if field.errors],
            "history": settings_history(integration),
        },
        status=400 if form.is_bound and form.errors else 200,
    )
