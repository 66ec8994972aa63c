"""`python manage.py provision FILE [--check] [--as USERNAME]`: set an install up from a file.

The file (TOML; docs/provision.toml is the example) names people and their roles, categories,
queue owners and response periods, and integration owners. Every change is journalled with the
file's reason, by ``system:provision`` or the person named with ``--as``. Running it twice
changes nothing the second time. ``--check`` says what would change and changes nothing; its
exit status is 1 when something would.
"""

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from ledger.services import ActionRefused
from recovery import provision


class _DryRun(Exception):
    pass


class Command(BaseCommand):
    help = "Set up people, roles, categories, queue owners and periods from a reviewed file."

    def add_arguments(self, parser):
        parser.add_argument("file", help="a TOML file such as docs/provision.toml")
        parser.add_argument(
            "--check",
            action="store_true",
            help="say what would change and change nothing (exit status 1 if anything would)",
        )
        parser.add_argument(
            "--as",
            dest="username",
            default="",
            help="journal the changes as this person (who needs the permissions), "
            f"not {provision.ACTOR}",
        )

    def handle(self, *args, file, check, username, **options):
        actor = provision.ACTOR
        if username:
            actor = get_user_model().objects.filter(username=username, is_active=True).first()
            if actor is None:
                raise CommandError(f"--as {username}: no active person by that name")
        try:
            plan = provision.read(file)
            said = []
            try:
                with transaction.atomic():
                    said = provision.apply(plan, actor=actor)
                    if check:
                        raise _DryRun
            except _DryRun:
                pass
        except (provision.ProvisionError, PermissionDenied, ActionRefused) as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
            raise CommandError(str(exc)) from None
        verb = "would change" if check else "changed"
        for line in said:
            self.stdout.write(f"  {verb}: {line}")
        if not said:
            self.stdout.write(
                self.style.SUCCESS("Nothing to change: the install says what the file says.")
            )
        elif check:
            self.stdout.write(self.style.WARNING(f"{len(said)} change(s) would be made (--check)."))
            raise SystemExit(1)
        else:
            self.stdout.write(self.style.SUCCESS(f"{len(said)} change(s) made and journalled."))
