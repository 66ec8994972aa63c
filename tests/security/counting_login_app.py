"""The product's WSGI application with a password hasher that counts, for
tests/security/test_logins.py: ``python -m config.serve --app
tests.security.counting_login_app:application``.

``CountingHasher`` is MD5 (test speed) whose ``verify`` holds its thread ``HOLD_SECONDS`` as a
slow hash would, and appends ``+`` when a check begins and ``-`` when it ends to the file named
by ``HANDOVER_TEST_HASH_LOG`` (one process: the lines' order is the order of the checks, so
the most running at once can be read back). Test equipment only.
"""

import os
import threading
import time

from django.contrib.auth.hashers import MD5PasswordHasher

HOLD_SECONDS = 1.0
_lock = threading.Lock()


def _note(mark: str) -> None:
    with _lock, open(os.environ["HANDOVER_TEST_HASH_LOG"], "a") as log:
        log.write(mark)


class CountingHasher(MD5PasswordHasher):
    algorithm = "counting_md5"

    def verify(self, password, encoded):
        _note("+")
        try:
            time.sleep(HOLD_SECONDS)
            return super().verify(password, encoded)
        finally:
            _note("-")


def most_at_once(marks: str) -> int:
    running = most = 0
    for mark in marks:
        running += 1 if mark == "+" else -1
        most = max(most, running)
    return most


HASHERS = ["tests.security.counting_login_app.CountingHasher"]

if "HANDOVER_TEST_HASH_LOG" in os.environ:
    from django.conf import settings

    from config.wsgi import application  # noqa: F401  (sets Django up)

    settings.PASSWORD_HASHERS = HASHERS
