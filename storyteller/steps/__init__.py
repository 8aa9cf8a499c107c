"""The post-turn steps: what runs after a reply is committed, one step at a time, each recording how it went.

Every module here is one step of the same shape: it reads what it needs on
the database's thread and stops there when nothing is due; it asks the
model off that thread with no transaction open (at background priority,
which gives way to a player's turn, under a timeout of its own); it writes
what it kept through the one write path for that thing (``apply_events``
for the story state, ``memory.bank`` for memories, ``memory.checkpoints``
for summaries); and it records its outcome — a failure in words, after the
failed work rolled back — on its own run row of the reply (a table of
``campaigns.models.StepRun``), never touching the accepted turn. Each
declares itself as ``STEP`` (a ``Step``), and ``postturn`` runs them in
order, one worker per campaign: ``recorder`` (the state's events),
``judge`` (triggers' free-text conditions), ``minds`` (perceptions and
beliefs, then the recall index), ``away`` (off-stage rounds and the
"Meanwhile" card), ``consolidation`` (the world author completing what it
made), ``memories`` (memory blocks) and ``compaction`` (the summary). A step
may import the apps below (campaigns, memory, knowledge) and storyteller's
``llm``, ``context`` and ``voices``; only ``turns``, ``replays``, the
views, the diagnostics and the bench import the steps.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One post-turn step as its module declares it (``STEP``) and ``postturn`` runs it."""

    run: object  # async run(reply node id): read, ask, write, and record the outcome on ``record``
    doing: str  # what the play page says while it runs
    name: str  # what the play page calls it when it fails
    record: type  # its run row on the reply: one per node, with a status ("failed" on failure) and an error
    kind: str = ""  # what its model requests are called where they are counted (campaigns.models.ModelRequest)
