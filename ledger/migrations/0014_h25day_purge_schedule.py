"""The personal-data purge runs daily (django-q2 schedule ``ledger.purge_personal_data``), and
each run is kept (PurgeRun) for the dashboard. Retention: PERSONAL_DATA_RETENTION_DAYS."""

from django.db import migrations, models

NAME = "ledger.purge_personal_data"


def create_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "ledger.purge.scheduled_purge",
            "schedule_type": "D",  # daily, from the first run
            "repeats": -1,
        },
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0013_h25day_erasable_reasons"),
        ("django_q", "0018_task_success_index"),
    ]
    operations = [
        migrations.CreateModel(
            name="PurgeRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("started_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField()),
                ("ran_by", models.CharField(max_length=100)),
                ("retention_days", models.PositiveIntegerField()),
                ("candidates", models.PositiveIntegerField(default=0)),
                ("redacted", models.PositiveIntegerField(default=0)),
                ("skipped", models.PositiveIntegerField(default=0)),
                ("reasons_erased", models.PositiveIntegerField(default=0)),
            ],
            options={"ordering": ["-started_at"]},
        ),
        migrations.RunPython(create_schedule, drop_schedule),
    ]
