"""The Django admin site, with one guard every admin view shares and the checked log-in form.

A date filter's value is turned into a ``datetime`` only when the list's query runs, outside the
admin's own check of lookup parameters: ``?created_at__year=99999999999`` raised OverflowError
there (a 500). Every admin view is wrapped by ``admin_view``, so catching it once here covers
every model, ours and the libraries' (django-q2, django-axes, auth).

The same guard bounds a list's search before PostgreSQL sees it: the admin ANDs one OR of
ILIKEs over every search field per word, and a 5,000-word search held a web thread for 16 s
before the statement timeout. A search past SEARCH_MAX_WORDS words or SEARCH_MAX_LENGTH
characters is dropped with a message that says so.
"""

from functools import wraps

from django.contrib import admin, messages
from django.contrib.admin.apps import AdminConfig
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import BadRequest
from django.utils.text import smart_split

SEARCH_MAX_WORDS = 10
SEARCH_MAX_LENGTH = 200
SEARCH_TOO_LONG = (
    "That search is too long to run: use at most {words} words and {length} characters "
    "(it had {got_words} words and {got_length} characters). Nothing was searched."
)


def bound_search(request) -> None:
    """Drop a search past the bounds from ``request.GET``, saying so on the page."""
    term = request.GET.get(SEARCH_VAR)
    if term is None:
        return
    words = sum(1 for _ in smart_split(term))
    if words <= SEARCH_MAX_WORDS and len(term) <= SEARCH_MAX_LENGTH:
        return
    messages.warning(
        request,
        SEARCH_TOO_LONG.format(
            words=SEARCH_MAX_WORDS,
            length=SEARCH_MAX_LENGTH,
            got_words=words,
            got_length=len(term),
        ),
    )
    params = request.GET.copy()
    del params[SEARCH_VAR]
    request.GET = params


class HandoverAdminSite(admin.AdminSite):
    @property
    def login_form(self):
        # Imported when a log-in page is built: this module loads with INSTALLED_APPS, before
        # the auth models a form needs are ready.
        from config.security import AdminLoginForm

        return AdminLoginForm

    def admin_view(self, view, cacheable=False):
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def guarded(request, *args, **kwargs):
            bound_search(request)
            try:
                return inner(request, *args, **kwargs)
            except OverflowError as exc:
                raise BadRequest("A value in the address is out of range.") from exc

        return guarded


class HandoverAdminConfig(AdminConfig):
    default_site = "config.admin.HandoverAdminSite"
