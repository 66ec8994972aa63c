"""The console's plain words for codes: actions, outcomes, attention reasons. An operator
action's words are its row in recovery.operator_actions."""

from ledger.models import Action, Integration
from ledger.policies import ATTENTION as POLICY_ATTENTION
from ledger.policies import POLICIES, READ

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


def action_label(action: str) -> str:
    return Action.LABELS.get(action, action.replace(".", " ").replace("_", " "))


def in_sentence(label: str) -> str:
    """A label inside a sentence: its first letter lower case, the rest as written ("Create the
    enquiry in the CRM" -> "create the enquiry in the CRM"; "CRM 503" stays)."""
    if len(label) > 1 and label[1].isupper():
        return label
    return label[:1].lower() + label[1:]


def held_noun(integration_name: str) -> str:
    """What an integration's held operations are, in a word, by its actions' policies: "read"
    where it only reads (documents, appointments), "write" otherwise (the CRM, notices)."""
    kinds = {p.kind for p in POLICIES.values() if p.integration == integration_name}
    return "read" if kinds == {READ} else "write"


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
