"""Integrations: their state, pause and resume, and the backlog reviewed before release."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import services as ledger_services
from ledger.models import Integration
from recovery import queue as work
from recovery.explain import RUNBOOKS
from recovery.forms import ReasonForm, ReleaseForm
from recovery.models import ResponsePolicy
from recovery.permissions import INTEGRATION_PERMISSION
from recovery.views.common import (
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
        .annotate(held=work.held_count())
        .order_by("name")
    )
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
            "pause_runbook": RUNBOOKS["pause-procedure"],
            "now": timezone.now(),
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
        messages.error(request, f"{integration} is already paused.")
        return redirect(back)
    return run(
        request,
        back,
        lambda: ledger_services.pause_integration(
            name, actor=request.user, reason=form.cleaned_data["reason"]
        ),
        f"{integration} is paused: no new writes start; intake keeps accepting.",
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
        messages.error(request, f"{integration} is not paused.")
        return redirect(back)
    response = run(
        request,
        reverse("recovery:backlog", args=[name]),
        lambda: ledger_services.resume_integration(
            name, actor=request.user, reason=form.cleaned_data["reason"]
        ),
        f"{integration} is resumed. Review the held work below before releasing it.",
    )
    integration.refresh_from_db()
    return response if not integration.paused else redirect(back)


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
            "can_release": request.user.has_perm(INTEGRATION_PERMISSION),
            "pause_runbook": RUNBOOKS["pause-procedure"],
        },
    )


@require_POST
@console_view
def release(request, name):
    require(request.user, INTEGRATION_PERMISSION, "release a backlog")
    integration = _integration(name)
    back = reverse("recovery:backlog", args=[name])
    held = _backlog(name)
    form = ReleaseForm(request.POST, backlog=held)
    if not form.is_valid():
        return form_refused(request, form, back)
    if integration.paused:
        messages.error(request, f"{integration} is still paused: resume it first.")
        return redirect(back)
    chosen = form.cleaned_data["operations"] or None
    return run(
        request,
        back,
        lambda: ledger_services.release_backlog(
            name, actor=request.user, reason=form.cleaned_data["reason"], operation_ids=chosen
        ),
        "Released: the held work runs now.",
    )
