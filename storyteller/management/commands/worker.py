"""Run a worker for the post-turn steps queued by the app when ``STORYTELLER_TASKS=database`` (docs/deploy.md).

It is django-tasks-db's own worker (the same options as its ``db_worker``),
with one thread more: every quarter lease it puts back to ready the tasks of
workers that died holding them (``storyteller.steps.queued.recover``), since
the backend would keep them running forever. Start as many as the model
server can serve at once; each runs one task at a time.
"""

import sys
import threading

from django_tasks_db.management.commands import db_worker

from storyteller.steps import postturn, queued


class Command(db_worker.Command):
    help = "Run the post-turn steps the app queues (STORYTELLER_TASKS=database), one task at a time."

    def handle(self, *args, **options):
        if not queued.enabled():
            print("Storyteller: STORYTELLER_TASKS is not 'database', so the app runs the post-turn steps itself and "
                  "queues nothing for this worker; set STORYTELLER_TASKS=database for the app and the worker.",
                  file=sys.stderr)
        stop = threading.Event()
        recovering = threading.Thread(target=queued.keep_recovering, args=(postturn.run_queued, stop),
                                      name="post-turn-recovery", daemon=True)
        recovering.start()
        try:
            return super().handle(*args, **options)
        finally:
            stop.set()
