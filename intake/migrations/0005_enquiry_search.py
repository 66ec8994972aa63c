"""The console's enquiry search: a stored tsvector PostgreSQL computes from name, e-mail,
subject and message (intake.models.search_document), and its GIN index.

Adding a stored generated column rewrites intake_enquiry under an exclusive lock: intake waits
while it runs (the whole migration took 72 s on 200,000 enquiries on a busy 2-core machine,
docs/benchmarks.md; plan a quiet window for a large table). The index is then built
CONCURRENTLY, so events keep arriving while it builds.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("intake", "0004_enquiry_receipt_pending"),
    ]

    operations = [
        migrations.AddField(
            model_name="enquiry",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=SearchVector("name", "email", "subject", "message", config="simple"),
                output_field=SearchVectorField(),
            ),
        ),
        AddIndexConcurrently(
            model_name="enquiry",
            index=GinIndex(fields=["search_vector"], name="enquiry_search"),
        ),
    ]
