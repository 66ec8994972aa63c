"""Operator-action forms: every one asks for a reason, which is written to the journal."""

from django import forms
from django.contrib.auth import get_user_model

from intake.models import Category
from intake.visible import has_visible_text

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
        kwargs.setdefault(
            "error_messages", {"required": "Give a reason: it is written to the journal."}
        )
        super().__init__(**kwargs)

    def validate(self, value):
        super().validate(value)
        if value and not has_visible_text(value):
            raise forms.ValidationError(
                "Give a reason in words: this one has only spaces or invisible characters.",
                code="invisible",
            )


class ReasonForm(forms.Form):
    reason = ReasonField()


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
    operations = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, backlog=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["operations"].choices = [(str(op.pk), str(op.pk)) for op in backlog]
