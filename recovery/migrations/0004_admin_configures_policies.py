from django.contrib.auth.management import create_permissions
from django.db import migrations

ADMIN_PERMISSIONS = [
    "add_responsepolicy",
    "change_responsepolicy",
    "delete_responsepolicy",
    "view_responsepolicy",
    "view_queuevisit",
    "view_escalation",
]


def grant(apps, schema_editor):
    # Admins configure owners and response periods (README, "Setting up"; docs/roles.md).
    app_config = apps.get_app_config("recovery")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="admin")
    group.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="recovery", codename__in=ADMIN_PERMISSIONS
        )
    )


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="admin"):
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="recovery", codename__in=ADMIN_PERMISSIONS
            )
        )


class Migration(migrations.Migration):
    dependencies = [("recovery", "0003_escalation_schedule")]
    operations = [migrations.RunPython(grant, revoke)]
