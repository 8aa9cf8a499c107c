from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from campaigns.models import Campaign
from knowledge import importer
from knowledge.models import Source


class Command(BaseCommand):
    help = "Import every .md and .txt file of a folder into a campaign's knowledge, then build their vectors."

    def add_arguments(self, parser):
        parser.add_argument("campaign", type=int, help="The campaign's id (the number in its address).")
        parser.add_argument("folder", type=Path)
        parser.add_argument("--class", dest="classification", choices=Source.Classification.values,
                            default=Source.Classification.REFERENCE)
        parser.add_argument("--hidden", action="store_true", help="Narrator only: the protagonist does not know it.")
        parser.add_argument("--always-include", action="store_true", help="Canon only: supply it on every turn.")
        parser.add_argument("--allow-duplicates", action="store_true", help="Import text this campaign already has.")

    def handle(self, *args, campaign, folder, classification, hidden, always_include, allow_duplicates, **options):
        try:
            target = Campaign.objects.get(pk=campaign)
        except Campaign.DoesNotExist:
            raise CommandError(f"There is no campaign {campaign}; the number is in the campaign's address.")
        if not folder.is_dir():
            raise CommandError(f"{folder} is not a folder.")
        if always_include and classification != Source.Classification.CANON:
            raise CommandError("Only Canon can be always included; add --class canon.")
        files = sorted(path for path in folder.iterdir() if path.suffix.lower() in importer.EXTENSIONS
                       and path.is_file())
        refused = 0
        for path in files:
            try:
                importer.check_size(path.name, path.stat().st_size)
                source = importer.import_source(target, path.name, path.read_bytes(), classification, hidden=hidden,
                                                always_include=always_include, allow_duplicate=allow_duplicates)
            except importer.ImportRefused as refusal:
                refused += 1
                self.stderr.write(f"refused {path.name}: {refusal}")
                continue
            importer.embed_source(source)
            note = f" ({source.semantic_detail})" if source.semantic_detail else ""
            self.stdout.write(f"imported {path.name} as “{source.title}”, {source.passages.count()} passages{note}")
        self.stdout.write(f"{len(files) - refused} imported, {refused} refused.")
        if refused:
            raise CommandError(f"{refused} file(s) were refused; see above. The others were imported.")
