"""People in Django's admin: the same rules as the console's People page.

- Only a superuser may grant or remove superuser or staff status (for anyone else both fields
  are read-only; staff status follows the admin role, as on the People page), and only a
  superuser may change a superuser's account (its password included).
- Every change to a person's roles or flags (groups, permissions, active, staff, superuser) needs
  a reason and is one journal row (``recovery.person.roles``, as the People page writes), in the
  admin's own transaction.
- A change that would leave no active member of the admin role is refused, saying why; people are
  deactivated (with a reason), never deleted here: the journal names them.
"""

from __future__ import annotations

from django import forms
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.core.exceptions import ValidationError

from intake.visible import has_visible_text
from intake.workflow import REASON_REQUIRED
from recovery import setup

FLAGS = ("is_active", "is_staff", "is_superuser")
SUPERUSER_ONLY = ("is_superuser", "is_staff")


def _groups(groups) -> list[str]:
    return sorted(g.name for g in groups)


def _permissions(permissions) -> list[str]:
    return sorted(f"{p.content_type.app_label}.{p.codename}" for p in permissions)


def person_flags(person) -> dict:
    """What the journal compares: a person's groups, permissions and flags."""
    return {
        "groups": _groups(person.groups.all()),
        "permissions": _permissions(person.user_permissions.select_related("content_type")),
        **{flag: getattr(person, flag) for flag in FLAGS},
    }


def flag_diff(before: dict, after: dict) -> dict:
    return {
        key: {"from": before[key], "to": after[key]} for key in before if before[key] != after[key]
    }


class PersonChangeForm(UserChangeForm):
    reason = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=(
            "Why you change this person's groups, permissions, or active, staff or superuser "
            "status: written to the journal. Needed for those changes only."
        ),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.before = person_flags(self.instance)

    def _after(self) -> dict:
        """The flags as this form would leave them (a read-only field keeps its value)."""
        data, after = self.cleaned_data, dict(self.before)
        if "groups" in data:
            after["groups"] = _groups(data["groups"])
        if "user_permissions" in data:
            after["permissions"] = _permissions(data["user_permissions"])
        after.update({flag: data[flag] for flag in FLAGS if flag in data})
        return after

    def clean(self):
        cleaned = super().clean()
        after = self._after()
        if not flag_diff(self.before, after):
            return cleaned
        if not has_visible_text(cleaned.get("reason")):
            self.add_error("reason", REASON_REQUIRED)
        try:
            setup.refuse_losing_last_admin(
                self.instance,
                stays_admin=setup.ADMIN_ROLE in after["groups"] and after["is_active"],
            )
        except setup.LastAdmin as exc:
            raise ValidationError(str(exc)) from None
        return cleaned


class PersonAdmin(UserAdmin):
    form = PersonChangeForm
    fieldsets = (
        *UserAdmin.fieldsets,
        ("Why (written to the journal)", {"fields": ("reason",)}),
    )

    def get_readonly_fields(self, request, obj=None):
        fields = tuple(super().get_readonly_fields(request, obj))
        if request.user.is_superuser:
            return fields
        return fields + SUPERUSER_ONLY

    def has_change_permission(self, request, obj=None):
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False  # deactivate instead, with a reason: the journal names people

    def save_model(self, request, obj, form, change):
        if change and not request.user.is_superuser:
            # Staff status follows the admin role, as on the People page (recovery.setup).
            admin_after = setup.ADMIN_ROLE in _groups(form.cleaned_data.get("groups", []))
            if admin_after != (setup.ADMIN_ROLE in form.before["groups"]):
                obj.is_staff = admin_after or obj.is_superuser
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if not change:
            return
        diff = flag_diff(form.before, person_flags(form.instance))
        if diff:
            setup.record_person_change(
                form.instance,
                actor=request.user,
                reason=form.cleaned_data["reason"].strip(),
                diff=diff,
            )
