"""Enquiry.receipt_pending: the receipt's work is taken up by a worker (ledger.receipt).

The column's constant default makes adding it a catalogue change (PostgreSQL 11+); existing
enquiries had their receipt work proposed in intake's transaction, so False is right for them.
The partial index holds only pending receipts and is built without locking intake.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("intake", "0003_enquiry_queue_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="enquiry",
            name="receipt_pending",
            field=models.BooleanField(default=False),
        ),
        AddIndexConcurrently(
            model_name="enquiry",
            index=models.Index(
                condition=models.Q(("receipt_pending", True)),
                fields=["created_at"],
                name="enquiry_receipt_pending",
            ),
        ),
    ]
