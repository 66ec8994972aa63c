"""A person's reason for a journal row is kept beside it (ErasableReason), so it can be erased
after the retention period while the append-only row stays as it was (docs/reliability.md).

The journal's ``reason`` column is unchanged: the model calls it ``kept_reason`` now (a
system's reason) and reads a person's from the new table. Only the model state is renamed:
nothing is altered in the journal table, whose trigger refuses every UPDATE and DELETE.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0012_h28cal_caldav_max_age")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField("journalentry", "reason", "kept_reason"),
                migrations.AlterField(
                    "journalentry",
                    "kept_reason",
                    models.TextField(blank=True, db_column="reason"),
                ),
            ],
            database_operations=[],
        ),
        migrations.CreateModel(
            name="ErasableReason",
            fields=[
                (
                    "entry",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        primary_key=True,
                        related_name="erasable",
                        serialize=False,
                        to="ledger.journalentry",
                    ),
                ),
                ("text", models.TextField(blank=True)),
                ("erased_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
