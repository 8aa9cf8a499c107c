"""manage.py world new | lint | export: start a campaign from a world file, check one, write one out."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from campaigns import lineage, worldfile
from campaigns.state import state_at
from storyteller import scripting

from .story import _owner, _read


class Command(BaseCommand):
    help = "Create a campaign from a world file (world new), lint a file or a campaign (world lint), export one."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        new = commands.add_parser("new", help="Create a campaign whose world is FILE; print its id.")
        new.add_argument("file")
        new.add_argument("--owner", help="the owner (default: the local owner)")
        new.add_argument("--title", default="")
        new.add_argument("--protagonist", default="")
        lint = commands.add_parser("lint", help="Report world_lint's findings on a file or a campaign.")
        lint.add_argument("file", nargs="?")
        lint.add_argument("--campaign", type=int)
        export = commands.add_parser("export", help="Write a campaign's world at its head as a world file.")
        export.add_argument("--campaign", type=int, required=True)
        export.add_argument("--output", "-o", help="where to write it (default: print it)")

    def handle(self, *args, command, **options):
        try:
            getattr(self, f"_{command}")(**options)
        except (ValueError, worldfile.WorldRefused) as error:
            raise CommandError(str(error)) from None

    def _new(self, file, owner, title, protagonist, **options):
        campaign, findings = worldfile.create_campaign(_owner(owner), worldfile.read(_read(file)), title=title,
                                                       protagonist=protagonist)
        self.stdout.write(str(campaign.pk))
        for finding in findings:
            self.stderr.write(f"lint {finding}")

    def _lint(self, file, campaign, **options):
        if (file is None) == (campaign is None):
            raise CommandError("Give a world file or --campaign N.")
        if file:
            checked = worldfile.check(worldfile.read(_read(file)))
            findings = [f"error: {problem}" for problem in checked.problems] + [str(f) for f in checked.findings]
        else:
            findings = [str(f) for f in worldfile.lint_campaign(scripting.campaign_for(campaign))]
        for finding in findings:
            self.stdout.write(finding)
        if not findings:
            self.stdout.write("No findings.")
        if any(finding.startswith("error") for finding in findings):
            raise CommandError(f"{sum(f.startswith('error') for f in findings)} error(s).")

    def _export(self, campaign, output, **options):
        made = scripting.campaign_for(campaign)
        text = json.dumps(worldfile.export(state_at(lineage.path_of(made), made), made), indent=2, ensure_ascii=False)
        if output:
            Path(output).write_text(text + "\n")
        else:
            self.stdout.write(text)
