"""Benchmarks for one turn's costs and every mechanism's, on generated data: one module per group.

``manage.py bench`` runs the groups (``--only`` names some; ``SLOW`` ones
run only when named) on a throwaway SQLite database with the same settings,
and prints one table of figures (``measure``: samples, timing, the table).
Each group module measures one area with its ``run(sizes, repeat)``; the
data several groups share is generated where its group lives (stories in
``turn``, prose in ``knowledge``, states in ``state``, a world in
``world``). How to run them and the latest figures: docs/performance.md.
This package may import every app; nothing imports it but the command and
the prefix-reuse test.
"""

from . import (backends, branches, builtin, checkpoint, imports, knowledge, limits, memory, minds, model_work,
               overhead, page, recording, replay, rules, shared, state, table, tavern, turn, turn_first, view, voices,
               world)

BENCHMARKS = {
    "turn": turn.run,
    "knowledge": knowledge.run,
    "state": state.run,
    "memory": memory.run,
    "checkpoint": checkpoint.run,
    "imports": imports.run,
    "page": page.run,
    "recording": recording.run,
    "turn_first": turn_first.run,
    "overhead": overhead.run,
    "world": world.run,
    "rules": rules.run,
    "minds": minds.run,
    "voices": voices.run,
    "builtin": builtin.run,
    "model-work": model_work.run,
    "limits": limits.run,
    "branches": branches.run,
    "tavern": tavern.run,
    "replay": replay.run,
    "view": view.run,
    "table": table.run,
    "backends": backends.run,
    "shared": shared.run,
}
# Run only when named: minutes of the built-in model (or of 440 turns played), not milliseconds of the app.
SLOW = {"recording", "builtin", "model-work", "backends"}
