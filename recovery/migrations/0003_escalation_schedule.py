from django.db import migrations

SCHEDULE_NAME = "recovery.escalate_overdue"


def create_schedule(apps, schema_editor):
    # Every five minutes: overdue queue items are handed to their backup owner.
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.get_or_create(
        name=SCHEDULE_NAME,
        defaults={
            "func": "recovery.tasks.escalate_overdue",
            "schedule_type": "I",  # Schedule.MINUTES
            "minutes": 5,
            "repeats": -1,
        },
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=SCHEDULE_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("recovery", "0002_policies_visits"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
