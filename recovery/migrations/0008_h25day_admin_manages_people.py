from django.contrib.auth.management import create_permissions
from django.db import migrations

# The admin role manages people: the console's people page and Django's user pages (it had a
# 403 there, so only a superuser could grant a role or the recover permission).
PEOPLE_PERMISSIONS = ["view_user", "change_user", "add_user", "view_group"]


def grant(apps, schema_editor):
    app_config = apps.get_app_config("auth")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="admin"):
        group.permissions.add(
            *Permission.objects.filter(
                content_type__app_label="auth", codename__in=PEOPLE_PERMISSIONS
            )
        )


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="admin"):
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="auth", codename__in=PEOPLE_PERMISSIONS
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("recovery", "0007_h26a_receipt_failing_queue"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]
    operations = [migrations.RunPython(grant, revoke)]
