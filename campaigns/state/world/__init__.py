"""The world: places, exits and doors, items and who holds them, who knows what, lore, and the world's author.

``world`` keeps what is true of places, exits, items, relationships and
knowledge (their event types, routes, the dry run of item operations, what
people see after a batch), ``story`` the story's own types (who and what
exists, arrivals and departures, the scene, facts, threads, canon), ``lore``
who may recall which lore, ``lint`` what is wrong with a whole world,
``authoring`` the world author's rules and ``offscene`` which off-stage
items are answered; each registers its types and hooks in the registry.
Pure: a ``State`` and plain values in, plain values out. ``world``,
``story`` and ``lore`` import only the event core (``reading``,
``registry``); ``lint``, ``authoring`` and ``offscene``, which judge a whole
world or write beside story time, also read ``time``'s rulebook, triggers
and rules. Imported by ``time`` and ``minds`` (where people and things
are: ``world`` alone), by ``selection``, and by the pages and the pipeline.
"""
