from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.views.decorators.http import require_GET


@login_not_required
@require_GET
def healthz(request):
    """200 when the database and the task queue answer, 503 otherwise (for load balancers)."""
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any failure here is the answer, not a crash
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        from django_q.brokers import get_broker

        broker = get_broker()
        checks["queue"] = "ok" if broker.ping() else "error: broker did not answer"
        checks["queued_tasks"] = broker.queue_size()
    except Exception as exc:
        checks["queue"] = f"error: {exc.__class__.__name__}"
    healthy = checks["database"] == "ok" and checks["queue"] == "ok"
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", **checks}, status=200 if healthy else 503
    )


@login_not_required
@require_GET
def favicon(request):
    """Browsers ask for /favicon.ico whatever a page links; the file is a static one."""
    return redirect(static("favicon.ico"), permanent=True)
