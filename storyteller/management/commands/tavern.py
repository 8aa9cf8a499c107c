"""manage.py tavern import | export: bring SillyTavern, Kobold and NovelAI files in, and write a campaign back out."""

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from campaigns import playing
from storyteller import scripting
from storyteller.tavern import exporting, files, importing
from storyteller.tavern import plan as plans

from .story import _owner


class Command(BaseCommand):
    help = ("Import character cards, lorebooks, chats and Kobold saves into a new campaign or a chosen one "
            "(tavern import), or write a campaign's cards, lorebooks and current line back out (tavern export).")

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        bring = commands.add_parser("import", help="Import FILE… as one campaign (or into --campaign N).")
        bring.add_argument("files", nargs="+", metavar="FILE")
        bring.add_argument("--campaign", type=int, help="add to this campaign instead of making a new one")
        bring.add_argument("--json", action="store_true", dest="as_json", help="print what was made as JSON")
        bring.add_argument("--persona", default="", help="your name in these stories: what {{user}} means")
        bring.add_argument("--title", default="", help="the new campaign's title (default: from the files)")
        bring.add_argument("--level", action="append", default=[], metavar="N=LEVEL",
                           help="book N (counted from 0 in file order) at canon, reference or inspiration")
        bring.add_argument("--owner", help="the owner (default: the local owner)")
        export = commands.add_parser("export", help="Write a campaign's cards, lorebooks and current line to DIR.")
        export.add_argument("--campaign", type=int, required=True)
        export.add_argument("--out", required=True, metavar="DIR")

    def handle(self, *args, command, **options):
        try:
            getattr(self, f"_{command}")(**options)
        except (ValueError, importing.ImportRefused, playing.TurnInProgress) as error:
            raise CommandError(str(error)) from None

    def _import(self, files, campaign, as_json, persona, title, level, owner, **options):
        user = _owner(owner)
        target = scripting.campaign_for(campaign) if campaign else None
        if target is not None and target.owner_id != user.pk:
            raise CommandError(f"Campaign {campaign} is not {user.username}'s.")
        limit = settings.STORYTELLER_BUNDLE_MAX_BYTES
        readings = [self._read(path, limit) for path in files]
        plan = plans.make(readings, persona or _persona_name(user), _levels(level),
                          importing.existing_names(target) if target else None,
                          importing.existing_books(target) if target else None)
        if not plan.usable:
            raise CommandError(importing.nothing_imported(plan))
        written = importing.add(user, target, plan) if target else importing.create(user, plan, title=title)
        result = {**written.as_json(), "refused": [reading.refused for reading in plan.refused],
                  "notes": [f"{file}: {words}" if file else words for file, words in plan.notes],
                  "unplaced": [f"{file}: {words}" if file else words for file, words in plan.unplaced]}
        if as_json:
            self.stdout.write(json.dumps(result, indent=2, ensure_ascii=False))
            return
        self.stdout.write(f"Campaign {written.campaign.pk}: “{written.campaign.title}”: {len(written.characters)} "
                          f"character(s), {len(written.greetings)} greeting(s), {len(written.entries)} lorebook entries, "
                          f"{written.turns} turn(s) with {written.swipes} other version(s).")
        for line in result["refused"] + result["notes"]:
            self.stderr.write(line)

    def _read(self, path, limit):
        where = Path(path)
        try:
            size = where.stat().st_size
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror}.") from None
        if size > limit:
            return files.Reading(where.name, refused=f"{where.name} is {size:,} bytes; a file brought in may be at "
                                                     f"most {limit:,} (STORYTELLER_BUNDLE_MAX_MB).")
        return files.read(where.name, where.read_bytes(), limit)

    def _export(self, campaign, out, **options):
        made = scripting.campaign_for(campaign)
        folder = Path(out)
        written = []
        for item in exporting.export(made):
            target = folder / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.data)
            written.append(str(target))
        self.stdout.write("\n".join(written))


def _levels(given):
    levels = {}
    for item in given:
        number, _, level = item.partition("=")
        if not number.isdigit() or level not in plans.LEVELS:
            raise CommandError(f"--level {item!r}: write N=LEVEL, N a book's number from 0 and LEVEL one of "
                               f"{', '.join(plans.LEVELS)}.")
        levels[int(number)] = level
    return levels


def _persona_name(user):
    persona = user.personas.order_by("-updated_at").first()
    return persona.name if persona else ""

