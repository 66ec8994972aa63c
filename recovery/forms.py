"""Operator-action forms: every one asks for a reason, which is written to the journal."""

from django import forms
from django.contrib.auth import get_user_model

from intake.models import Category

ROLE_GROUPS = ("coordinator", "reviewer", "admin")


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Why? (written to the journal)"}),
        error_messages={"required": "Give a reason: it is written to the journal."},
    )


class CompleteByHandForm(ReasonForm):
    external_id = forms.CharField(
        max_length=200,
        strip=True,
        label="Reference at the destination",
        error_messages={"required": "Give the record's reference at the destination."},
    )


def people():
    return (
        get_user_model()
        .objects.filter(is_active=True, groups__name__in=ROLE_GROUPS)
        .distinct()
        .order_by("username")
    )


class ReassignForm(ReasonForm):
    owner = forms.ModelChoiceField(queryset=None, required=False, empty_label="(nobody)")

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

    def changed_fields(self) -> dict:
        """Fields sent and different from the current revision (absent means unchanged)."""
        data = self.cleaned_data
        return {
            name: data[name]
            for name in self.FIELDS
            if name in self.data
            and (data.get(name) or "") != (self.revision_fields.get(name) or "")
        }


class ReleaseForm(ReasonForm):
    """The held writes an admin chose, and whether they saw the summary and confirmed it.

    No choice releases nothing: "release all" is ticking every row (the page's "select all"),
    never the default of an empty form.
    """

    operations = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "required": "Tick the writes to release: nothing is released unless it is chosen.",
            "invalid_choice": "A chosen write is no longer held (released or cancelled since): "
            "look at the backlog again.",
        },
    )
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, backlog=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["operations"].choices = [(str(op.pk), str(op.pk)) for op in backlog]
