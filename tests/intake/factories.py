"""factory-boy factories for intake (other apps' tests import them).

``EnquiryFactory(state="approved")`` walks the enquiry there through its real transitions, with
actors allowed to fire each one, so every state it makes is reachable and journalled (one row per
transition). The default is ``validated``, where every real enquiry starts after receipt.
"""

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from factory.django import DjangoModelFactory

from intake.models import Category, Enquiry, Revision

SYSTEM = "system:factory"
MODEL = "model:factory@1"

# How to reach each state from "received": (transition, who fires it).
PATHS = {
    "received": [],
    "validated": [("validate", SYSTEM)],
    "ready_for_review": [("validate", SYSTEM), ("mark_ready_for_review", MODEL)],
    "needs_information": [("validate", SYSTEM), ("request_information", "reviewer")],
    "rejected": [("validate", SYSTEM), ("reject", "reviewer")],
}
PATHS["approved"] = [*PATHS["ready_for_review"], ("approve", "reviewer")]
PATHS["submitted"] = [*PATHS["approved"], ("submit", SYSTEM)]
PATHS["submission_unknown"] = [*PATHS["submitted"], ("mark_submission_unknown", SYSTEM)]
PATHS["confirmed"] = [*PATHS["submitted"], ("confirm", SYSTEM)]

FACTORY_PERMISSIONS = ("review_enquiry", "approve_revision", "complete_enquiry")


def factory_reviewer():
    """A user allowed every intake action, who edited nothing (so may approve anything).

    Permissions are granted directly, not through the role groups: a transactional test's flush
    empties auth_group, and this must keep working after one.
    """
    user, created = get_user_model().objects.get_or_create(username="factory-reviewer")
    if created:
        user.user_permissions.add(
            *Permission.objects.filter(
                content_type__app_label="intake", codename__in=FACTORY_PERMISSIONS
            )
        )
    return get_user_model().objects.get(pk=user.pk)  # fresh: no stale permission cache


def drive(enquiry: Enquiry, state: str, *, person=None) -> Enquiry:
    """Move a ``received`` enquiry to ``state`` through its transitions; returns it saved.

    ``person`` fires the people's steps (approve, reject, request information); by default a
    reviewer made for the purpose.
    """
    if state not in PATHS:
        raise ValueError(f"No path to {state!r}; known: {', '.join(PATHS)}")
    for name, who in PATHS[state]:
        actor = (person or factory_reviewer()) if who == "reviewer" else who
        with transaction.atomic():
            # A transition the resident is told about carries the words written for them.
            evidence = {"resident_message": f"Words written for the resident ({name})."}
            getattr(enquiry, name)(actor=actor, reason=f"factory: {name}", evidence=evidence)
            enquiry.save()
    return enquiry


class CategoryFactory(DjangoModelFactory):
    class Meta:
        model = Category
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"category-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").capitalize())
    description = ""
    keywords = ""
    active = True
    books_appointments = False

    class Params:
        retired = factory.Trait(active=False)


class RevisionFactory(DjangoModelFactory):
    class Meta:
        model = Revision

    enquiry = factory.SubFactory("tests.intake.factories.EnquiryFactory")
    number = 1
    origin = "intake"
    category = None
    fields = factory.LazyAttribute(
        lambda o: {
            "name": o.enquiry.name,
            "email": o.enquiry.email,
            "phone": o.enquiry.phone,
            "subject": o.enquiry.subject,
            "message": o.enquiry.message,
            "service_hint": o.enquiry.service_hint,
            "category": o.category.slug if o.category else None,
        }
    )


class EnquiryFactory(DjangoModelFactory):
    """An enquiry with revision 1, walked to ``state`` (default ``validated``)."""

    class Meta:
        model = Enquiry
        skip_postgeneration_save = True

    source = "website"
    workflow_version = "test"
    name = factory.Sequence(lambda n: f"Resident {n}")
    email = factory.Sequence(lambda n: f"resident{n}@example.org")
    phone = ""
    subject = ""
    message = "My bin was not emptied this week."
    service_hint = ""
    consent = True

    first_revision = factory.RelatedFactory(
        RevisionFactory, factory_related_name="enquiry", number=1
    )

    @factory.post_generation
    def state(obj, create, extracted, **kwargs):
        if not create:
            return
        drive(obj, extracted or "validated")
