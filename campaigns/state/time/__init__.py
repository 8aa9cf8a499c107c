"""Story time and world rules: the clock, the calendar, agendas, variables, dice, triggers and their rulebook.

``clock``, ``calendar``, ``agenda``, ``variables``, ``dice`` and
``triggers`` are the rules, pure over plain values (``rules`` holds what
they share: the refusal they raise and the record write they return);
``rulebook`` joins them to the pipeline — their event types, the readers of
their records, the batch's environment and the engine's work after every
batch, registered in the registry (docs/rules.md). The rules import only
each other; ``rulebook`` imports the event core and ``world.world`` (where
people and things are, for routines' moves and triggers' conditions).
Imported by the world's whole-world checks and writers (``lint``,
``authoring``, ``offscene``) but never by ``world.world`` or ``minds``, and
by the pages, the forms and the pipeline.
"""
