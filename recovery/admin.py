from django.contrib import admin

from recovery.models import Escalation, QueueVisit, ResponsePolicy


@admin.register(ResponsePolicy)
class ResponsePolicyAdmin(admin.ModelAdmin):
    list_display = (
        "queue",
        "integration",
        "owner",
        "backup_owner",
        "response_period",
        "review_cadence",
    )
    list_filter = ("queue", "integration")


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
