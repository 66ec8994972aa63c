"""The Django admin site, with one guard every admin view shares and the checked log-in form.

A date filter's value is turned into a ``datetime`` only when the list's query runs, outside the
admin's own check of lookup parameters: ``?created_at__year=99999999999`` raised OverflowError
there (a 500). Every admin view is wrapped by ``admin_view``, so catching it once here covers
every model, ours and the libraries' (django-q2, django-axes, auth).
"""

from functools import wraps

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.core.exceptions import BadRequest


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
            try:
                return inner(request, *args, **kwargs)
            except OverflowError as exc:
                raise BadRequest("A value in the address is out of range.") from exc

        return guarded


class HandoverAdminConfig(AdminConfig):
    default_site = "config.admin.HandoverAdminSite"
