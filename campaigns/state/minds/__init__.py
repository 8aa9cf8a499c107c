"""Character minds: what each character perceived and believes, first and second order, and where things are.

``beliefs`` derives who believes what is where from the world's steps, and
who could perceive an event (present, or one open exit away), over plain
values; ``minds`` registers the ``event``, ``perception``, ``belief`` and
``notice`` types and what a batch of them reads first; ``whereabouts`` is
the edge that turns the world's records into those beliefs, read from the
database (docs/minds.md). It imports the event core, ``selection`` and
``world.world``; nothing else in ``campaigns/state/`` imports it (the
package only registers its types), and the context builder, the minds step
and the minds panel read it.
"""
