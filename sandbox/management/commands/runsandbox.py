from django.core.management.base import BaseCommand

from sandbox.cli import add_serve_arguments
from sandbox.server import serve


class Command(BaseCommand):
    help = "Run the sandbox (fake CRM, notifications, documents, appointments) under waitress."

    # The sandbox touches neither the project's database nor its models.
    requires_system_checks = []

    def add_arguments(self, parser):
        add_serve_arguments(parser)

    def handle(self, *args, **options):
        serve(
            host=options["host"],
            port=options["port"],
            data=options["data"],
            token=options["token"],
            threads=options["threads"],
        )
