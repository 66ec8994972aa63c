"""The console's drill page: the latest report, who ran it, and reviewers' conclusions."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render

import recovery.messages
from recovery.models import DrillConclusion, DrillRun
from recovery.views.common import require

REVIEW_PERMISSION = "recovery.review_drillrun"


def drill_page(request):
    if request.method == "POST":
        require(request.user, REVIEW_PERMISSION, "record a conclusion on a drill run")
        chosen = (request.POST.get("run") or "").strip()
        # ASCII digits only, within PostgreSQL's integer: int() also reads '٣' and '1_000'.
        if not (chosen.isascii() and chosen.isdigit() and 0 < int(chosen) < 2**31):
            messages.error(request, recovery.messages.DRILL_RUN_INVALID)
            return _page(request, status=400)
        run = get_object_or_404(DrillRun, pk=int(chosen))
        conclusion = (request.POST.get("conclusion") or "").strip()
        if not conclusion:
            messages.error(request, recovery.messages.CONCLUSION_REQUIRED)
        else:
            DrillConclusion.objects.create(run=run, reviewer=request.user, conclusion=conclusion)
            messages.success(request, recovery.messages.CONCLUSION_RECORDED)
        return redirect("recovery:drill")
    return _page(request)


def _page(request, status=200):
    runs = list(DrillRun.objects.prefetch_related("conclusions__reviewer")[:6])
    run = runs[0] if runs else None
    return render(
        request,
        "recovery/drill.html",
        {
            "run": run,
            "earlier": runs[1:],
            "failed": (run.cases_total - run.cases_passed) if run else 0,
            "can_review": request.user.has_perm(REVIEW_PERMISSION),
        },
        status=status,
    )
