"""The words residents receive, as versioned templates admins edit (ledger.wording), with
version 1 of each message: the words Handover ships."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

# The words shipped with Handover, as they were when this migration was written (version 1
# of each message; ledger.wording.KINDS holds the same and makes them if a database has none).
SHIPPED = {
    "enquiry_received": (
        "We have received your enquiry {reference}",
        (
            "Dear {name},\n"
            "\n"
            "Thank you for contacting us. We have received your enquiry and given it the reference {reference}.\n"
            "\n"
            "Nobody has read it yet: it is waiting for a member of our team. We will write to you again if we need anything more from you, and when it has been passed on to the service that deals with it.\n"
            "\n"
            "You can see where your enquiry has got to here: {answer_link}\n"
            "\n"
            "Please quote {reference} if you contact us about this enquiry.\n"
            "\n"
            "{how_to_reply}"
        ),
    ),
    "needs_information": (
        "We need more information about your enquiry {reference}",
        (
            "Dear {name},\n"
            "\n"
            "Thank you for your enquiry {reference}. Before we can take it further, we need more information from you:\n"
            "\n"
            "{message_to_resident}\n"
            "\n"
            "You can send it to us here: {answer_link}\n"
            "\n"
            "Your enquiry will wait with us until we hear from you. Please quote {reference} whenever you contact us about it.\n"
            "\n"
            "{how_to_reply}"
        ),
    ),
    "passed_on": (
        "Your enquiry {reference} has been passed on",
        (
            "Dear {name},\n"
            "\n"
            "Your enquiry {reference} has been checked and passed on to the service that deals with it.\n"
            "\n"
            "Their reference for it is {destination_reference}.\n"
            "\n"
            "What happens next: the service will contact you if they need anything more, and when there is news. You do not need to do anything now.\n"
            "\n"
            "You can see where your enquiry has got to here: {answer_link}\n"
            "\n"
            "Please quote {reference} if you contact us about this enquiry.\n"
            "\n"
            "{how_to_reply}"
        ),
    ),
    "not_taken_forward": (
        "About your enquiry {reference}",
        (
            "Dear {name},\n"
            "\n"
            "Thank you for your enquiry {reference}. We have read it, and we will not be taking it forward:\n"
            "\n"
            "{message_to_resident}\n"
            "\n"
            "If you think we have misunderstood, you are welcome to contact us again, quoting {reference}.\n"
            "\n"
            "{how_to_reply}"
        ),
    ),
    "closed": (
        "Your enquiry {reference} has been closed",
        (
            "Dear {name},\n"
            "\n"
            "We have closed your enquiry {reference} without passing it on:\n"
            "\n"
            "{message_to_resident}\n"
            "\n"
            "If you still need help, you are welcome to contact us again, quoting {reference}.\n"
            "\n"
            "{how_to_reply}"
        ),
    ),
}


def ship(apps, schema_editor):
    MessageTemplate = apps.get_model("ledger", "MessageTemplate")
    for kind, (subject, body) in SHIPPED.items():
        MessageTemplate.objects.get_or_create(
            kind=kind, version=1, defaults={"subject": subject, "body": body}
        )


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0020_integration_read_share"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="MessageTemplate",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=40)),
                ("version", models.PositiveIntegerField()),
                ("subject", models.CharField(max_length=200)),
                ("body", models.TextField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["kind", "-version"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("kind", "version"), name="message_template_version"
                    )
                ],
            },
        ),
        migrations.RunPython(ship, migrations.RunPython.noop),
    ]
