from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError

from storyteller import doctor


class Command(BaseCommand):
    help = ("Check what Storyteller needs: which narrator would play, whether the built-in narrator starts and "
            "answers, the processor's features and the data folder. One line each; a failed one says what to do.")

    def handle(self, *args, **options):
        findings = async_to_sync(doctor.acheck)()
        for finding in findings:
            self.stdout.write(f"{'ok ' if finding.ok else 'FIX'}  {finding.topic}: {finding.text}")
        failed = [finding.topic for finding in findings if not finding.ok]
        if failed:
            raise CommandError(f"{len(failed)} of {len(findings)} checks need attention: {', '.join(failed)}.")
