"""django-q2 task functions: thin, ID-only (never personal data), safe to run twice.

Each first claims its row (ledger.execution; the receipt's task, its enquiry's
``receipt_pending`` marker, ledger.receipt); a redelivered or duplicate task finds nothing to
claim and returns quietly. Results are not stored (save_limit -1): the ledger is the record.
"""

import logging

from config.context import background_run
from ledger import execution, receipt, sweeper

logger = logging.getLogger("ledger.tasks")


@background_run("execute")
def execute_operation(op_id: str) -> str:
    outcome = execution.execute(op_id)
    logger.info("execute %s: %s", op_id, outcome)
    return outcome


@background_run("reconcile")
def reconcile_operation(op_id: str) -> execution.Lookup:
    outcome = execution.reconcile(op_id)
    logger.info("reconcile %s: %s", op_id, outcome)
    return outcome


@background_run("receipt")
def take_up_receipt(enquiry_id: str) -> bool:
    try:
        return receipt.take_up_or_record(enquiry_id)
    except Exception:
        # Counted on the enquiry (the queue shows it once it keeps failing); the sweeper tries
        # it again. django-q2 keeps no failed results (save_limit -1): the ledger is the record.
        return False


@background_run("sweep")
def sweep() -> dict:
    return sweeper.sweep().as_dict()
