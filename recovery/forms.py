"""Operator-action forms: every one asks for a reason, which is written to the journal."""

import unicodedata
import uuid
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model

from config.destinations import validate_address
from intake.models import Category
from intake.services import RESIDENT_MESSAGE_MAX
from intake.visible import has_visible_text
from intake.workflow import REASON_REQUIRED, RESIDENT_MESSAGE_REQUIRED
from ledger import reads
from ledger.models import Integration
from ledger.rates import RateFormField
from recovery import messages
from recovery.durations import SecondsField

ROLE_GROUPS = ("coordinator", "reviewer", "admin")


class ReasonField(forms.CharField):
    """A reason for the journal: required, and made of more than invisible characters."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 2000)
        kwargs.setdefault("strip", True)
        kwargs.setdefault(
            "widget",
            forms.Textarea(attrs={"rows": 2, "placeholder": "Why? (written to the journal)"}),
        )
        kwargs.setdefault("error_messages", {"required": REASON_REQUIRED})
        super().__init__(**kwargs)

    def validate(self, value):
        super().validate(value)
        if value and not has_visible_text(value):
            raise forms.ValidationError(messages.REASON_INVISIBLE, code="invisible")


class ReasonForm(forms.Form):
    reason = ReasonField()


# The two texts of an action that tells the resident something, said plainly on the form.
REASON_STAYS_INSIDE = "Reason (stays inside Handover: written to the journal, never sent)"
TO_THE_RESIDENT = "Message to the resident (sent to them by e-mail, word for word)"


class ResidentMessageForm(ReasonForm):
    """An action the resident is told about: the message they read, apart from the reason,
    which stays in the journal. Required when the enquiry has an address to send it to."""

    resident_message = forms.CharField(
        label=TO_THE_RESIDENT,
        max_length=RESIDENT_MESSAGE_MAX,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4}),
        error_messages={"required": RESIDENT_MESSAGE_REQUIRED},
    )

    def __init__(self, *args, enquiry=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"].label = REASON_STAYS_INSIDE
        if enquiry is not None and not enquiry.email:
            self.fields["resident_message"].required = False

    def clean_resident_message(self):
        value = self.cleaned_data.get("resident_message", "")
        if self.fields["resident_message"].required and not has_visible_text(value):
            raise forms.ValidationError(RESIDENT_MESSAGE_REQUIRED, code="invisible")
        return value


# "Assign to me" is one click: its reason is written for the person (and shown on the button).
TAKE_REASON = "taking it"


class BulkForm(ReasonForm):
    """One action and one reason for a selection of queue items or a whole group."""

    ACTIONS = [
        ("reconcile", "Reconcile now"),
        ("retry", "Retry"),
        ("cancel", "Cancel safely"),
        ("reassign", "Reassign owner"),
    ]
    action = forms.ChoiceField(
        choices=ACTIONS,
        label="Action",
        error_messages={
            "required": messages.BULK_ACTION_REQUIRED,
            "invalid_choice": messages.BULK_ACTION_NOT_FOR_MANY,
        },
    )
    item = forms.CharField(required=False, label="Items")  # read from getlist() in clean()
    group = forms.CharField(required=False, max_length=200, label="Group")
    owner = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="(back to the queue's owner)", label="New owner"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = people()

    def clean_group(self):
        from recovery.queue import GroupKey

        raw = self.cleaned_data.get("group", "")
        if not raw:
            return None
        key = GroupKey.parse(raw)
        if key is None:
            raise forms.ValidationError(messages.UNKNOWN_GROUP)
        return key

    def clean(self):
        cleaned = super().clean()
        operations, enquiries, unknown = [], [], []
        for value in self.data.getlist("item") if hasattr(self.data, "getlist") else []:
            kind, _, key = value.partition(":")
            if kind == "operation":
                try:
                    operations.append(uuid.UUID(key))
                except ValueError:
                    unknown.append(value)
            elif kind == "enquiry" and 0 < len(key) <= 64:
                enquiries.append(key)
            else:
                unknown.append(value)
        if unknown:
            raise forms.ValidationError(messages.NOT_A_QUEUE_ITEM % {"item": unknown[0][:60]})
        if len(operations) + len(enquiries) > 500:
            raise forms.ValidationError(messages.TOO_MANY_ITEMS)
        cleaned["operations"], cleaned["enquiries"] = operations, enquiries
        nothing = not operations and not enquiries and not cleaned.get("group")
        if nothing and "group" not in self.errors:
            raise forms.ValidationError(messages.NOTHING_SELECTED)
        return cleaned


class CancelForm(ReasonForm):
    """Cancel an operation. Cancelling the CRM write an enquiry waits on closes the enquiry:
    then the resident is told, in the message written here, and the reason stays in the
    journal. The item's form shows the field, and then it is required when the resident has an
    address; a request without it (a bulk cancel, which cannot write to each resident) closes
    the enquiry telling them nothing, and the enquiry's journal says so."""

    resident_message = forms.CharField(
        label=TO_THE_RESIDENT,
        max_length=RESIDENT_MESSAGE_MAX,
        strip=True,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
    )

    def __init__(self, *args, operation=None, **kwargs):
        super().__init__(*args, **kwargs)
        enquiry = getattr(operation, "enquiry", None)
        self.closes = operation is not None and operation.ends_enquiry()
        asked = self.data is not None and "resident_message" in self.data
        if self.closes and asked and enquiry is not None and enquiry.email:
            self.fields["reason"].label = REASON_STAYS_INSIDE
            self.fields["resident_message"].required = True
            self.fields["resident_message"].error_messages["required"] = RESIDENT_MESSAGE_REQUIRED

    def clean_resident_message(self):
        value = self.cleaned_data.get("resident_message", "")
        if self.fields["resident_message"].required and not has_visible_text(value):
            raise forms.ValidationError(RESIDENT_MESSAGE_REQUIRED, code="invisible")
        return value if self.closes else ""


class CompleteByHandForm(ReasonForm):
    external_id = forms.CharField(
        max_length=200,
        strip=True,
        label="Reference at the destination",
        error_messages={"required": messages.EXTERNAL_ID_REQUIRED},
    )


def people():
    return (
        get_user_model()
        .objects.filter(is_active=True, groups__name__in=ROLE_GROUPS)
        .distinct()
        .order_by("username")
    )


class ReassignForm(ReasonForm):
    owner = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="(back to the queue's owner)"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = people()


class EditForm(ReasonForm):
    """A reviewer's edit makes revision N+1; only changed fields are sent to the service."""

    subject = forms.CharField(max_length=200, required=False)
    name = forms.CharField(max_length=200, required=False)
    email = forms.EmailField(required=False)
    phone = forms.CharField(max_length=40, required=False)
    service_hint = forms.CharField(max_length=120, required=False, label="Service")
    category = forms.ModelChoiceField(
        queryset=None, required=False, to_field_name="slug", empty_label="(keep)"
    )

    FIELDS = ("subject", "name", "email", "phone", "service_hint")

    def __init__(self, *args, revision=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["category"].queryset = Category.objects.filter(active=True)
        self.revision_fields = dict(revision.fields) if revision else {}
        if revision is not None and not self.is_bound:
            for name in self.FIELDS:
                self.fields[name].initial = self.revision_fields.get(name, "")

    def clean_email(self):
        # The address goes into the acknowledgement's To: header: a line break inside a quoted
        # local part ("a\nb"@example.org, which Django's rule allows) would split the header.
        email = self.cleaned_data.get("email") or ""
        if any(unicodedata.category(ch) == "Cc" for ch in email):
            raise forms.ValidationError(
                "Remove the control character (a line break, tab or similar): an address "
                "cannot contain one."
            )
        return email

    def changed_fields(self) -> dict:
        """Fields sent and different from the current revision (absent means unchanged)."""
        data = self.cleaned_data
        return {
            name: data[name]
            for name in self.FIELDS
            if name in self.data
            and (data.get(name) or "") != (self.revision_fields.get(name) or "")
        }


class DocumentCorrectionForm(ReasonForm):
    """A reviewer's value for one field read from a document (intake.documents)."""

    field = forms.ChoiceField(
        label="Field", error_messages={"invalid_choice": messages.NO_SUCH_FIELD}
    )
    value = forms.CharField(label="Correct value", max_length=2000, required=False)

    def __init__(self, *args, document=None, **kwargs):
        super().__init__(*args, **kwargs)
        names = sorted(document.extracted) if document is not None else []
        self.fields["field"].choices = [(name, name) for name in names]


class ReleaseForm(ReasonForm):
    """The held writes an admin chose, and whether they saw the summary and confirmed it.

    No choice releases nothing: "release all" is ticking every row (the page's "select all"),
    never the default of an empty form.
    """

    operations = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "required": messages.RELEASE_NOTHING_CHOSEN,
            "invalid_choice": messages.RELEASE_NO_LONGER_HELD,
        },
    )
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, backlog=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["operations"].choices = [(str(op.pk), str(op.pk)) for op in backlog]


# --- integration settings ---------------------------------------------------------------------
# The fields an admin edits are ledger.Integration.CONFIGURABLE, in that order: the one place to
# add one (a connector kind, a rate limit). A duration stored in seconds is listed in SECONDS
# with its bounds, and is typed and shown as people write it; LABELS and HELP say it in words
# (a field without them gets the model's verbose name).
INTEGRATION_FIELDS = Integration.CONFIGURABLE
SECONDS = {
    # field: (minimum, maximum); the timeout's upper bound is Q_TIMEOUT (Integration.clean)
    "timeout_seconds": (timedelta(milliseconds=100), None),
    "backoff_seconds": (timedelta(0), timedelta(hours=1)),
    "settle_delay_seconds": (timedelta(0), timedelta(hours=1)),
    # ledger.models.MAX_AGE_BOUNDS
    "max_age_seconds": (timedelta(seconds=10), timedelta(days=1)),
}
LABELS = {
    "kind": "Speaks (connector kind)",
    "base_url": "Address (base URL)",
    "token": "Access token",
    "owner": "Owner",
    "timeout_seconds": "Timeout per call",
    "retry_budget": "Attempts before “failed”",
    "backoff_seconds": "First retry after",
    "supports_lookup": "Can look a record up by reference",
    "supports_idempotency_key": "Honours the idempotency key",
    "settle_delay_seconds": "Search lag (settle delay)",
    "max_age_seconds": "Read again after (maximum age)",
    "max_requests_per_second": "Most requests per second",
    "max_in_flight": "Most calls in flight at once",
    "read_share": "Reads' share of the workers",
}
HELP = {
    "kind": "The API the destination speaks: Handover's own contract (the sandbox) or a real "
    "CRM's. Use Check connection on the integrations page after changing it.",
    "base_url": "Where the connector sends its requests: http or https, a host, a port if "
    "needed, no user name or password. An e-mail relay: smtp://, smtp+starttls:// or smtps://, "
    "with only the user name before an @ (smtp+starttls://handover@relay.example.org:587).",
    "token": "Leave empty to keep the current token (an e-mail relay's password), unless the "
    "address changes: then type it again. It is never shown or written to the journal.",
    "owner": "Told when the destination refuses Handover's credentials.",
    "timeout_seconds": "How long one call may take before its outcome is uncertain. Must be "
    "shorter than the workers' timeout (Q_TIMEOUT={timeout} s).",
    "retry_budget": "Calls made for a transient failure before it goes to a person.",
    "backoff_seconds": "Doubles after each retry.",
    "supports_lookup": "Off: an uncertain write goes to a person instead of being reconciled.",
    "supports_idempotency_key": "Off: a write is retried only after two look-ups agree it is "
    "not there.",
    "settle_delay_seconds": "How long after a write the destination's search may still miss "
    "it; a look-up that finds nothing is trusted only after this.",
    "max_age_seconds": "How old the slots on a review page may be before they are read again. "
    "Older slots are shown as stale, never as current.",
    "max_requests_per_second": "For every worker on every machine together: writes, look-ups "
    "and reads alike: a plain decimal from 0.01 to 10000, such as 25 or 0.5. Empty or 0: no "
    "limit. A released backlog drains at this rate.",
    "max_in_flight": "Calls waiting for this destination's answer at once. Empty: no limit.",
    "read_share": "Reads from this destination in flight at once, from every worker together, "
    "from 1 to {reads}. Empty: {reads} (READS_MAX_IN_FLIGHT), which leaves writes and messages "
    "a worker. The reads beyond it wait their turn, their retries untouched.",
}


class IntegrationForm(forms.ModelForm):
    """An admin's edit of an integration's settings; saved by ledger.services, with a reason."""

    reason = ReasonForm.base_fields["reason"]
    remove_token = forms.BooleanField(required=False, label="Remove the token")

    class Meta:
        model = Integration
        fields = INTEGRATION_FIELDS
        labels = LABELS
        widgets = {"token": forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"})}
        field_classes = {
            "base_url": forms.CharField,  # the scheme is checked in __init__
            "max_requests_per_second": RateFormField,  # ledger.rates.parse_rate's rule
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        timeout = settings.Q_CLUSTER.get("timeout")
        for name, field in self.fields.items():
            if name in HELP:
                field.help_text = HELP[name].format(timeout=timeout, reads=reads.max_in_flight())
        for name, (minimum, maximum) in SECONDS.items():
            if name in self.fields:
                old = self.fields[name]
                self.fields[name] = SecondsField(
                    label=old.label,
                    help_text=old.help_text,
                    minimum=minimum,
                    maximum=maximum,
                    error_messages={
                        "required": messages.DURATION_REQUIRED % {"field": old.label.lower()}
                    },
                )
        if self.instance.name != Integration.APPOINTMENTS:
            self.fields.pop("max_age_seconds", None)  # only reads have an age
        if self.instance.name not in Integration.READ_FROM:
            self.fields.pop("read_share", None)  # only reads take a share
        if "base_url" in self.fields:
            # The one rule for an address (config.destinations), as in the admin and the
            # environment.
            self.fields["base_url"].validators = [validate_address]
            self.fields["base_url"].widget.input_type = "url"
        if "retry_budget" in self.fields:
            old = self.fields["retry_budget"]
            self.fields["retry_budget"] = forms.IntegerField(
                min_value=1, max_value=20, label=old.label, help_text=old.help_text
            )
        # Django's "Ensure this value is greater than or equal to 0." names no field and no
        # meaning: each number says its own range and what empty means.
        rate = self.initial.get("max_requests_per_second")
        if isinstance(rate, float) and rate.is_integer():
            self.initial["max_requests_per_second"] = int(rate)  # 20 as typed, not 20.0
        for name, message in messages.NUMBER_RANGES.items():
            if name in self.fields:
                for code in ("min_value", "max_value", "invalid"):
                    self.fields[name].error_messages[code] = message
        if "owner" in self.fields:
            self.fields["owner"].queryset = people()
            self.fields["owner"].empty_label = "(nobody)"
            self.fields["owner"].label_from_instance = lambda user: user.get_username()
        if "token" in self.fields:
            self.fields["token"].required = False
            self.initial["token"] = ""

    def clean(self):
        data = super().clean()
        if self.cleaned_data.get("remove_token") and self.cleaned_data.get("token"):
            self.add_error("token", messages.TOKEN_TYPED_AND_REMOVED)
        return data

    def clean_read_share(self):
        # ASCII digits only: int() also reads "٣" (3), which no one types for a share on purpose.
        raw = str(self.data.get(self.add_prefix("read_share")) or "").strip()
        if raw and not raw.isascii():
            raise forms.ValidationError(messages.NUMBER_RANGES["read_share"])
        return self.cleaned_data.get("read_share")

    def _post_clean(self):
        # An empty token field means "keep it": put the stored value back before the model is
        # validated, unless the admin asked to remove it.
        if "token" in self.fields and not self.cleaned_data.get("token"):
            keep = "" if self.cleaned_data.get("remove_token") else self.instance.token
            self.cleaned_data["token"] = keep
        super()._post_clean()

    def changes(self) -> dict:
        """Field -> new value for what the admin changed (the service journals each)."""
        changed = {
            name: self.cleaned_data[name] for name in self.changed_data if name in self._meta.fields
        }
        if self.cleaned_data.get("remove_token"):
            changed["token"] = ""
        return changed
