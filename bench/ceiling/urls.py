from django.contrib.auth.decorators import login_not_required
from django.db import connection, transaction
from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@login_not_required
@require_POST
def one_row(request, source):
    """Store the body as one row in one transaction and answer 202: the least a durable
    receipt can do (no signature, no validation, no enquiry)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            # A repeat (the senders send some twice) is answered, not stored twice.
            "INSERT INTO bench_raw (source, event_id, body) VALUES (%s, %s, %s) "
            "ON CONFLICT (source, event_id) DO NOTHING",
            [source, request.headers.get("webhook-id", ""), request.body.decode()],
        )
    return JsonResponse({"status": "received"}, status=202)


urlpatterns = [path("intake/events/<slug:source>/", one_row)]
