"""Admin: categories are configured here; enquiries, events and suggestions are read-only.

An enquiry's state moves only through its transition methods (with an actor and a journal row),
so the admin shows it and never edits it.
"""

from django.contrib import admin

from intake.models import Category, Enquiry, EventConflict, IntakeEvent, Revision, Suggestion


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "active", "books_appointments")
    list_filter = ("active", "books_appointments")
    search_fields = ("slug", "name", "keywords")
    fieldsets = (
        (None, {"fields": ("slug", "name", "description", "books_appointments")}),
        (
            "Suggestions",
            {
                "fields": ("active", "keywords"),
                "description": "Only active categories can be suggested or routed to. Retire a "
                "category instead of deleting it: earlier enquiries keep pointing at it.",
            },
        ),
    )

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class RevisionInline(ReadOnlyInline):
    model = Revision
    fields = ("number", "origin", "category", "fields", "created_by", "approved_by", "approved_at")
    readonly_fields = fields


class SuggestionInline(ReadOnlyInline):
    model = Suggestion
    fields = ("revision", "provider", "model", "label", "confidence", "validation")
    readonly_fields = fields


@admin.register(Enquiry)
class EnquiryAdmin(ReadOnlyAdmin):
    list_display = ("reference", "state", "source", "category", "owner", "created_at")
    list_filter = ("state", "source", "category")
    search_fields = ("reference", "email")
    date_hierarchy = "created_at"
    inlines = [RevisionInline, SuggestionInline]


class EventConflictInline(ReadOnlyInline):
    model = EventConflict
    fields = ("received_at", "body_sha256", "body")
    readonly_fields = fields


@admin.register(IntakeEvent)
class IntakeEventAdmin(ReadOnlyAdmin):
    list_display = ("source", "event_id", "enquiry", "deliveries", "received_at")
    list_filter = ("source",)
    search_fields = ("event_id", "enquiry__reference")
    inlines = [EventConflictInline]


@admin.register(Suggestion)
class SuggestionAdmin(ReadOnlyAdmin):
    list_display = ("enquiry", "revision", "provider", "model", "label", "confidence", "validation")
    list_filter = ("provider", "label")
    search_fields = ("enquiry__reference",)
