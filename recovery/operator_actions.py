"""The operator actions: one registry, read by the item page (its buttons and their help),
the runbook pages (the actions each covers), the console's routes and views, the bulk actions,
what a person is offered (recovery.permissions), the story's words, the roles page
(docs/roles.md) and the tests that check every action against every role.

An action is one row: its name, the subject it acts on (an operation, an enquiry or an
integration), its button label, what it does, whether it changes an external system, its
route's segment, who may (an enquiry's and an integration's permissions here; an operation's is
the ledger's policy, which also enforces it: ledger.policies.permission_for), the form it
takes, the service that does it, what the person reads after it, and its runbook
(docs/runbooks/<runbook>.md). Every action on an operation or an enquiry, from its page or in
bulk, runs through one skeleton (recovery.views.actions.act); releasing an integration's
backlog acts on many operations in batched statements (ledger.services.release_backlog),
with this registry's permission, label and reason rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from intake import services as intake_services
from ledger import policies
from ledger import services as ledger_services
from recovery import messages, ownership
from recovery.forms import (
    CancelForm,
    CompleteByHandForm,
    EditForm,
    ReasonForm,
    ReassignForm,
    ReleaseForm,
    ResidentMessageForm,
)

OPERATION, ENQUIRY, INTEGRATION = "operation", "enquiry", "integration"
# Who may reassign an enquiry's owner: either of these.
ASSIGN_PERMISSIONS = ("intake.review_enquiry", "intake.complete_enquiry")


@dataclass(frozen=True)
class OperatorAction:
    name: str
    subject: str  # OPERATION, ENQUIRY or INTEGRATION
    label: str  # the button
    does: str  # what it does, in a sentence (the button's help)
    changes_external: bool
    segment: str  # its route: /console/operations/<id>/<segment>/ or /enquiries/<ref>/...
    done: str  # what the person reads after it (recovery.messages)
    # The service it calls: (subject's pk, *, actor, reason, **the form's ``extra`` fields).
    service: Callable
    form: type = ReasonForm
    extra: tuple[str, ...] = ()
    # An enquiry's (and an integration's): the transition it fires (None: not a transition),
    # and who may (any of).
    transition: str | None = None
    permissions: tuple[str, ...] = ()
    # The runbook (docs/runbooks/<runbook>.md) that says when and how to take it; None where
    # none applies. Its page in the console names the action; docs/roles.md lists it.
    runbook: str | None = None

    def may(self, user) -> bool:
        """An enquiry's or an integration's action's permission (an operation's is the
        ledger's, per operation)."""
        return any(user.has_perm(p) for p in self.permissions)

    def make_form(self, data, subject):
        if self.form is EditForm:
            current = subject.revisions.filter(number=subject.current_revision).first()
            return EditForm(data, revision=current)
        if self.form is ResidentMessageForm:
            return ResidentMessageForm(data, enquiry=subject)
        if self.form is CancelForm:
            return CancelForm(data, operation=subject)
        return self.form(data)

    def nothing_to_do(self, subject, form) -> str:
        """Why the request would change nothing (refused before the service): "" when it
        would."""
        if self.form is not EditForm:
            return ""
        category = form.cleaned_data.get("category")
        current = subject.revisions.filter(number=subject.current_revision).first()
        unchanged = category is None or (current and category == current.category)
        if not form.changed_fields() and unchanged:
            return messages.EDIT_CHANGED_NOTHING
        return ""

    def perform(self, subject, form, actor):
        reason = form.cleaned_data["reason"]
        if self.form is EditForm:
            return self.service(
                subject.pk,
                actor=actor,
                reason=reason,
                fields=form.changed_fields(),
                category=form.cleaned_data.get("category"),
            )
        extra = {name: form.cleaned_data[name] for name in self.extra}
        return self.service(subject.pk, actor=actor, reason=reason, **extra)

    def consequence(self, subject) -> str:
        """What the person reads after it, for this subject."""
        if self.name == "cancel" and subject.ends_enquiry():
            return messages.CANCELLED_ENDS_ENQUIRY % {"reference": subject.enquiry.reference}
        return self.done


_ALL = [
    # --- on an operation ------------------------------------------------------------------
    OperatorAction(
        "reconcile",
        OPERATION,
        "Reconcile now",
        # The item page says exactly what follows for the operation's integration
        # (recovery.explain.reconcile_help); this is the short form.
        "Looks the record up at the destination by its reference. Not found: the write is sent "
        "again with the same idempotency key.",
        False,
        "reconcile",
        messages.OPERATION_DONE["reconcile"],
        ledger_services.reconcile_now,
        runbook="unknown-outcome",
    ),
    OperatorAction(
        "retry",
        OPERATION,
        "Retry",
        "Sends the same approved request again with the same idempotency key.",
        True,
        "retry",
        messages.OPERATION_DONE["retry"],
        ledger_services.retry_operation,
        runbook="destination-unavailable",
    ),
    OperatorAction(
        "complete_by_hand",
        OPERATION,
        "Complete by hand",
        "You found or made the record yourself: give its reference at the destination. "
        "Nothing is sent.",
        False,
        "complete",
        messages.OPERATION_DONE["complete_by_hand"],
        ledger_services.complete_by_hand,
        form=CompleteByHandForm,
        extra=("external_id",),
        runbook="unknown-outcome",
    ),
    OperatorAction(
        "cancel",
        OPERATION,
        "Cancel safely",
        "Stops this operation for good. Nothing is sent; nothing at the destination is undone. "
        "(Cancelling the CRM write an enquiry waits on also closes the enquiry as Rejected: its "
        "page says so before the click, and the resident is e-mailed your message to them, the "
        "“Closed” message.)",
        False,
        "cancel",
        messages.OPERATION_DONE["cancel"],
        ledger_services.cancel_operation,
        form=CancelForm,
        extra=("resident_message",),
    ),
    OperatorAction(
        "compensate",
        OPERATION,
        "Propose compensation",
        "Proposes an operation that closes the record at the destination; it is approved like "
        "any write.",
        True,
        "compensate",
        messages.OPERATION_DONE["compensate"],
        ledger_services.compensate,
    ),
    OperatorAction(
        "approve",
        OPERATION,
        "Approve",
        "Lets this operation run.",
        True,
        "approve",
        messages.OPERATION_DONE["approve"],
        ledger_services.approve_operation,
    ),
    OperatorAction(
        "reassign",
        OPERATION,
        "Reassign owner",
        "Names the person who owns this item now.",
        False,
        "reassign",
        messages.OPERATION_DONE["reassign"],
        ownership.reassign_operation,
        form=ReassignForm,
        extra=("owner",),
        runbook="queue-owners",
    ),
    # --- on an enquiry --------------------------------------------------------------------
    OperatorAction(
        "approve_revision",
        ENQUIRY,
        "Approve revision",
        "Authorises delivery of the current revision to the CRM.",
        True,
        "approve",
        messages.ENQUIRY_DONE["approve_revision"],
        ledger_services.approve_revision,
        transition="approve",
        permissions=("intake.approve_revision",),
    ),
    OperatorAction(
        "edit",
        ENQUIRY,
        "Edit (new revision)",
        "",  # the edit form says it
        False,
        "edit",
        messages.ENQUIRY_DONE["edit"],
        intake_services.revise_enquiry,
        form=EditForm,
        transition="revise",
        permissions=("intake.review_enquiry",),
        runbook="unresolved-classification",
    ),
    OperatorAction(
        "request_information",
        ENQUIRY,
        "Request information",
        "Asks the resident for what is missing, in your message to them (e-mailed as the "
        "“We need more information” message); the enquiry waits.",
        True,  # the e-mail is sent through the notification integration: a destination
        "request-information",
        messages.ENQUIRY_DONE["request_information"],
        # The ledger's: from a CRM write refused as invalid it cancels that write first.
        ledger_services.request_information,
        form=ResidentMessageForm,
        extra=("resident_message",),
        transition="request_information",
        permissions=("intake.review_enquiry",),
        runbook="needs-information",
    ),
    OperatorAction(
        "information_received",
        ENQUIRY,
        "Information received",
        "The customer answered: the enquiry goes back to review.",
        False,
        "information-received",
        messages.ENQUIRY_DONE["information_received"],
        intake_services.information_received,
        transition="information_received",
        permissions=("intake.review_enquiry",),
        runbook="needs-information",
    ),
    OperatorAction(
        "reject",
        ENQUIRY,
        "Reject",
        "Closes the enquiry without delivering it; the resident is e-mailed your message to "
        "them (the “Not taken forward” message).",
        True,  # as Request information: the resident's e-mail goes out
        "reject",
        messages.ENQUIRY_DONE["reject"],
        intake_services.reject_enquiry,
        form=ResidentMessageForm,
        extra=("resident_message",),
        transition="reject",
        permissions=("intake.review_enquiry",),
    ),
    OperatorAction(
        "assign",
        ENQUIRY,
        "Reassign owner",
        "Names the person who owns this enquiry now.",
        False,
        "assign",
        messages.ENQUIRY_DONE["assign"],
        ownership.assign_enquiry,
        form=ReassignForm,
        extra=("owner",),
        permissions=ASSIGN_PERMISSIONS,
        runbook="queue-owners",
    ),
    # --- on an integration ----------------------------------------------------------------
    # Many operations at once, in batched statements (ledger.services.release_backlog, which
    # reads the same permission); its own two-step page (recovery.views.integrations.release).
    OperatorAction(
        "release",
        INTEGRATION,
        "Release held writes",
        "Sends the chosen writes held while the integration was paused, oldest first, at its "
        "rate; the rest stay held.",
        True,
        "release",  # its route: /console/integrations/<name>/backlog/release/
        "",  # the page counts what it released (recovery.messages.RELEASED)
        ledger_services.release_backlog,
        form=ReleaseForm,
        permissions=(policies.PERMISSIONS[policies.RELEASE],),
        runbook="pause-procedure",
    ),
]
ACTIONS: dict[str, OperatorAction] = {action.name: action for action in _ALL}
OPERATION_ACTIONS = {name: a for name, a in ACTIONS.items() if a.subject == OPERATION}
ENQUIRY_ACTIONS = {name: a for name, a in ACTIONS.items() if a.subject == ENQUIRY}
RELEASE = ACTIONS["release"]

# The integration's buttons (recovery.views.integrations): a label and what each does.
INTEGRATION_BUTTONS = {
    "pause": (
        "Pause",
        "No new writes start; intake keeps accepting and storing; the backlog is kept.",
    ),
    "resume": (
        "Resume and review backlog",
        "Unpauses. Held writes stay held until you review and release them.",
    ),
}


def label(action: str) -> str:
    """The button's label; an unknown name in plain words."""
    if action in ACTIONS:
        return ACTIONS[action].label
    if action in INTEGRATION_BUTTONS:
        return INTEGRATION_BUTTONS[action][0]
    return action.replace("_", " ").capitalize()


def does(action: str) -> str:
    if action in ACTIONS:
        return ACTIONS[action].does
    return INTEGRATION_BUTTONS.get(action, ("", ""))[1]


def runbook(action: str) -> str | None:
    """The action's runbook (docs/runbooks/<slug>.md), or None."""
    return ACTIONS[action].runbook if action in ACTIONS else None


def changes_external(action: str) -> bool:
    return action in ACTIONS and ACTIONS[action].changes_external


def who_may(action: OperatorAction) -> str:
    """Who may take it, in the words of docs/roles.md (an operation's: its policy decides per
    operation, ledger.policies.permission_for)."""
    if action.subject in (ENQUIRY, INTEGRATION):
        return " or ".join(f"`{p}`" for p in action.permissions)
    if action.name == "approve":
        return "the policy's approver (`intake.approve_revision` for a CRM write)"
    if action.name == "retry":
        return "`ledger.recover_operation` (`ledger.triage_operation` if never received)"
    if action.name == "cancel":
        return "`ledger.triage_operation` (`intake.review_enquiry` if it ends the enquiry)"
    return f"`{policies.PERMISSIONS[action.name]}`"


def markdown_table() -> str:
    """The table in docs/roles.md, between its operator-actions markers (a test compares)."""
    lines = [
        "| action | on | button | who may | changes a destination | what it does | runbook |",
        "|---|---|---|---|---|---|---|",
    ]
    for action in ACTIONS.values():
        lines.append(
            f"| `{action.name}` | {action.subject} | {action.label} | {who_may(action)} | "
            f"{'yes' if action.changes_external else 'no'} | {action.does or '-'} | "
            f"{f'[{action.runbook}](runbooks/{action.runbook}.md)' if action.runbook else '-'} |"
        )
    return "\n".join(lines) + "\n"
