"""``backends``: SQLite against PostgreSQL on the same machine (issue 31), the same figures side by side.

Each backend runs in a child ``manage.py bench`` of its own, so each has its
own settings from the start, as a person's server would: SQLite with nothing
set; PostgreSQL with STORYTELLER_BENCH_POSTGRES_URL when it names a server,
otherwise on a throwaway cluster that ``scripts/with-postgres`` starts and
removes. The figures are the overhead bench's send -> chat request (2,000
turns, 10k memories, 20k passages, through the play socket and the fake model
server) and the knowledge bench's lexical and hybrid retrieval over 20,000
passages, with each engine's own ranking alone beside them.

``leg(backend, groups, sizes, repeat)`` runs any groups on one backend and
returns their figures: the multi-process bench (``processes``, the tables)
uses it for its PostgreSQL side.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from storyteller import vendors

GROUPS = ["overhead", "knowledge"]
KEPT = ("send -> chat request", "lexical retrieval", "lexical, state scene", "hybrid retrieval",
        "hardware: FTS5 alone", "hardware: PostgreSQL")
LABELS = {vendors.SQLITE: "SQLite", vendors.POSTGRES: "PostgreSQL"}


def run(sizes, repeat):
    rows = []
    for backend in (vendors.SQLITE, vendors.POSTGRES):
        for row in leg(backend, GROUPS, sizes, repeat):
            name = row["name"].strip()
            if name.startswith(KEPT):
                rows.append({**row, "name": f"{LABELS[backend]}: {name}"[:34]})
    return rows


def leg(backend, groups, sizes, repeat):
    """Run bench ``groups`` in a child process on ``backend`` (vendors.SQLITE or POSTGRES); return its figures."""
    env = {key: value for key, value in os.environ.items() if key not in ("STORYTELLER_DATABASE_URL", "DATABASE_URL")}
    with tempfile.TemporaryDirectory(prefix="storyteller-bench-leg-") as folder:
        out = Path(folder) / "results.json"
        command = [sys.executable, "manage.py", "bench", "--only", ",".join(groups),
                   "--sizes", ",".join(map(str, sizes)), "--repeat", str(repeat), "--json", str(out)]
        if backend == vendors.POSTGRES:
            url = os.environ.get("STORYTELLER_BENCH_POSTGRES_URL", "").strip()
            if url:
                env["STORYTELLER_DATABASE_URL"] = url
            else:
                command = [str(Path(settings.BASE_DIR) / "scripts" / "with-postgres"), *command]
        child = subprocess.run(command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, check=False)
        if child.returncode or not out.exists():
            raise CommandError(f"the {LABELS[backend]} bench failed:\n{(child.stderr or child.stdout)[-3000:]}")
        return json.loads(out.read_text())["results"]
