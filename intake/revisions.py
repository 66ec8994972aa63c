"""Making revision N+1 of an enquiry: the one place it is written, whoever makes it (a
reviewer's edit, intake.services.revise_enquiry; an applied category suggestion,
intake.classification), and the ledger told (intake.signals.revision_created) in the same
transaction. Revision 1 is the received event's, written with the enquiry."""

from intake import signals
from intake.models import Enquiry, Revision


def add_revision(
    enquiry: Enquiry,
    previous: Revision,
    *,
    fields: dict,
    category,
    origin: str,
    note: str,
    actor,
    reason: str,
    created_by=None,
) -> Revision:
    """Call inside the transaction that holds the enquiry's lock; ``previous`` is its current
    revision."""
    revision = Revision.objects.create(
        enquiry=enquiry,
        number=previous.number + 1,
        fields=fields,
        category=category,
        origin=origin,
        note=note,
        created_by=created_by,
    )
    enquiry.current_revision = revision.number
    enquiry.category = category
    enquiry.save()
    signals.revision_created.send(
        sender=Enquiry,
        enquiry=enquiry,
        revision=revision,
        previous_revision=previous.number,
        actor=actor,
        reason=reason,
    )
    return revision
