"""Demo data for `make run`: users per role, categories, integrations, enquiries in every state.

Demo databases only: it refuses to run where users other than its own already exist.
"""

import os
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from intake.models import Category, Enquiry
from ledger.integrations import ensure_integrations
from ledger.models import Integration

DEMO_USERS = {"coordinator": "coordinator", "reviewer": "reviewer", "admin": "admin"}
# Where the demo's people are told what needs them (recovery.notices): `make run`'s local relay
# keeps every message in var/mail/, so the first notices are there within the first interval.
DEMO_DOMAIN = "council.example"

CATEGORIES = [
    ("website", "Website and online services", "website\nslow\npage\nlogin\nonline\nform", False),
    ("repairs", "Housing repairs", "repair\nleak\nboiler\nheating\ndamp\nbroken", True),
    ("waste", "Bins and waste", "bin\nbins\nwaste\nrecycling\ncollection\nrubbish", False),
    ("parking", "Parking permits (retired)", "parking\npermit", False),
]


class Command(BaseCommand):
    help = "Create demo users, categories, integrations and enquiries (demo databases only)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--make-records",
            action="store_true",
            help="make the CRM records the stories name at the CRM integration's destination "
            "(which must answer; make run starts the sandbox first); without it the stories name "
            "records no destination holds",
        )

    def handle(self, *args, make_records=False, **options):
        users = get_user_model().objects
        if users.exclude(username__in=DEMO_USERS).exists():
            raise CommandError("This database has real users; seed_demo is for demo databases.")
        password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
        with transaction.atomic():
            for username, role in DEMO_USERS.items():
                user, _ = users.get_or_create(username=username)
                user.set_password(password)
                user.email = f"{username}@{DEMO_DOMAIN}"
                user.is_staff = role == "admin"
                user.is_superuser = role == "admin"
                user.save()
                user.groups.add(Group.objects.get(name=role))
            for slug, name, keywords, books in CATEGORIES:
                Category.objects.update_or_create(
                    slug=slug,
                    defaults={
                        "name": name,
                        "keywords": keywords,
                        "books_appointments": books,
                        "active": slug != "parking",
                    },
                )
            ensure_integrations()
            # The admin owns every integration (told when one refuses Handover's credentials);
            # readiness names an integration nobody owns (handover.W107).
            Integration.objects.filter(owner__isnull=True).update(owner=users.get(username="admin"))
            self.seed_enquiries(make_records)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        for username in DEMO_USERS:
            self.stdout.write(f"  login: {username} / {password}")

    def seed_enquiries(self, make_records):
        """Grows with the console: at least one enquiry in every state, TEST-001 among them."""
        from recovery.demo import seed_work
        from recovery.demo.records import DestinationUnavailable, at_destination

        if Enquiry.objects.filter(reference="TEST-001").exists():
            return
        try:
            seed_work(make_records=at_destination if make_records else None)
        except DestinationUnavailable as exc:
            raise CommandError(str(exc)) from exc
