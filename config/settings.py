"""Handover settings, read from the environment (see .env.example for every variable)."""

import os
from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from config.db import database_settings
from config.env import (
    env_address,
    env_bool,
    env_email,
    env_float,
    env_int,
    env_json,
    env_list,
    env_port,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# A local .env (made by `make run` from .env.example) fills in what the environment leaves unset.
load_dotenv(BASE_DIR / ".env", override=False)

DEBUG = env_bool("DEBUG", False)
# pytest sets PYTEST_VERSION for its run and every process the tests start.
TESTING = env_bool("HANDOVER_TESTING", "PYTEST_VERSION" in os.environ)
SECRET_KEY = env_str("SECRET_KEY", "dev-insecure-key-change-me" if DEBUG or TESTING else None)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "config.admin.HandoverAdminConfig",  # django.contrib.admin, with a guard on every view
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "axes",
    "csp",
    "intake",
    "ledger",
    "recovery",
    # After ledger: a command in an earlier app wins, and ledger's `qcluster` (a cluster that
    # stops when told, ledger/management/commands/qcluster.py) must replace django-q2's.
    "django_q",
]
# Test equipment, for development and the tests only: the sandbox (runsandbox) and the harness
# (runall, drill, runmailserver). `make run` and `make drill` set HANDOVER_DEV_TOOLS=1; a
# production install has neither app (nor needs requirements-dev.txt).
DEV_TOOLS = env_bool("HANDOVER_DEV_TOOLS", DEBUG or TESTING)
if DEV_TOOLS:
    INSTALLED_APPS += ["sandbox", "harness"]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.context.RequestIdMiddleware",
    # A database lock or statement timeout becomes 503 "busy, try again", not a 500.
    "config.busy.DatabaseBusyMiddleware",
    # Before the session, auth and every view: a NUL anywhere in the request is a 400.
    "config.inputs.RefuseNulMiddleware",
    # Before the session and the view: a log-in POST beyond the concurrency bound is a 429.
    "config.logins.LoginConcurrencyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.adminguard.AdminNotForRoleMiddleware",
    "config.security.ForbiddenLogMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "config.security.SessionTimeoutMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as axes asks: turns a lockout into its page
]

# The signed webhook endpoint (/intake/events/) goes through this chain instead
# (config/webhooks.py): MIDDLEWARE less what does nothing for a machine's signed JSON request
# (session, CSRF, authentication, admin guard, 403 log, messages, framing, CSP, session
# timeout, login required, axes). The same order; tests/intake/test_webhook_chain.py checks it.
WEBHOOK_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.context.RequestIdMiddleware",
    "config.busy.DatabaseBusyMiddleware",
    "config.inputs.RefuseNulMiddleware",
    "django.middleware.common.CommonMiddleware",  # ALLOWED_HOSTS, as before
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "recovery.context.readiness",
            ],
        },
    },
]

# Persistent connections: a view that inserts one row served ~1,400 req/s with them and ~115
# without on a 2-core machine; django-q2 drained ~490 no-op tasks/s with them and ~45 without.
# DATABASE_URL, or (unset) the embedded PostgreSQL, started by the first connection, never here
# (config/db.py, config/embedded/base.py).
_db = database_settings(
    BASE_DIR,
    conn_max_age=env_int("CONN_MAX_AGE", 60, minimum=0),
    conn_health_checks=True,
)
_db.setdefault("OPTIONS", {})
if "host" in _db["OPTIONS"]:  # a server on a socket directory (an embedded one's URL too)
    _db["HOST"] = _db["OPTIONS"].pop("host")
_db["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", "test_handover")}
# Bounded waits, set when each connection starts (libpq's options: no round trip per request).
# A lock held elsewhere is waited for DB_LOCK_TIMEOUT_SECONDS, then the statement fails
# (LockNotAvailable): a web request answers 503 "busy, try again" (config.busy), a task fails
# with the ledger row as it was and the sweeper takes it up again. Web processes (config/wsgi.py
# sets HANDOVER_WEB) also stop any statement after DB_STATEMENT_TIMEOUT_SECONDS; workers run
# none (django-q2's Q_TIMEOUT bounds a task). 0 turns a limit off.
DB_LOCK_TIMEOUT_SECONDS = env_float("DB_LOCK_TIMEOUT_SECONDS", 10.0, minimum=0.0)
DB_STATEMENT_TIMEOUT_SECONDS = env_float("DB_STATEMENT_TIMEOUT_SECONDS", 15.0, minimum=0.0)
WEB_PROCESS = env_bool("HANDOVER_WEB", False)
_pg_options = [
    _db["OPTIONS"].get("options", ""),
    f"-c lock_timeout={round(DB_LOCK_TIMEOUT_SECONDS * 1000)}",  # milliseconds
]
if WEB_PROCESS:
    _pg_options.append(f"-c statement_timeout={round(DB_STATEMENT_TIMEOUT_SECONDS * 1000)}")
if TESTING:
    # Django's test flush empties tables with TRUNCATE; the journal's trigger refuses TRUNCATE
    # unless this session variable is on. UPDATE and DELETE stay refused even here.
    _pg_options.append("-c handover.allow_journal_truncate=on")
_db["OPTIONS"]["options"] = " ".join(o for o in _pg_options if o)
# Prepared statements (config.roundtrip): psycopg prepares only the statements sent through
# config.roundtrip's cursors (each on first use); Django's own cursors bind client-side and never
# prepare. 0 turns it off, for a pooler in transaction mode that cannot keep them.
if env_bool("DB_PREPARED_STATEMENTS", True):
    _db["OPTIONS"].setdefault("prepare_threshold", 2**31 - 1)
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# django-axes first: it refuses a locked-out login before the password is even checked.
AUTHENTICATION_BACKENDS = [
    "config.security.HandoverAxesBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Lock out a username from one address only: a flood against one account (or from one
# office's shared address) never locks anybody else out.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "config.security.client_ip"
# Log-in POSTs checked at once per web process, overall and from one client address; one
# beyond either is answered 429 at once, never queued (config/logins.py).
LOGIN_CONCURRENCY = env_int("LOGIN_CONCURRENCY", 2, minimum=1)
LOGIN_CONCURRENCY_PER_CLIENT = env_int("LOGIN_CONCURRENCY_PER_CLIENT", 1, minimum=1)
# Trusted reverse proxies in front of the web nodes (0 = none: REMOTE_ADDR is the client).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/console/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env_str("TIME_ZONE", "Europe/London")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Security: HTTPS settings on unless explicitly running plain HTTP (make run, tests).
SECURE = env_bool("SECURE", not DEBUG and not TESTING)
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_SSL_REDIRECT = SECURE
# A load balancer probes each node over plain HTTP, and a redirect is not an answer: /healthz
# says how the node is on either scheme (it shows no data and sets no cookie).
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if SECURE else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if SECURE else None
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_ABSOLUTE_SECONDS", 12 * 3600, minimum=60)
SESSION_IDLE_SECONDS = env_int("SESSION_IDLE_SECONDS", 30 * 60, minimum=60)
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): scripts, styles, images and fonts from this origin only,
# no inline script or style (templates keep both in static/), no plugins, no <base>, no
# framing, forms post only here. tests/recovery/test_browser.py fails on any violation.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],  # data: for the admin's and the browser's own SVG icons
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}
# Personal fields of closed enquiries are redacted this long after closing (purge_personal_data).
PERSONAL_DATA_RETENTION_DAYS = env_int("PERSONAL_DATA_RETENTION_DAYS", 365, minimum=1)

# --- Handover ---------------------------------------------------------------------------------
WORKFLOW_VERSION = "2026.11"
# Per-source Standard Webhooks secrets: {"website": ["whsec_...", "whsec_..."]} (rotation).
INTAKE_SECRETS = env_json("INTAKE_SECRETS", {})
INTAKE_MAX_BODY_BYTES = env_int("INTAKE_MAX_BODY_BYTES", 64 * 1024, minimum=1024)
INTAKE_TIMESTAMP_TOLERANCE_SECONDS = env_int("INTAKE_TIMESTAMP_TOLERANCE_SECONDS", 300, minimum=1)
# Category suggester: "keywords" (deterministic, configured per category in the admin) or
# "openai" (any OpenAI-compatible chat-completions endpoint: Ollama, vLLM, llama.cpp).
SUGGESTER = env_str("SUGGESTER", "keywords")
SUGGESTER_MIN_CONFIDENCE = env_float("SUGGESTER_MIN_CONFIDENCE", 0.6, minimum=0.0)
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
OPENAI_MODEL = env_str("OPENAI_MODEL", "llama3.2")
OPENAI_API_KEY = env_str("OPENAI_API_KEY", "")
OPENAI_TIMEOUT_SECONDS = env_float("OPENAI_TIMEOUT_SECONDS", 20.0, minimum=0.1)

SANDBOX_URL = env_str("SANDBOX_URL", "http://127.0.0.1:8765")
# Where people open the console: the drill's HTML file links each enquiry to its page here.
CONSOLE_URL = env_str("CONSOLE_URL", "http://127.0.0.1:8000")
# The resident's side (docs/residents.md): how long a link to their page works; the domain
# of the signed reply address given as Reply-To ("" = none: replies are threaded by
# Message-ID alone); what one answer may carry; how often one link, one address and one client
# may send.
RESIDENT_LINK_DAYS = env_int("RESIDENT_LINK_DAYS", 30, minimum=1)
RESIDENT_REPLY_DOMAIN = env_str("RESIDENT_REPLY_DOMAIN", "")
# The defaults fit inside the web server's own bound on a request (WEB_MAX_BODY_BYTES, 1 MiB),
# so that a resident is refused in words by the page, never by the server's bare 413
# (handover.W004 checks the two together).
RESIDENT_UPLOAD_MAX_BYTES = env_int("RESIDENT_UPLOAD_MAX_BYTES", 250 * 1024, minimum=1024)
RESIDENT_UPLOAD_MAX_FILES = env_int("RESIDENT_UPLOAD_MAX_FILES", 3, minimum=1)
RESIDENT_ANSWERS_PER_HOUR = env_int("RESIDENT_ANSWERS_PER_HOUR", 10, minimum=1)
INTEGRATIONS = {
    "crm": env_address("CRM_BASE_URL", SANDBOX_URL),
    "notify": env_address("NOTIFY_BASE_URL", SANDBOX_URL),
    "documents": env_address("DOCS_BASE_URL", SANDBOX_URL),
    "appointments": env_address("APPOINTMENTS_BASE_URL", SANDBOX_URL),
}
INTEGRATION_TOKEN = env_str("INTEGRATION_TOKEN", "")

# E-mail: the relay the notification integration uses when NOTIFY_KIND=smtp (read when its row
# is first made, then edited by admins as the row's address and token), and Django's own
# e-mail. `make run` starts a local relay on EMAIL_HOST:EMAIL_PORT that keeps every message in
# var/mail/ (docs/sandbox.md).
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_port("EMAIL_PORT", 1025)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured(
        "EMAIL_USE_TLS (STARTTLS, usually port 587) and EMAIL_USE_SSL (implicit TLS, usually "
        "port 465) cannot both be on: set one"
    )
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1)
# E-mail is retried as e-mail is (ledger.execution.retrying): a relay that refuses, answers 4xx
# or times out before the message is sent is tried again after EMAIL_RETRY_FIRST_SECONDS,
# doubling up to EMAIL_RETRY_MAX_SECONDS, for EMAIL_RETRY_HOURS from the first attempt; then a
# person. These replace the retry budget of an integration of the smtp kind.
EMAIL_RETRY_HOURS = env_float("EMAIL_RETRY_HOURS", 24.0, minimum=0.01)
EMAIL_RETRY_FIRST_SECONDS = env_float("EMAIL_RETRY_FIRST_SECONDS", 60.0, minimum=1.0)
EMAIL_RETRY_MAX_SECONDS = env_float("EMAIL_RETRY_MAX_SECONDS", 3600.0, minimum=1.0)
if EMAIL_RETRY_MAX_SECONDS < EMAIL_RETRY_FIRST_SECONDS:
    raise ImproperlyConfigured(
        "EMAIL_RETRY_MAX_SECONDS (the longest wait between two tries) cannot be shorter than "
        "EMAIL_RETRY_FIRST_SECONDS (the first wait)"
    )
DEFAULT_FROM_EMAIL = env_email("DEFAULT_FROM_EMAIL", "Handover <handover@localhost.localdomain>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# Operators are e-mailed about work that needs them (recovery.notices): at most one message per
# person per this many minutes, listing the items with links (CONSOLE_URL).
OPERATOR_NOTICE_MINUTES = env_int("OPERATOR_NOTICE_MINUTES", 15, minimum=1)
# Delivery reports (bounces) from Mailgun's tracking webhook, read by django-anymail
# (ledger.webhooks, /delivery/mailgun/): off until both are set. The secret is user:password,
# put in the webhook URL at the provider.
ANYMAIL = {
    "MAILGUN_WEBHOOK_SIGNING_KEY": env_str("MAILGUN_WEBHOOK_SIGNING_KEY", ""),
    "WEBHOOK_SECRET": env_str("DELIVERY_WEBHOOK_SECRET", ""),
}
if ANYMAIL["WEBHOOK_SECRET"] and ":" not in ANYMAIL["WEBHOOK_SECRET"]:
    raise ImproperlyConfigured("DELIVERY_WEBHOOK_SECRET must be user:password")
# A signed provider event is taken only within this many seconds of its signature's timestamp,
# either side; its token is taken once (ledger.signed_events).
DELIVERY_WEBHOOK_WINDOW_SECONDS = env_int("DELIVERY_WEBHOOK_WINDOW_SECONDS", 900, minimum=60)
# Appointment slots (ledger.appointments): opening hours in TIME_ZONE on working days, the
# length of one visit, and how many working days from today a read covers.
APPOINTMENTS_OPEN_HOUR = env_int("APPOINTMENTS_OPEN_HOUR", 9, minimum=0)
APPOINTMENTS_CLOSE_HOUR = env_int("APPOINTMENTS_CLOSE_HOUR", 17, minimum=1)
APPOINTMENTS_SLOT_MINUTES = env_int("APPOINTMENTS_SLOT_MINUTES", 60, minimum=5)
APPOINTMENTS_DAYS = env_int("APPOINTMENTS_DAYS", 5, minimum=1)
if not APPOINTMENTS_OPEN_HOUR < APPOINTMENTS_CLOSE_HOUR <= 24 or APPOINTMENTS_DAYS > 60:
    raise ImproperlyConfigured(
        "APPOINTMENTS_OPEN_HOUR must be before APPOINTMENTS_CLOSE_HOUR (at most 24), and "
        "APPOINTMENTS_DAYS at most 60"
    )
CONNECTOR_TIMEOUT_SECONDS = env_float("CONNECTOR_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Bounded reads (ledger.reading, docs/integrations.md "Bounded reads"): what one answer may
# hold once decompressed (a CRM's, a look-up's or a calendar's JSON or XML; a document), how
# far it may grow when decompressed, and the time one call may take in all (never less than
# its timeout). A *Check connection* runs all its calls within one READ_BUDGET_SECONDS (set
# below Q_CLUSTER: by default 20 s, or three quarters of Q_TIMEOUT when that is less).
READ_MAX_BYTES = env_int("READ_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
DOCUMENT_MAX_BYTES = env_int("DOCUMENT_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
READ_MAX_RATIO = env_float("READ_MAX_RATIO", 100.0, minimum=1.0)
# Per-integration limits (ledger.limits; the limits themselves are on each integration's row).
# A turn this close is waited for in the worker; a later one puts the operation back on the
# queue for it. Calls are spaced (1 + margin) / rate apart, so that arrival jitter never puts
# rate + 1 calls in one of the destination's seconds. A 429 without a readable Retry-After
# waits the default; none waits longer than the maximum.
LIMITS_WAIT_SECONDS = env_float("LIMITS_WAIT_SECONDS", 0.5, minimum=0.0)
LIMITS_RATE_MARGIN = env_float("LIMITS_RATE_MARGIN", 0.05, minimum=0.0)
LIMITS_DEFAULT_RETRY_AFTER = env_float("LIMITS_DEFAULT_RETRY_AFTER", 5.0, minimum=0.0)
LIMITS_MAX_RETRY_AFTER = env_float("LIMITS_MAX_RETRY_AFTER", 3600.0, minimum=1.0)
LIMITS_MIN_RETRY_AFTER = env_float("LIMITS_MIN_RETRY_AFTER", 1.0, minimum=0.1)
LIMITS_MAX_THROTTLED_IN_A_ROW = env_int("LIMITS_MAX_THROTTLED_IN_A_ROW", 10, minimum=1)

# Prometheus scrapes /metrics with "Authorization: Bearer <METRICS_TOKEN>" (unset: people only).
METRICS_TOKEN = env_str("METRICS_TOKEN", "")

# Failpoints: comma-separated names; off unless a test sets them (ledger/failpoints.py).
FAILPOINTS = env_list("HANDOVER_FAILPOINTS", [])

# django-q2: the ORM broker on the same database makes "approve and enqueue" one transaction.
# Ordered timeouts (a system check enforces): connector timeout < cluster timeout < retry.
_Q_WORKERS = env_int("Q_WORKERS", 4, minimum=1)
Q_CLUSTER = {
    "name": "handover",
    "orm": "default",
    # django-q2's ORM broker with a one-statement dequeue (ledger.queueing.OrmBroker).
    "broker_class": "ledger.queueing.OrmBroker",
    # More workers than cores: each spends about half its time waiting on the destination and
    # PostgreSQL, so on 2 cores 4 workers deliver more than 2 (docs/benchmarks.md has the pairs).
    "workers": _Q_WORKERS,
    # One dequeue statement (ledger.queueing.OrmBroker) locks and hands out up to this many due
    # tasks, each locked until Q_RETRY as a task alone is: as many as there are workers, so one
    # statement can feed them all. django-q2's own default is 1; docs/benchmarks.md, "The
    # transport's cost per task", has what it saves.
    "bulk": _Q_WORKERS,
    "timeout": env_int("Q_TIMEOUT", 60, minimum=1),
    "retry": env_int("Q_RETRY", 90, minimum=2),
    "max_attempts": 1,  # the ledger decides about retries, not the transport
    "save_limit": -1,  # the ledger is the record; keep successes out of django-q2
    "ack_failures": True,
    "catch_up": False,
    "poll": env_float("Q_POLL", 0.2, minimum=0.01),
    "label": "Tasks",
}
# What one read may cost (docs/integrations.md, "What a read may cost"). A PDF's text, and a
# calendar's events, are read in a child process with this much CPU and memory (ledger.budget);
# a calendar's recurring events give at most this many busy times in the window.
EXTRACTION_CPU_SECONDS = env_float("EXTRACTION_CPU_SECONDS", 10.0, minimum=1.0)
EXTRACTION_MEMORY_MB = env_int("EXTRACTION_MEMORY_MB", 512, minimum=64)
CALENDAR_MAX_OCCURRENCES = env_int("CALENDAR_MAX_OCCURRENCES", 1000, minimum=1)
# Reads in flight at once from all workers together (ledger.reads), and an integration's read
# share at most: by default one fewer than a cluster's workers, so that writes and messages
# always find one; and the reads of one enquiry in flight at once.
READS_MAX_IN_FLIGHT = env_int("READS_MAX_IN_FLIGHT", max(_Q_WORKERS - 1, 1), minimum=1)
READS_PER_ENQUIRY = env_int("READS_PER_ENQUIRY", 2, minimum=1)
# A read the cluster would kill first is never told "too slow to read" (config.checks, E003).
READ_BUDGET_SECONDS = env_float(
    "READ_BUDGET_SECONDS", min(20.0, Q_CLUSTER["timeout"] * 0.75), minimum=0.1
)
if env_str("REDIS_URL", ""):
    Q_CLUSTER.pop("orm")
    Q_CLUSTER.pop("broker_class")
    Q_CLUSTER["redis"] = env_str("REDIS_URL")

# Every record, on every handler (config.logs.configure adds the filter to Django's own too),
# is cut to LOG_MAX_CHARS characters and has credentials redacted (config.logs.Redact). The
# caldav library logs what a calendar answered (a credential echoed back, a gigabyte line):
# it is silenced; the connector records every failure of a read in the attempt instead.
LOG_MAX_CHARS = env_int("LOG_MAX_CHARS", 8000, minimum=200)
LOGGING_CONFIG = "config.logs.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "config.logs.Redact", "limit": LOG_MAX_CHARS}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact"]},
        "silent": {"class": "logging.NullHandler"},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "pgserver": {"level": "WARNING"},
        "caldav": {"handlers": ["silent"], "level": "CRITICAL", "propagate": False},
    },
}
