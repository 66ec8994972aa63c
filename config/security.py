"""Security plumbing every console request passes through.

- ``HandoverAxesBackend``: django-axes' login throttle (per username *and* IP, see settings).
- ``client_ip``: which address axes counts failures against (REMOTE_ADDR unless a trusted
  proxy count is configured, so a client cannot dodge the lockout by inventing headers).
- ``SessionTimeoutMiddleware``: idle and absolute session limits.
- ``ForbiddenLogMiddleware``: every 403 writes one line on the ``handover.security`` logger.
- ``LoginForm``, ``AdminLoginForm``: the log-in forms, with the username's length checked.

Time is read through the module-level ``now`` so tests can move the clock.
"""

import logging

from axes.backends import AxesStandaloneBackend
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import logout
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.utils import timezone

log = logging.getLogger("handover.security")

LOGIN_AT = "_handover_login_at"
SEEN_AT = "_handover_seen_at"
# Last activity is rewritten at most this often, so a busy console does not write its session
# row on every click; the idle limit is therefore exact to within this many seconds.
ACTIVITY_RESOLUTION_SECONDS = 30


def now():
    return timezone.now()


class HandoverAxesBackend(AxesStandaloneBackend):
    """Axes' throttle for logins that come through a request (the login page, the admin).

    ``authenticate()`` without a request (a management command, the test client's ``login``)
    is not a login attempt from the web: there is no address to count it against, and axes
    would refuse it outright. The next backend decides as usual.
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_ip(request):
    """The address login failures are counted against.

    Behind ``TRUSTED_PROXY_COUNT`` trusted reverse proxies the client is that many entries from the
    right of X-Forwarded-For (each proxy appends the address it saw); entries further left are
    whatever the client sent and are never trusted. Without proxies, REMOTE_ADDR alone.

    Not django-axes' ipware settings (AXES_IPWARE_PROXY_COUNT): django-ipware is not installed,
    and its proxy count wants the exact chain length and ranks addresses by publicness, so a
    client that prepends entries gets None or its own invented address back, where this
    counts from the right. tests/foundation/test_library_pins.py pins that axes calls this.
    """
    proxies = getattr(settings, "TRUSTED_PROXY_COUNT", 0)
    if proxies:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= proxies:
            return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR", "")


@receiver(user_logged_in, dispatch_uid="handover.stamp_login_time")
def stamp_login_time(sender, request, user, **kwargs):
    if request is not None and hasattr(request, "session"):
        stamp = now().timestamp()
        request.session[LOGIN_AT] = stamp
        request.session[SEEN_AT] = stamp


class SessionTimeoutMiddleware:
    """Log out a session idle longer than SESSION_IDLE_SECONDS or older than SESSION_COOKIE_AGE.

    Django's own expiry slides forward whenever the session is saved, so it cannot enforce an
    absolute limit: the login time is kept in the session and checked here. Logging out flushes
    the session row, so the old cookie is worthless afterwards. Sits after the authentication
    and message middleware and before LoginRequiredMiddleware, which then sends the (now
    anonymous) request to the login page.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            current = now().timestamp()
            session = request.session
            login_at = session.setdefault(LOGIN_AT, current)
            seen_at = session.get(SEEN_AT, current)
            expired = None
            if current - seen_at > settings.SESSION_IDLE_SECONDS:
                expired = "idle"
            elif current - login_at > settings.SESSION_COOKIE_AGE:
                expired = "absolute"
            if expired:
                user_id = user.pk
                logout(request)
                log.info(
                    "session ended: %s limit user_id=%s path=%s", expired, user_id, request.path
                )
                messages.info(request, "Your session expired. Please log in again.")
            elif current - seen_at >= ACTIVITY_RESOLUTION_SECONDS or SEEN_AT not in session:
                session[SEEN_AT] = current
        return self.get_response(request)


class ForbiddenLogMiddleware:
    """One line on ``handover.security`` for every 403: who, which path, which method.

    It reads the response, so a PermissionDenied from a view or a service, a CSRF refusal and
    a hand-made 403 are all caught. Only the path is logged: query strings can carry search
    terms (names, emails), and no personal data goes into logs.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 403:
            user = getattr(request, "user", None)
            if user is not None and user.is_authenticated:
                who = f"user_id={user.pk} username={user.get_username()}"
            else:
                who = "user=anonymous"
            log.warning("forbidden: %s method=%s path=%s", who, request.method, request.path)
        return response


class _UsernameLengthMixin:
    """Refuse a username longer than the user model allows before anyone authenticates it.

    Django's AuthenticationForm sets the username field's max_length after the field is built,
    so it is shown to the browser but never checked: a 5,000-character username went on to
    authenticate(), and django-axes' record of the failure (a 255-character column) raised a
    DataError, a 500. With the field in error, the form's clean() authenticates nothing.
    """

    def clean_username(self):
        username = self.cleaned_data.get("username") or ""
        limit = self.fields["username"].max_length
        if limit is not None and len(username) > limit:
            raise forms.ValidationError(
                f"A username has at most {limit} characters.", code="max_length"
            )
        return username


class LoginForm(_UsernameLengthMixin, AuthenticationForm):
    pass


class AdminLoginForm(_UsernameLengthMixin, AdminAuthenticationForm):
    pass
