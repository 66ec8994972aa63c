"""Django's PostgreSQL compilers; only the bulk insert of a few rows differs.

Django 5.2 inserts two or more rows as ``SELECT * FROM UNNEST(%s::type[], ...)``: one array
parameter per column, so a large batch is planned once whatever its size. For the few rows the
hot paths insert (a receipt's operations, journal rows and queued tasks; a delivery's journal
rows) the arrays cost more to adapt than they save: psycopg builds each array literal in
Python. Below UNNEST_FROM_ROWS rows the insert is the plain ``VALUES (...), (...)`` Django
writes on every other backend (docs/benchmarks.md has the figures).
"""

from django.db.backends.postgresql.compiler import (  # noqa: F401  (this backend's compilers)
    SQLAggregateCompiler,
    SQLCompiler,
    SQLDeleteCompiler,
    SQLUpdateCompiler,
)
from django.db.backends.postgresql.compiler import SQLInsertCompiler as PostgresInsertCompiler
from django.db.models.sql.compiler import SQLInsertCompiler as GenericInsertCompiler

UNNEST_FROM_ROWS = 6


class SQLInsertCompiler(PostgresInsertCompiler):
    def assemble_as_sql(self, fields, value_rows):
        if len(value_rows) < UNNEST_FROM_ROWS:
            return GenericInsertCompiler.assemble_as_sql(self, fields, value_rows)
        return super().assemble_as_sql(fields, value_rows)
