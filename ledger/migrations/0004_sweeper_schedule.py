"""The sweeper's django-q2 schedule: every minute, and never a burst of catch-up runs.

Q_CLUSTER sets catch_up off, so a cluster that was down for an hour runs the sweep once, not
sixty times. The sweep also runs whenever a worker starts (ledger.apps).
"""

from django.db import migrations

NAME = "ledger.sweep"


def create_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.get_or_create(
        name=NAME,
        defaults={
            "func": "ledger.tasks.sweep",
            "schedule_type": "I",  # minutes
            "minutes": 1,
            "repeats": -1,
        },
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_operation_lease_hold"),
        ("django_q", "0018_task_success_index"),
    ]
    operations = [migrations.RunPython(create_schedule, drop_schedule)]
