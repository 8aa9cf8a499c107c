"""The tavern: stories people bring from SillyTavern, Kobold Lite, NovelAI, Agnai and RisuAI, and back (issue 28).

Character cards (V1, V2, V3, SillyTavern's hybrid, PNG, CHARX, Pygmalion),
World Info and the lorebooks that convert to it, SillyTavern chats and
Kobold saves are read here into plain values (``cards``, ``books``,
``chats``; ``png`` and ``files`` for the bytes), every field that has no
place in Storyteller named; ``plan`` turns what a person dropped into what
importing it would make, for the preview, and ``importing`` writes it (a new
campaign staged until whole, or short batches joined to a chosen one in one
last transaction);
``exporting`` writes a campaign back in their formats. The keyed scan of
the lorebooks a turn reads lives with the books, in ``knowledge.keyed``.

May import campaigns, knowledge and memory (the pipeline's right); nothing
but the tavern's own pages and command imports it.
"""
