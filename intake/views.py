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
    too_large = JsonResponse({"error": f"The body is larger than {limit} bytes."}, status=413)
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            length = int(declared)
        except ValueError:
            length = -1
        if length < 0:
            return JsonResponse({"error": "Content-Length is not a number."}, status=400)
        if length > limit:
            return too_large
        # Never more than the limit (plus one byte to notice a lie) is read into memory.
        body = request.read(limit + 1)
    else:
        body = _read_without_length(request, limit)
        if body is None:
            return JsonResponse(
                {
                    "error": "Send a Content-Length header: this server cannot read a body "
                    "without one (Transfer-Encoding: chunked)."
                },
                status=411,
            )
    if len(body) > limit:
        return too_large
    result = receive_event(source, request.headers, body)
    return JsonResponse(result.body, status=result.status)


def _read_without_length(request, limit: int) -> bytes | None:
    """A body sent without Content-Length (chunked), read to its end within ``limit`` + 1 bytes;
    None when the server cannot promise where it ends.

    Django reads such a body as empty (it trusts Content-Length alone), and an empty body would
    then be refused as unsigned. A WSGI server that de-chunks sets ``wsgi.input_terminated``: its
    stream ends with the body, so it is read from the environ directly. Without that promise,
    reading could block or run into the next request: the sender is asked for a length (411).
    """
    environ = request.META
    if not environ.get("wsgi.input_terminated"):
        if "HTTP_TRANSFER_ENCODING" in environ:
            return None
        return b""  # no length, no chunking: no body
    stream = environ["wsgi.input"]
    chunks, size = [], 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
