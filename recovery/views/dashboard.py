"""The dashboard, /metrics for Prometheus, the drill placeholder and the runbooks."""

import hmac
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_http_methods
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from recovery import markdown
from recovery.explain import RUNBOOKS
from recovery.metrics import ConsoleCollector, figures
from recovery.operator_actions import ACTIONS
from recovery.untold import untold
from recovery.views.common import console_view

RUNBOOK_DIR = Path(settings.BASE_DIR) / "docs" / "runbooks"

registry = CollectorRegistry(auto_describe=False)
registry.register(ConsoleCollector())


@require_GET
@console_view
def dashboard(request):
    from ledger.models import PurgeRun

    return render(
        request,
        "recovery/dashboard.html",
        {
            "f": figures(),
            "untold": untold(),
            "interval": settings.OPERATOR_NOTICE_MINUTES,
            "purge": PurgeRun.objects.first(),
            "retention_days": settings.PERSONAL_DATA_RETENTION_DAYS,
        },
    )


def _scrape_token_ok(request) -> bool:
    token = getattr(settings, "METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


@login_not_required
@require_GET
def metrics(request):
    """Prometheus text format. A scraper sends ``Authorization: Bearer $METRICS_TOKEN``; a
    person with a console role may look in the browser. Anyone else: 401."""
    person = request.user.is_authenticated and request.user.has_perm("intake.view_enquiry")
    if not (person or _scrape_token_ok(request)):
        response = HttpResponse("Send the metrics token.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@require_http_methods(["GET", "POST"])
@console_view
def drill(request):
    # The latest drill report; POST records an admin's conclusion (recovery/drill/views.py).
    from recovery.drill.views import drill_page

    return drill_page(request)


@require_GET
@console_view
def runbook_index(request):
    return render(request, "recovery/runbooks.html", {"runbooks": RUNBOOKS})


@require_GET
@console_view
def runbook(request, slug):
    if slug not in RUNBOOKS:
        raise Http404("No such runbook.")
    path = RUNBOOK_DIR / f"{slug}.md"
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise Http404("No such runbook.") from None
    return render(
        request,
        "recovery/runbook.html",
        {
            "slug": slug,
            "title": RUNBOOKS[slug],
            "html": markdown.render(text),
            # The actions whose registry row names this runbook (recovery/operator_actions.py).
            "actions": [a.label for a in ACTIONS.values() if a.runbook == slug],
        },
    )
