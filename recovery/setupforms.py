"""The setup pages' forms: a queue's owner and periods, a category, a person's roles.

Each asks for a reason (the journal's) and gives recovery.setup only what was changed.
"""

from datetime import timedelta

from django import forms

from intake.models import Category
from recovery import messages
from recovery.durations import DurationField
from recovery.forms import ReasonForm, people
from recovery.setup import CATEGORY_FIELDS, ROLES

PERIOD_BOUNDS = (timedelta(minutes=1), timedelta(days=90))


def _person_choice(label):
    field = forms.ModelChoiceField(
        queryset=people(), required=False, empty_label="(nobody)", label=label
    )
    field.label_from_instance = lambda user: user.get_username()
    return field


class PolicyForm(ReasonForm):
    owner = _person_choice("Owner")
    backup_owner = _person_choice("Backup owner (overdue items go to them)")
    response_period = DurationField(
        label="Respond within", minimum=PERIOD_BOUNDS[0], maximum=PERIOD_BOUNDS[1]
    )
    review_cadence = DurationField(
        label="Someone opens this queue at least every",
        minimum=PERIOD_BOUNDS[0],
        maximum=PERIOD_BOUNDS[1],
    )

    def __init__(self, *args, policy=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = people()
        self.fields["backup_owner"].queryset = people()
        if policy is not None and not self.is_bound:
            for name in ("owner", "backup_owner", "response_period", "review_cadence"):
                self.fields[name].initial = getattr(policy, name)
        elif not self.is_bound:  # a new row starts from the model's defaults
            from recovery.models import ResponsePolicy

            self.fields["response_period"].initial = ResponsePolicy().response_period
            self.fields["review_cadence"].initial = ResponsePolicy().review_cadence

    def changes(self) -> dict:
        return {
            name: self.cleaned_data[name]
            for name in ("owner", "backup_owner", "response_period", "review_cadence")
        }


class CategoryForm(forms.ModelForm):
    reason = ReasonForm.base_fields["reason"]

    class Meta:
        model = Category
        fields = ("slug", *CATEGORY_FIELDS)
        labels = {
            "slug": "Key (used in the address and by the suggester)",
            "books_appointments": "Enquiries in it book appointments",
            "tells_resident": "Handover e-mails its residents at each step",
            "active": "Active (may be suggested and chosen)",
        }
        widgets = {
            "keywords": forms.Textarea(attrs={"rows": 4}),
            "description": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:  # enquiries name it by its key: it never changes
            self.fields["slug"].disabled = True

    def changes(self) -> dict:
        return {
            name: self.cleaned_data[name] for name in self.changed_data if name in CATEGORY_FIELDS
        }


class PersonForm(ReasonForm):
    roles = forms.MultipleChoiceField(
        choices=[(r, r) for r in ROLES],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        label="Roles",
    )
    may_recover = forms.BooleanField(
        required=False,
        label="May retry and complete failed writes by hand (ledger.recover_operation)",
        help_text="The owner of failed work needs it; the admin role has it already.",
    )

    email = forms.EmailField(
        required=False,
        max_length=254,
        label="E-mail address",
        help_text="Where Handover tells them what needs them. The journal records that it "
        "changed, never the address.",
    )

    def clean_email(self):
        from recovery.setup import clean_address

        try:
            return clean_address(self.cleaned_data["email"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_roles(self):
        roles = self.cleaned_data["roles"]
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise forms.ValidationError(messages.NO_SUCH_ROLE % {"role": sorted(unknown)[0]})
        return roles
