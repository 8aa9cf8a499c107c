from django.core.management.base import BaseCommand

from storyteller import signin


class Command(BaseCommand):
    help = "Print a one-time sign-in link for the local owner (created on first run)."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")

    def handle(self, *args, base_url, **options):
        self.stdout.write(signin.login_link(signin.owner(), base_url))
