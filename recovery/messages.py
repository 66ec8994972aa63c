"""What the console says to the people who use it: its refusals, errors, notes and the
messages after an action, in one place (the ledger's own are ledger.messages; the ones the
console says too are named here from there).

One place so that one thing is said one way wherever it is said, and marked for translation
(nothing is translated yet). Each is lazy, translated when it is shown or formatted; a message
with values takes them by name (``CHECK_READY % {"integration": row, "url": url}``) so a
translation can put them in its own order. Imported as ``said`` (``messages`` is Django's).
Not here yet: the button labels and other vocabulary (recovery.words) and the few words each
view passes to NEEDS_PERMISSION ("pause an integration"), which are still plain strings.
"""

from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from ledger.messages import (
    ALREADY_PAUSED,
    EXTERNAL_ID_REQUIRED,
    NOT_PAUSED,
    PAUSED_BEFORE_RELEASE,
    TOKEN_TYPED_AND_REMOVED,
)

__all__ = [
    "ALREADY_PAUSED",
    "EXTERNAL_ID_REQUIRED",
    "NOT_PAUSED",
    "PAUSED_BEFORE_RELEASE",
    "TOKEN_TYPED_AND_REMOVED",
]

# --- access (recovery.views.common) -------------------------------------------------------------
NO_CONSOLE_ROLE = _("Your account has no console role. Ask an admin.")
MAY_NOT = _("You may not do that.")
# what: the action in words ("pause an integration"); who: the people who may (holders()).
NEEDS_PERMISSION = _("You may not %(what)s: only %(who)s may.")

# --- pages and filters --------------------------------------------------------------------------
PAGE_NOT_UNDERSTOOD = _("Page “%(page)s” not understood; showing page 1.")
NO_SUCH_PAGE = _("There is no page %(number)s: showing the last page (%(last)s).")
PAGE_TOO_FAR = _("Page %(number)s is too far: showing page %(last)s.")
# name: the query's parameter ("state", "unresolved"); value: what was asked for.
FILTER_NOT_UNDERSTOOD = _("%(name)s “%(value)s” not understood; showing all.")
# limit: how many words a search reads; dropped: the words past it, as typed.
SEARCH_WORDS_DROPPED = _("A search reads its first %(limit)s words: “%(dropped)s” was left out.")
SEARCH_CHARACTERS_DROPPED = _(
    "A search reads its first %(limit)s characters; yours had %(length)s, so “%(dropped)s” was "
    "left out."
)

# --- an action on an item (recovery.views.actions) ----------------------------------------------
NOT_POSSIBLE_FOR_ITEM = _("That is not possible in the item's current state.")
NOT_POSSIBLE_FOR_ENQUIRY = _("That is not possible in the enquiry's current state.")
# action: the button's label as written on it; state: the item's state in words.
CANNOT_FOR_OPERATION = _("“%(action)s” is not possible now: this operation is %(state)s.")
CANNOT_FOR_ENQUIRY = _("“%(action)s” is not possible now: the enquiry is %(state)s.")
EDIT_CHANGED_NOTHING = _("Nothing changed: no new revision was made. Change a field, then save.")
OWNER_CHANGED = _("Owner changed.")
# An integration's numbers out of range (recovery.forms.IntegrationForm): the range and what
# empty means, for each.
NUMBER_RANGES = {
    "retry_budget": _("Retry budget: a whole number of attempts from 1 to 20."),
    "max_requests_per_second": _(
        "Requests per second: a number of 0 or more (0.5 is one every two seconds); "
        "empty or 0 means no limit."
    ),
    "max_in_flight": _("Calls in flight at once: a whole number, 1 or more; empty means no limit."),
    "read_share": _(
        "Reads' share: a whole number of reads in flight, 1 or more; empty means the default."
    ),
}
OPERATION_DONE = {
    "reconcile": _(
        "Reconciliation requested: the card shows the look-up's outcome when it is recorded."
    ),
    "retry": _("Retry queued with the same idempotency key."),
    "complete_by_hand": _("Completed by hand."),
    "cancel": _("Cancelled. Nothing will be sent."),
    "compensate": _("Compensation proposed; it needs approval."),
    "approve": _("Approved."),
    "reassign": OWNER_CHANGED,
}
CANCELLED_ENDS_ENQUIRY = _(
    "Cancelled. Nothing will be sent; %(reference)s is closed as Rejected (not delivered), "
    "with your reason."
)
ENQUIRY_DONE = {
    "approve_revision": _("Approved: delivery to the CRM is queued."),
    "edit": _("Saved as a new revision; it needs review again."),
    "request_information": _("Information requested; the enquiry waits for the customer."),
    "information_received": _("Back in the review queue."),
    "reject": _("Rejected."),
    "assign": OWNER_CHANGED,
}
# A document's card on the review page (recovery.views.documents).
NO_SUCH_FIELD = _("Choose one of the fields read from this document.")
DOCUMENT_CORRECTED = _(
    "Corrected %(field)s of %(document)s: saved as a new revision, which needs review again."
)
DOCUMENT_READ_AGAIN = _(
    "%(document)s version %(version)s will be read again; a correction stays as it is."
)

# done: one of ENQUIRY_DONE; next: the reference of the next enquiry waiting.
REVIEWED_NONE_WAITING = _("%(reference)s: %(done)s Nothing else waits for review.")
REVIEWED_NEXT_WAITING = _("%(reference)s: %(done)s Next waiting: %(next)s.")
# count: enquiries waiting whose current revision this reviewer edited (another approves them).
REVIEWED_ONLY_OWN_EDITS = _(
    "%(reference)s: %(done)s The enquiries still waiting (%(count)s) are revisions you edited: "
    "another reviewer approves them."
)

# --- taking items, and one action for many (recovery.views.bulk) --------------------------------
NOT_TAKEN = _("%(reference)s: not taken. %(why)s")
# The "What" of an enquiry in a bulk action's results; state: its state in words.
BULK_WHAT_ENQUIRY = _("The enquiry itself (%(state)s)")
OPERATION_TAKEN = _("%(reference)s (%(action)s) is yours now.")
ENQUIRY_TAKEN = _("%(reference)s is yours now.")
# An item's outcome in the bulk summary, after its reference: lower case, no full stop.
BULK_DONE = {
    "reconcile": _("reconciliation requested"),
    "retry": _("retry queued with the same idempotency key"),
    "cancel": _("cancelled; nothing will be sent"),
    "reassign": _("owner changed"),
}
BULK_NOT_POSSIBLE = _("not possible in its current state")
BULK_MAY_NOT = _("you may not do this")
BULK_NOT_FOR_ENQUIRY = _("an enquiry has no delivery to %(action)s; open it to act on it")

# --- integrations (recovery.views.integrations) -------------------------------------------------
PAUSED = _("%(integration)s is paused: no new writes start; intake keeps accepting.")
RESUMED = _("%(integration)s is resumed. Review the held work below before releasing it.")
CHECK_PROBLEM = _("%(integration)s: %(problem)s")
CHECK_READY = _("%(integration)s: %(url)s answered as expected. Ready.")
RELEASED = ngettext_lazy(
    "Released %(n)d write: they run now.", "Released %(n)d writes: they run now.", "n"
)
STAY_HELD = ngettext_lazy("%(n)d stay held.", "%(n)d stay held.", "n")
SETTINGS_SAVED = _("%(integration)s settings saved (%(changed)s).")

# --- forms (recovery.forms, recovery.durations) -------------------------------------------------
REASON_INVISIBLE = _("Give a reason in words: this one has only spaces or invisible characters.")
BULK_ACTION_REQUIRED = _("Choose what to do with the selected items.")
BULK_ACTION_NOT_FOR_MANY = _("That action cannot be applied to many items at once.")
UNKNOWN_GROUP = _("That group is not one the queue knows; open it again.")
NOT_A_QUEUE_ITEM = _("Not a queue item: %(item)s.")
TOO_MANY_ITEMS = _("Select at most 500 items, or act on their group.")
NOTHING_SELECTED = _("Select at least one item, or a whole group.")
RELEASE_NOTHING_CHOSEN = _("Tick the writes to release: nothing is released unless it is chosen.")
RELEASE_NO_LONGER_HELD = _(
    "A chosen write is no longer held (released or cancelled since): look at the backlog again."
)
# field: the field's label in lower case.
DURATION_REQUIRED = _("Enter %(field)s, e.g. 10 s.")
NOTICES_ON = _("You will be e-mailed about work that needs you.")
NOTICES_OFF = _("You will not be e-mailed; the queue still shows what needs you.")
AT_LEAST = _("At least %(duration)s.")
AT_MOST = _("At most %(duration)s.")
# recovery.durations.parse_duration; text: what was typed, examples: durations written right.
DURATION_EXPECTED = _("Enter a duration, e.g. %(examples)s.")
DURATION_TOO_LONG = _("“%(text)s” is too long for a duration: write e.g. %(examples)s.")
DURATION_NEEDS_UNIT = _("“%(text)s” needs a unit: s, min, h or d (e.g. %(examples)s).")
DURATION_UNKNOWN_UNIT = _(
    "“%(unit)s” in “%(text)s” is not a unit: use s, min, h or d (e.g. %(examples)s)."
)
DURATION_UNIT_TWICE = _("“%(text)s” names the same unit twice.")
DURATION_UNREADABLE = _("“%(text)s” is not a duration: write it like %(examples)s.")
DURATION_OVER_A_YEAR = _("“%(text)s” is more than a year: is the unit right?")

# --- the drill page (recovery.drill.views) ------------------------------------------------------
CONCLUSION_REQUIRED = _("Write what you concluded: it is kept with the report.")
DRILL_RUN_INVALID = _(
    "Choose the drill run from this page: the run sent was not a run number. Nothing was recorded."
)
CONCLUSION_RECORDED = _("Your conclusion is recorded with the drill report.")

# --- appointment slots (recovery.views.slots) -------------------------------------------------
SLOTS_REASON = _("slots needed to review the enquiry")
SLOTS_NOT_NEEDED = _(
    "%(reference)s's category does not need a visit: no appointment slots are read for it."
)
# --- is the install ready (recovery.readiness: the admins' banner and the system checks) -------
# queues / integrations: a list of names in words.
READY_NO_OWNER = _("Nobody owns these queues: %(queues)s.")
READY_NO_OWNER_FIX = _(
    "Give each queue an owner (or set a default owner for every queue) on the setup page."
)
READY_NO_PERIOD = _(
    "These queues have no response period, so nothing in them is ever overdue: %(queues)s."
)
READY_NO_PERIOD_FIX = _("Set a response period for each queue (or a default) on the setup page.")
READY_NOT_CHECKED = _("Not checked since their last change: %(integrations)s.")
READY_NOT_CHECKED_FIX = _(
    "Use Check connection on the integrations page, or run "
    "python manage.py check_integration --all."
)
READY_NO_EMAIL = _("E-mail is not configured: nobody can be told anything by e-mail.")
READY_NO_EMAIL_FIX = _(
    "Set EMAIL_HOST (and EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS) to "
    "your mail relay, or make the notification integration speak e-mail."
)
READY_NO_REVIEWER = _("Nobody has the reviewer role: no enquiry can be approved.")
READY_NO_ADMIN = _(
    "Nobody has the admin role with staff status: only a superuser can change the set-up."
)
READY_ROLE_FIX = _("Grant the role on the people page (or with python manage.py provision).")
READY_INTEGRATION_NO_OWNER = _(
    "Nobody owns these integrations, so nobody is told when they fail: %(integrations)s."
)
READY_INTEGRATION_NO_OWNER_FIX = _(
    "Name an owner on each integration's settings page (or in the provisioning file)."
)
# people: usernames.
READY_NO_ADDRESS = _(
    "These people have a role and no e-mail address, so nothing they own reaches them: %(people)s."
)
READY_NO_ADDRESS_FIX = _("Give each an e-mail address on the people page.")
READY_NO_CATEGORY = _(
    "There are no categories: no enquiry can be approved, since the CRM needs one."
)
READY_NO_CATEGORY_FIX = _("Add the council's categories on the setup page.")

# --- the setup pages (recovery.views.setup) ----------------------------------------------------
SETUP_NOTHING_CHANGED = _("Nothing changed: the values were already those.")
SETUP_QUEUE_SAVED = _("Saved for %(queue)s, with your reason in the journal.")
SETUP_CATEGORY_SAVED = _("Category “%(category)s” saved, with your reason in the journal.")
SETUP_PERSON_SAVED = _("Changes to %(person)s saved, with your reason in the journal.")
NO_SUCH_ROLE = _("There is no role “%(role)s”.")
# --- who owns an item (recovery.ownership) ------------------------------------------------------
OWNER_ADMINS = _("admins")
OWNER_NOT_QUEUED = _("not needed (in no queue)")
# queue: the queue's name ("Operation failed").
OWNER_OF_QUEUE = _("owns the “%(queue)s” queue, by its response policy")
OWNER_OF_ITS_QUEUE = _("owns its queue, by its response policy")
OWNER_FALLS_TO_ADMINS = _(
    "no owner is set for the “%(queue)s” queue, so it falls to the admins; an admin sets one "
    "on the setup page"
)
OWNER_GIVEN_UNRECORDED = _("assigned; no journal entry says by whom")
# earlier: who had it; at: when it was escalated.
OWNER_ESCALATED = _("escalated from %(earlier)s at %(at)s by the escalation job, as it was overdue")
# who: a username or system:<worker>; at: when; reason: the reason given.
OWNER_ASSIGNED = _("assigned by %(who)s at %(at)s: “%(reason)s”")
