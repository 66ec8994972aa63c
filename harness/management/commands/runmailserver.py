"""`manage.py runmailserver`: the local SMTP relay `make run` starts (harness.mailserver), which
keeps every message it receives as an .eml file, so a newcomer can read what would have gone out.
"""

from django.conf import settings
from django.core.management.base import BaseCommand

from harness.mailserver.server import main


class Command(BaseCommand):
    help = "Run a local SMTP server that keeps every message it receives (var/mail/*.eml)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=None, help="default: EMAIL_PORT")
        parser.add_argument("--control-port", type=int, default=0)
        parser.add_argument("--dir", default=None, help="default: var/mail")

    def handle(self, *args, host, port, control_port, dir, **options):
        folder = dir or str(settings.BASE_DIR / "var" / "mail")
        argv = ["--host", host, "--port", str(port or settings.EMAIL_PORT), "--dir", folder]
        if control_port:
            argv += ["--control-port", str(control_port)]
        main(argv)
