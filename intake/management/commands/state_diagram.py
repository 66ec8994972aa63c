"""Write (or check) the Mermaid state diagrams in docs/ from the transition methods."""

from django.core.management.base import BaseCommand, CommandError

from intake.diagram import expected_files


class Command(BaseCommand):
    help = "Regenerate docs/state-diagram.md (and the diagram in docs/intake.md) from the code."

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--write", action="store_true", help="write the files")
        group.add_argument("--check", action="store_true", help="fail if the files are stale")

    def handle(self, *args, **options):
        stale = []
        for path, text in expected_files().items():
            current = path.read_text() if path.exists() else ""
            if current == text:
                continue
            stale.append(path)
            if options["write"]:
                path.write_text(text)
                self.stdout.write(f"wrote {path}")
        if options["check"] and stale:
            names = ", ".join(str(p) for p in stale)
            raise CommandError(f"Stale: {names}. Run: python manage.py state_diagram --write")
        if not options["write"] and not options["check"]:
            for path, text in expected_files().items():
                if path.name == "state-diagram.md":
                    self.stdout.write(text)
