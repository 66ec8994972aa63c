"""Django settings for a BottleCRM started by harness/bottlecrm.py (runs on BottleCRM's Python).

BottleCRM ships as a whole project whose settings read the environment; the harness sets those
variables (DBHOST, DBNAME, SECRET_KEY, ...) for every child and this module pins what must not
depend on anyone's environment: no Redis, no real e-mail, logs in the run's own directory.
"""

import os

from crm.settings import *  # noqa: F403
from crm.settings import LOGGING, SIMPLE_JWT

SECRET_KEY = os.environ["SECRET_KEY"]
SIMPLE_JWT = {**SIMPLE_JWT, "SIGNING_KEY": SECRET_KEY}
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["DBNAME"],
        "USER": os.environ["DBUSER"],
        "PASSWORD": os.environ.get("DBPASSWORD", ""),
        # A directory (the embedded server's socket) or a host name.
        "HOST": os.environ["DBHOST"],
        "PORT": os.environ["DBPORT"],
        "CONN_MAX_AGE": 0,
    }
}

# Celery runs tasks in the caller, so nothing waits on a broker that is not there.
CELERY_BROKER_URL = "memory://"
CELERY_RESULT_BACKEND = "cache+memory://"
CELERY_TASK_ALWAYS_EAGER = True

# Django 6.1's MAILERS (crm.settings builds it from EMAIL_BACKEND): mail stays in memory.
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

# crm.settings names server.log and security_audit.log relative to the working directory.
_log_dir = os.environ["BOTTLECRM_LOG_DIR"]
LOGGING["handlers"]["logfile"]["filename"] = os.path.join(_log_dir, "server.log")
LOGGING["handlers"]["security_audit"]["filename"] = os.path.join(_log_dir, "security_audit.log")
