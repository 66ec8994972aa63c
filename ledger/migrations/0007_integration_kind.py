from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0006_operation_operation_queue"),
    ]

    # Existing rows speak the contract the sandbox implements: the default, "handover".
    operations = [
        migrations.AddField(
            model_name="integration",
            name="kind",
            field=models.CharField(
                choices=[
                    ("handover", "Handover contract (docs/integrations.md; the sandbox)"),
                    ("bottlecrm", "BottleCRM (cases)"),
                ],
                default="handover",
                help_text="The API the destination speaks (docs/connectors.md).",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="integration",
            name="settle_delay_seconds",
            field=models.FloatField(
                default=0.0,
                help_text="How long the destination's search may lag its writes; never less "
                "than the kind's own minimum.",
            ),
        ),
        migrations.AlterField(
            model_name="integration",
            name="supports_idempotency_key",
            field=models.BooleanField(
                default=True, help_text="Ignored where the kind's API has no idempotency key."
            ),
        ),
        migrations.AlterField(
            model_name="integration",
            name="supports_lookup",
            field=models.BooleanField(
                default=True,
                help_text="Off: an uncertain write waits for a person instead of a look-up.",
            ),
        ),
    ]
