"""A bound on log-ins checked at once, so slow password hashing cannot hold the web threads.

Checking a password is deliberately slow (PBKDF2, hundreds of milliseconds of CPU), and a web
process has ``WEB_THREADS`` (4) threads: 40 log-in POSTs at once from one client held them all,
and /healthz and intake waited seconds behind them. ``LoginConcurrencyMiddleware`` lets at most
``LOGIN_CONCURRENCY`` log-in POSTs run at once in a process, and at most
``LOGIN_CONCURRENCY_PER_CLIENT`` from one client address (``config.security.client_ip``, the
address django-axes counts failures against). One beyond either is not queued (a queued one
would hold a thread while it waits): it is answered at once with 429 and a page saying "too many
sign-ins at once, try again in a moment", with ``Retry-After``. Nothing is counted against the
account (django-axes never sees it). The log-in pages covered are the console's and the
admin's; a GET of either is never bounded.

This is concurrency only; django-axes' lockout after repeated failures is separate
(README.md, Security).
"""

from __future__ import annotations

import threading
from collections import Counter

from django.conf import settings
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse

from config.security import client_ip

RETRY_AFTER_SECONDS = 2


def login_paths() -> frozenset[str]:
    """The log-in views' paths under the URLconf in force; one it does not hold has none (a
    site, or a test, serving only part of the console)."""
    paths = set()
    for name in ("login", "admin:login"):
        try:
            paths.add(reverse(name))
        except NoReverseMatch:
            pass
    return frozenset(paths)


class LoginSlots:
    """Counts of log-ins in progress, overall and per address, in this process."""

    def __init__(self, limit: int, per_client: int):
        self.limit, self.per_client = limit, per_client
        self.lock = threading.Lock()
        self.running = 0
        self.by_client: Counter[str] = Counter()

    def take(self, address: str) -> bool:
        with self.lock:
            if self.running >= self.limit or self.by_client[address] >= self.per_client:
                return False
            self.running += 1
            self.by_client[address] += 1
            return True

    def give_back(self, address: str) -> None:
        with self.lock:
            self.running -= 1
            self.by_client[address] -= 1
            if not self.by_client[address]:
                del self.by_client[address]


class LoginConcurrencyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.slots = LoginSlots(settings.LOGIN_CONCURRENCY, settings.LOGIN_CONCURRENCY_PER_CLIENT)
        self.paths = None

    def __call__(self, request):
        if request.method != "POST":
            return self.get_response(request)
        if self.paths is None:
            self.paths = login_paths()
        if request.path_info not in self.paths:
            return self.get_response(request)
        address = client_ip(request) or ""
        if not self.slots.take(address):
            response = render(
                request, "registration/too_many_sign_ins.html", {"login_path": request.path}
            )
            response.status_code = 429
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        try:
            return self.get_response(request)
        finally:
            self.slots.give_back(address)
