"""The queue page's enquiry index (intake.models.Enquiry.Meta), built without locking intake:
CREATE INDEX CONCURRENTLY lets events keep arriving while it builds on a large table."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("intake", "0002_suggestion_applied_revision"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="enquiry",
            index=models.Index(
                condition=models.Q(
                    ("state__in", ["needs_information", "submission_unknown", "ready_for_review"])
                ),
                fields=["state", "state_changed_at"],
                name="enquiry_queue",
            ),
        ),
    ]
