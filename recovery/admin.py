from datetime import timedelta

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import models

from recovery import durations
from recovery.models import Escalation, QueueVisit, ResponsePolicy
from recovery.people_admin import PersonAdmin


@admin.register(ResponsePolicy)
class ResponsePolicyAdmin(admin.ModelAdmin):
    list_display = (
        "queue",
        "integration",
        "owner",
        "backup_owner",
        "respond_within",
        "open_at_least_every",
    )
    list_filter = ("queue", "integration")
    # Typed and shown as people write them ("4 h", "1 d 12 h"), not "1 day, 0:00:00".
    formfield_overrides = {
        models.DurationField: {
            "form_class": durations.DurationField,
            "minimum": timedelta(minutes=1),
        }
    }

    @admin.display(description="respond within", ordering="response_period")
    def respond_within(self, policy):
        return durations.format_duration(policy.response_period)

    @admin.display(description="open at least every", ordering="review_cadence")
    def open_at_least_every(self, policy):
        return durations.format_duration(policy.review_cadence)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(QueueVisit)
class QueueVisitAdmin(ReadOnlyAdmin):
    list_display = ("queue", "user", "opened_at")
    list_filter = ("queue",)


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = ("subject_type", "subject_id", "queue", "escalated_to", "at")
    list_filter = ("queue",)


# People: the console's rules in Django's admin too (recovery/people_admin.py).
admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), PersonAdmin)
