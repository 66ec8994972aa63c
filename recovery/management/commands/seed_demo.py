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

DEMO_USERS = {"coordinator": "coordinator", "reviewer": "reviewer", "admin": "admin"}

CATEGORIES = [
    ("website", "Website and online services", "website\nslow\npage\nlogin\nonline\nform", False),
    ("repairs", "Housing repairs", "repair\nleak\nboiler\nheating\ndamp\nbroken", True),
    ("waste", "Bins and waste", "bin\nbins\nwaste\nrecycling\ncollection\nrubbish", False),
    ("parking", "Parking permits (retired)", "parking\npermit", False),
]


class Command(BaseCommand):
    help = "Create demo users, categories, integrations and enquiries (demo databases only)."

    def handle(self, *args, **options):
        users = get_user_model().objects
        if users.exclude(username__in=DEMO_USERS).exists():
            raise CommandError("This database has real users; seed_demo is for demo databases.")
        password = os.environ.get("DEMO_PASSWORD") or secrets.token_urlsafe(9)
        with transaction.atomic():
            for username, role in DEMO_USERS.items():
                user, _ = users.get_or_create(username=username)
                user.set_password(password)
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
            self.seed_enquiries()
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        for username in DEMO_USERS:
            self.stdout.write(f"  login: {username} / {password}")

    def seed_enquiries(self):
        """Grows with the console: at least one enquiry in every state, TEST-001 among them."""
        from recovery.demo import seed_work

        if Enquiry.objects.filter(reference="TEST-001").exists():
            return
        seed_work()
