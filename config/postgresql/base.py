"""Django's PostgreSQL backend, with small bulk inserts written as VALUES (compiler.py).

settings.DATABASES["default"]["ENGINE"] = "config.postgresql". Everything else is Django's.
"""

from django.db.backends.postgresql import base

from config.postgresql.operations import DatabaseOperations


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
