"""Benchmarks for one turn's costs on generated campaigns: context build, commit and relay, and every mechanism's.

Runs against a throwaway SQLite database in a temporary folder (same settings,
WAL and IMMEDIATE transactions included), never against the person's stories;
with STORYTELLER_DATABASE_URL set, against a throwaway database on that
PostgreSQL server instead (``--only backends`` runs both, side by side).
The groups are the modules of ``storyteller.bench``; this command picks them,
runs them and prints their figures as one table.
"""

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from storyteller.bench import BENCHMARKS, SLOW, measure, overhead


class Command(BaseCommand):
    help = "Run the benchmarks on generated data; print a table of medians and write JSON."

    def add_arguments(self, parser):
        parser.add_argument("--only", default=",".join(name for name in BENCHMARKS if name not in SLOW),
                            help=f"Comma-separated benchmark groups to run ({', '.join(sorted(SLOW))} only when named).")
        parser.add_argument("--sizes", default="200,2000", help="Comma-separated story lengths in turns.")
        parser.add_argument("--repeat", type=int, default=50, help="Samples per measurement.")
        parser.add_argument("--json", dest="json_path", default="bench-results.json", help="Where to write the results.")
        parser.add_argument("--cold-turn", help=argparse.SUPPRESS)  # DATABASE:CAMPAIGN, the overhead bench's child

    def handle(self, *args, only, sizes, repeat, json_path, cold_turn=None, **options):
        if cold_turn:
            database, campaign_id, wait = cold_turn.rsplit(":", 2)
            self.stdout.write(json.dumps(overhead.cold_turn(database, int(campaign_id), wait == "wait")))
            return
        unknown = set(only.split(",")) - set(BENCHMARKS)
        if unknown:
            raise CommandError(f"Unknown benchmark group(s) {sorted(unknown)}; choose from {sorted(BENCHMARKS)}.")
        folder = Path(tempfile.mkdtemp(prefix="storyteller-bench-"))
        try:
            with measure.throwaway_database(folder) as database:
                measure.use_database(database)
                call_command("migrate", verbosity=0)
                results = []
                for name in only.split(","):
                    results += BENCHMARKS[name]([int(size) for size in sizes.split(",")], repeat)
                connections["default"].close()
        finally:
            connections["default"].close()
            shutil.rmtree(folder, ignore_errors=True)
        for line in measure.table(results):
            self.stdout.write(line)
        Path(json_path).write_text(json.dumps({"results": results}, indent=2))
        self.stdout.write(f"\nWrote {json_path}")
