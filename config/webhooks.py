"""The web application: the signed webhook endpoint through a short middleware chain, every
other path through the whole of it.

``/intake/events/`` is called by machines, authenticated by a Standard Webhooks signature, and
answers JSON: no session, no user, no CSRF token, no message, no page to frame and no script
whose sources a CSP would restrict. Ten of the fifteen middleware in ``MIDDLEWARE`` did
nothing for it but cost about a sixth of its CPU per request (docs/benchmarks.md, "Intake's
cost per event"). Its requests go to a second Django handler built with
``WEBHOOK_MIDDLEWARE`` (config/settings.py): the same middleware, in the same order, less
those. Everything else, including a 404 or 405 under another prefix, goes through the whole
``MIDDLEWARE``.
"""

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application

from config.inputs import INTAKE_PATH

WEBHOOK_PATH = INTAKE_PATH  # intake/urls.py under config/urls.py's "intake/"


class WebhookHandler(WSGIHandler):
    """Django's WSGI handler with ``WEBHOOK_MIDDLEWARE`` as its chain.

    Django builds a handler's chain from ``settings.MIDDLEWARE`` once, when the handler is
    made (``BaseHandler.load_middleware``); this handler is made with the setting pointing at
    the short list, then puts it back. tests/intake/test_webhook_chain.py pins what that relies on.
    """

    def load_middleware(self, is_async=False):
        whole = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.WEBHOOK_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = whole


console = get_wsgi_application()  # sets Django up first
webhooks = WebhookHandler()


def application(environ, start_response):
    if environ.get("PATH_INFO", "").startswith(WEBHOOK_PATH):
        return webhooks(environ, start_response)
    return console(environ, start_response)
