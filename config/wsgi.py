import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A web process: its database connections stop a statement after DB_STATEMENT_TIMEOUT_SECONDS
# (config/settings.py); workers and commands do not import this module.
os.environ.setdefault("HANDOVER_WEB", "1")

from config.webhooks import application

__all__ = ["application"]
