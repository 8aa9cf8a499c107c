"""Run the memory retention scenarios (seed 004 §C.4.1) and print each one's verdict.

By default every scenario runs in a throwaway data folder, in a child process
of this command with its own fresh database, so a person's campaigns are
never read or written; the folder is deleted afterwards. ``--here`` runs in
the configured database instead, as a user ``memory-diagnostic`` whose
campaigns are titled "Memory diagnostic: <scenario>" (the child runs so).
"""

import json
import os
import subprocess
import sys
import tempfile

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from storyteller.diagnostics import scenarios

USER = "memory-diagnostic"


class Command(BaseCommand):
    help = ("Play the deterministic memory retention scenarios against the stub model server on 127.0.0.1 and "
            "print whether each planted fact reached the narrator through memory alone.")

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--scenario", action="append", choices=list(scenarios.SCENARIOS),
                           help="a scenario to run (repeat for several)")
        which.add_argument("--all", action="store_true", help="run every scenario")
        parser.add_argument("--json", action="store_true",
                            help="print one JSON object mapping each scenario to its verdict and stage details")
        parser.add_argument("--here", action="store_true",
                            help="run in the configured database, not a throwaway data folder")

    def handle(self, *args, **options):
        names = list(scenarios.SCENARIOS) if options["all"] else options["scenario"]
        results = self._run_here(names) if options["here"] else self._run_isolated(names)
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for name, result in results.items():
                self.stdout.write(_line(name, result))
        failed = [name for name, result in results.items() if result["verdict"] != "injected" or not result["counts"]]
        if failed:
            raise CommandError(f"Not recalled through memory alone: {', '.join(failed)}. The stages above name "
                               "the first that failed; --json shows every field.")

    def _run_here(self, names):
        owner, _ = get_user_model().objects.get_or_create(username=USER)
        results = {}
        for name in names:
            outcome = async_to_sync(scenarios.run)(name, owner)
            data = outcome.to_json()
            results[name] = {"verdict": data["verdict"], "counts": data["counts"],
                             "stages": data["diagnosis"]["stages"], "isolation": data["isolation"],
                             "details": data["details"]}
        return results

    def _run_isolated(self, names):
        manage = str(settings.BASE_DIR / "manage.py")
        with tempfile.TemporaryDirectory(prefix="storyteller-memory-diagnostic-") as folder:
            env = {**os.environ, "STORYTELLER_DATA_DIR": folder}
            steps = [[sys.executable, manage, "migrate", "--noinput", "--verbosity", "0"],
                     [sys.executable, manage, "memory_diagnostic", "--here", "--json",
                      *(part for name in names for part in ("--scenario", name))]]
            for step in steps:
                done = subprocess.run(step, env=env, capture_output=True, text=True, cwd=settings.BASE_DIR)
                if done.returncode != 0 and not done.stdout.lstrip().startswith("{"):
                    raise CommandError(f"The diagnostic's own data folder could not be set up or run "
                                       f"({' '.join(step[2:4])} exited {done.returncode}):\n{done.stderr[-2000:]}")
        return json.loads(done.stdout)


def _line(name, result):
    ranked = result["stages"].get("ranked", {})
    where = f"rank {ranked['rank']} of {ranked['of']}, top_k {ranked['top_k_cutoff']}" if ranked else "not ranked"
    counts = "isolation holds" if result["counts"] else f"isolation failed: {', '.join(result['isolation']['failed'])}"
    return f"{name:<26} {result['verdict']:<26} {where:<26} {counts}"
