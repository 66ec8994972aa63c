"""The intake endpoint: thin; intake.services.receive_event decides every answer."""

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from intake.services import receive_event


# The only CSRF-exempt view: senders authenticate with a Standard Webhooks signature instead.
@csrf_exempt
@login_not_required
@require_POST
def receive(request, source):
    limit = settings.INTAKE_MAX_BODY_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(declared)
    except ValueError:
        return JsonResponse({"error": "Content-Length is not a number."}, status=400)
    if length < 0:
        return JsonResponse({"error": "Content-Length is not a number."}, status=400)
    if length > limit:
        return JsonResponse({"error": f"The body is larger than {limit} bytes."}, status=413)
    # Never more than the limit (plus one byte to notice a lie) is read into memory.
    body = request.read(limit + 1)
    if len(body) > limit:
        return JsonResponse({"error": f"The body is larger than {limit} bytes."}, status=413)
    result = receive_event(source, request.headers, body)
    return JsonResponse(result.body, status=result.status)
