"""``handover.W1xx``: what a fresh install still lacks (recovery.readiness), as system checks.

They read the database, so they must not stand in the way of the command that makes it: on a
database that is not migrated yet (``migrate`` runs the checks before it migrates), or one that
cannot be reached, they find nothing and leave the saying to ``migrate`` and ``/healthz``.
Warnings, not errors: a fresh install must still migrate, provision and start.
"""

from django.core.checks import Warning, register
from django.db import DatabaseError, connection

TABLES = ("recovery_responsepolicy", "ledger_integration", "ledger_journalentry", "auth_group")


def _migrated() -> bool:
    try:
        present = set(connection.introspection.table_names())
    except DatabaseError:
        return False
    return all(table in present for table in TABLES)


@register("handover")
def install_is_ready(app_configs, **kwargs):
    from recovery.readiness import findings

    if not _migrated():
        return []
    try:
        found = findings()
    except DatabaseError:  # a migration still to run (a column not there yet)
        return []
    return [Warning(str(f.text), hint=str(f.fix), id=f.id) for f in found]
