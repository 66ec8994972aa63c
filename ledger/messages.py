"""What the ledger says to the people who use it: every refusal and error a person reads (in
the console, from a service, on an integration's settings form), in one place.

One place so that one thing is said one way wherever it is said, and marked for translation
(nothing is translated yet). Each is lazy, translated when it is shown or formatted; a message
with values takes them by name, ``ALREADY_PAUSED % {"integration": row}``, so a translation
can put them in its own order. Imported as ``said``; the console's own words are
recovery.messages.
"""

from django.utils.translation import gettext_lazy as _

# --- who may, and why (ledger.services.common) --------------------------------------------------
# who: the people who may (holders()); actor: the person refused, by name.
MAY_NOT = _("Only %(who)s may do this; %(actor)s may not.")
# Who holds a permission, in words for people (the roles' defaults, ledger/recovery roles).
HOLDERS = {
    "ledger.recover_operation": _("an admin or a holder of the recovery permission"),
    "ledger.triage_operation": _("a coordinator or an admin"),
    "intake.complete_enquiry": _("a coordinator or an admin"),
    "intake.review_enquiry": _("a reviewer or an admin"),
    "intake.approve_revision": _("a reviewer or an admin"),
    "ledger.pause_integration": _("an admin"),
    "ledger.change_integration": _("an admin"),
    "recovery.review_drillrun": _("an admin"),
}
SOMEONE_WITH = _("someone with the %(permission)s permission")


def holders(permission: str) -> str:
    """Who may, in words: "a coordinator or an admin"."""
    return str(HOLDERS.get(permission) or SOMEONE_WITH % {"permission": permission})


SYSTEM_MAY_NOT = _("%(actor)s may not do this")

# --- an integration's request rate (ledger.rates.parse_rate) ----------------------------------
RATE_NOT_A_NUMBER = _(
    "“%(value)s” is not a rate Handover reads: write calls per second as a plain decimal "
    "with the digits 0-9, such as 25 or 0.5 (0 or empty: no limit)."
)
RATE_OUT_OF_RANGE = _(
    "%(value)s calls per second is outside what Handover can keep to: use between %(min)s and "
    "%(max)s (0 or empty: no limit)."
)

# --- an action on an operation ------------------------------------------------------------------
NO_SUCH_OPERATION = _("No such operation.")
# action: the action's code with spaces ("complete by hand"); state and operation: codes.
NOT_OFFERED = _("%(action)s is not possible for a %(state)s %(operation)s.")
ENQUIRY_NOT_APPROVABLE = _("A %(state)s enquiry cannot be approved.")
# A field the CRM refuses to go without (ledger.kinds.Kind.requires), in the reviewer's words.
NEEDED_BY_DESTINATION = {
    "category": _("Choose a category before approving: the CRM needs one."),
}
NEEDED_FIELD = _("Fill in %(field)s before approving: the CRM needs it.")
ALREADY_SENT = _(
    "Revision %(revision)s already has a %(state)s CRM write that was sent; it cannot be "
    "approved again under the same key."
)
EXTERNAL_ID_REQUIRED = _("Give the record's reference at the destination.")
PAUSED_RESUME_FIRST = _("%(integration)s is paused; resume it first.")

# --- an integration -----------------------------------------------------------------------------
ALREADY_PAUSED = _("%(integration)s is already paused.")
NOT_PAUSED = _("%(integration)s is not paused.")
PAUSED_BEFORE_RELEASE = _("%(integration)s is paused; resume it before releasing its backlog.")
NOT_CONFIGURABLE = _("Not configurable here: %(fields)s.")
NOTHING_CHANGED = _("Nothing changed: %(integration)s's settings are as they were.")

# --- an integration's settings, as the form shows them (ledger.models.Integration.clean) --------
TIMEOUT_NOT_POSITIVE = _("Must be more than 0 s.")
TIMEOUT_NOT_UNDER_CLUSTER = _(
    "Must be shorter than the workers' timeout (Q_TIMEOUT=%(timeout)s s), or every slow call "
    "is killed mid-flight."
)
CLUSTER_TIMEOUT_NOT_UNDER_RETRY = _(
    "The workers' timeout (Q_TIMEOUT=%(timeout)s s) must be shorter than their retry "
    "(Q_RETRY=%(retry)s s): fix the environment, then save again."
)
# ledger.kinds.Kind.validate; served: the integrations the kind serves, or SERVES_NOTHING.
KIND_CANNOT_SERVE = _(
    "%(kind)s cannot serve the %(integration)s integration (it serves: %(served)s)."
)
SERVES_NOTHING = _("nothing")
KIND_NEEDS_TOKEN = _("%(kind)s needs an API token.")
KIND_WRONG_SCHEME = _("%(kind)s takes an address starting %(schemes)s.")

# --- appointments (ledger.models.Integration.clean, ledger.kinds.CalDavKind) ---------------------
MAX_AGE_OUT_OF_BOUNDS = _("Must be between 10 s and 1 d.")
READ_SHARE_OUT_OF_BOUNDS = _(
    "A whole number from 1 to %(most)s (READS_MAX_IN_FLIGHT): reads of every integration "
    "together never take more workers than that, so that writes and messages keep one."
)
CALDAV_TOKEN_SHAPE = _(
    "A CalDAV token is the calendar account's user name and password as user:password "
    "(sent as HTTP Basic), or empty for a calendar without log-in."
)
TOKEN_TYPED_AND_REMOVED = _("Either type a new token or remove it, not both.")
TOKEN_AGAIN_FOR_NEW_ADDRESS = _(
    "The address changed: type the token for the new address again, or remove the token. "
    "The stored one is never sent to an address it was not entered for."
)
