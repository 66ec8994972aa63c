"""The console's plain words for codes: actions, outcomes, attention reasons, operator actions."""

from ledger.models import Action, Integration
from ledger.policies import ATTENTION as POLICY_ATTENTION

# Writes whose delay a customer feels: their record in the CRM, their acknowledgement.
CUSTOMER_AFFECTING_ACTIONS = (Action.CREATE_ENQUIRY, Action.SEND_NOTICE, Action.CLOSE_ENQUIRY)

OUTCOMES = {
    "success": "succeeded",
    "transient": "unavailable (not accepted)",
    "uncertain": "no answer (may have happened)",
    "invalid": "refused as invalid",
    "auth": "refused our credentials",
    "internal": "error inside Handover",
    "throttled": "asked to wait (429)",
    "found": "record found",
    "not_found": "no record found",
    "duplicate": "more than one record found",
    "lookup_unavailable": "lookup not possible",
    "lookup_failed": "lookup failed",
    "": "in flight",
}

# Why a person must look (Operation.attention): the ledger owns those words.
ATTENTION = POLICY_ATTENTION

# Operator actions: button label, whether it changes an external system.
OPERATOR_ACTIONS = {
    "reconcile": ("Reconcile now", False),
    "retry": ("Retry", True),
    "complete_by_hand": ("Complete by hand", False),
    "cancel": ("Cancel safely", False),
    "compensate": ("Propose compensation", True),
    "approve": ("Approve", True),
    "reassign": ("Reassign owner", False),
    "approve_revision": ("Approve revision", True),
    "edit": ("Edit (new revision)", False),
    "request_information": ("Request information", False),
    "information_received": ("Information received", False),
    "reject": ("Reject", False),
    "assign": ("Reassign owner", False),
    "pause": ("Pause", False),
    "resume": ("Resume and review backlog", False),
}

ACTION_HELP = {
    # The item page says exactly what follows for the operation's integration
    # (recovery.explain.reconcile_help); this is the short form.
    "reconcile": "Looks the record up at the destination by its reference. Not found: the "
    "write is sent again with the same idempotency key.",
    "retry": "Sends the same approved request again with the same idempotency key.",
    "complete_by_hand": "You found or made the record yourself: give its reference at the "
    "destination. Nothing is sent.",
    "cancel": "Stops this operation for good. Nothing is sent; nothing at the destination is "
    "undone. (Cancelling the CRM write an enquiry waits on also closes the enquiry as "
    "Rejected: its page says so before the click.)",
    "compensate": "Proposes an operation that closes the record at the destination; it is "
    "approved like any write.",
    "approve": "Lets this operation run.",
    "reassign": "Names the person who owns this item now.",
    "assign": "Names the person who owns this enquiry now.",
    "approve_revision": "Authorises delivery of the current revision to the CRM.",
    "request_information": "Asks the customer for what is missing; the enquiry waits.",
    "information_received": "The customer answered: the enquiry goes back to review.",
    "reject": "Closes the enquiry without delivering it.",
    "pause": "No new writes start; intake keeps accepting and storing; the backlog is kept.",
    "resume": "Unpauses. Held writes stay held until you review and release them.",
}


def action_label(action: str) -> str:
    return Action.LABELS.get(action, action.replace(".", " ").replace("_", " "))


def in_sentence(label: str) -> str:
    """A label inside a sentence: its first letter lower case, the rest as written ("Create the
    enquiry in the CRM" -> "create the enquiry in the CRM"; "CRM 503" stays)."""
    if len(label) > 1 and label[1].isupper():
        return label
    return label[:1].lower() + label[1:]


def outcome_label(outcome: str | None) -> str:
    return OUTCOMES.get(outcome or "", outcome or "")


# A group of operations that failed the same way, in a few words (recovery.queue.filters.GroupKey).
GROUP_ATTENTION = {
    "retry_budget_exhausted": "retries used up",
    "lookup_unavailable": "cannot be looked up",
    "lookup_failed": "look-up failed",
    "duplicate_records": "duplicate records",
    "invalid": "refused as invalid",
    "auth": "credentials refused",
    "access_denied": "access removed",
    "document_changed": "document changed",
    "delivery_failed": "not delivered",
    "smtp_no_reply": "sent, relay never replied",
    "payload_mismatch": "payload changed after approval",
    "unresolved": "no usable suggestion",
    "internal_error": "error inside Handover",
    "throttled_too_often": "throttled too often",
}


def group_label(key) -> str:
    """ "CRM 503 - retries used up", "CRM - no answer, reconciling"."""
    system = dict(Integration.NAMES).get(key.integration, key.integration or "Suggester")
    cause = f"{system} {key.status}" if key.status else system
    if key.attention:
        why = GROUP_ATTENTION.get(key.attention, key.attention.replace("_", " "))
    elif key.state == "unknown":
        why = "no answer, outcome unknown"
    else:
        why = OUTCOMES.get(key.error_class, "failed")
    if key.error_class and key.attention and not key.status:
        why += f" ({OUTCOMES.get(key.error_class, key.error_class)})"
    return f"{cause} - {why}"
