from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLE_PERMISSIONS = {
    "coordinator": [
        "ledger.triage_operation",
        "ledger.view_operation",
        "intake.view_enquiry",
        "intake.complete_enquiry",
    ],
    "reviewer": [
        "intake.view_enquiry",
        "intake.review_enquiry",
        "intake.approve_revision",
        "ledger.view_operation",
    ],
    "admin": [
        "intake.view_enquiry",
        "intake.review_enquiry",
        "intake.approve_revision",
        "intake.complete_enquiry",
        "intake.add_category",
        "intake.change_category",
        "intake.view_category",
        "ledger.view_operation",
        "ledger.triage_operation",
        "ledger.recover_operation",
        "ledger.pause_integration",
        "ledger.view_integration",
        "ledger.change_integration",
    ],
}


def create_roles(apps, schema_editor):
    # Permissions are normally made after all migrations; make them now so groups can hold them.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codes in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        for code in codes:
            app_label, codename = code.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


def drop_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    # A frozen copy of the roles as they were when this migration was written; later changes to
    # recovery/roles.py arrive in their own migrations.
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("intake", "0001_initial"),
        ("ledger", "0002_journal_append_only"),
    ]
    operations = [migrations.RunPython(create_roles, drop_roles)]
