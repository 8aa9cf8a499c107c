"""``tavern``: bringing a large library in, and the keyed lorebook scan a long story runs every turn (issue 28).

Generated files, the size of a devoted SillyTavern player's: a World Info
book of 1,000 entries (distinct names for keys, some with secondary keys,
timers, probabilities and groups) and a chat of 2,500 messages whose every
reply has three swipes. The import is read, planned and written as the page
writes it (staged, in short transactions), its wall time and its peak
memory over the process's resting size measured. The same files added to
a campaign one has are written the same way, joined to it in one last short
transaction; the longest transaction is SQLite's write lock held, what
another person's turn waits. The
scan is the lorebook section of a turn's prompt at 2,000 turns of story, over
varied actions.
"""

import json
import time

from .measure import ACTIONS, REPLIES, bench_user, figure, timed

ENTRIES = 1_000
MESSAGES = 2_500
SWIPES = 3
SCAN_TURNS = 2_000
SYLLABLES = ("ar", "bel", "cor", "dun", "el", "fen", "gar", "hol", "is", "jor", "kel", "lun", "mar", "nor", "or",
             "pel", "quin", "ros", "sar", "tor", "ul", "ver", "wyn", "yar", "zel")


def run(sizes, repeat):
    """The import of a 1,000-entry book and a 2,500-message chat; the keyed scan per turn at 2,000 turns."""
    return [_measure_import(), _measure_add(), *_measure_scan(repeat)]


def names(count):
    """Return ``count`` distinct made-up names: the keys a real book names its people and places by."""
    found = []
    for first in SYLLABLES:
        for second in SYLLABLES:
            for third in ("", "a", "en", "ith"):
                found.append(f"{first}{second}{third}".capitalize())
    return found[:count]


def world_info(count=ENTRIES):
    """Return a World Info document of ``count`` entries, SillyTavern's shape, with every kind of setting used."""
    entries = {}
    for uid, name in enumerate(names(count)):
        entries[str(uid)] = {
            "uid": uid, "key": [name, f"the {name.lower()} house"], "keysecondary": ["night"] if uid % 7 == 0 else [],
            "selectiveLogic": uid % 4, "comment": name, "constant": uid % 200 == 0, "selective": True,
            "content": f"{name} is {REPLIES[uid % len(REPLIES)][:160]}", "order": uid % 50, "position": uid % 2,
            "probability": 60 if uid % 11 == 0 else 100, "useProbability": uid % 11 == 0,
            "group": f"g{uid % 30}" if uid % 13 == 0 else "", "sticky": 2 if uid % 5 == 0 else 0,
            "cooldown": 3 if uid % 5 == 0 else 0, "delay": 0, "scanDepth": 4 if uid % 9 == 0 else None,
            "matchWholeWords": uid % 3 == 0, "caseSensitive": None, "displayIndex": uid, "disable": False,
        }
    return {"entries": entries, "name": "The Long Library"}


def chat_jsonl(messages=MESSAGES, swipes=SWIPES):
    """Return a SillyTavern chat of ``messages`` messages, every reply with ``swipes`` swipes (the second chosen)."""
    lines = [{"user_name": "Wren", "character_name": "Mara", "create_date": "2024-9-28 @01h 02m 03s 004ms",
              "chat_metadata": {"note_prompt": "", "integrity": "bench"}}]
    for number in range(messages):
        if number % 2:
            lines.append({"name": "Wren", "is_user": True, "is_system": False, "send_date": 1727485320000 + number,
                          "mes": f"{ACTIONS[number % len(ACTIONS)]} ({number})", "extra": {}})
        else:
            texts = [f"{REPLIES[(number + k) % len(REPLIES)]} ({number}.{k})" for k in range(swipes)]
            lines.append({"name": "Mara", "is_user": False, "is_system": False, "send_date": 1727485320000 + number,
                          "mes": texts[1], "swipe_id": 1, "swipes": texts, "extra": {"api": "bench"},
                          "swipe_info": [{"send_date": 1727485320000 + number, "extra": {}} for _ in texts]})
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def _measure_import():
    from django.conf import settings

    from campaigns import staging
    from storyteller.diagnostics.load import PeakMemory
    from storyteller.tavern import files, importing
    from storyteller.tavern import plan as plans

    book = json.dumps(world_info()).encode()
    chat = chat_jsonl()
    limit = settings.STORYTELLER_BUNDLE_MAX_BYTES
    mib = 1024 * 1024
    writes = staging.Writes()
    with PeakMemory() as memory:
        started = time.perf_counter()
        readings = [files.read("library.json", book, limit), files.read("mara.jsonl", chat, limit)]
        written = importing.create(bench_user(), plans.make(readings, "Wren"), writes=writes)
        seconds = time.perf_counter() - started
    return figure("tavern import", f"{ENTRIES:,} entries, {MESSAGES:,} messages x{SWIPES} "
                                   f"({(len(book) + len(chat)) / mib:.1f} MiB), {written.turns:,} turns, "
                                   f"peak +{memory.above / mib:.0f} MiB, {writes.batches} transactions, the "
                                   f"longest {writes.longest * 1000:.0f} ms",
                  [seconds], "< 10 s and < 300 MiB peak")


def _measure_add():
    from django.conf import settings

    from campaigns import staging
    from storyteller.diagnostics.load import PeakMemory
    from storyteller.tavern import files, importing
    from storyteller.tavern import plan as plans

    from .turn import generate_story

    campaign = generate_story(10)
    book = json.dumps(world_info()).encode()
    chat = chat_jsonl()
    limit = settings.STORYTELLER_BUNDLE_MAX_BYTES
    mib = 1024 * 1024
    readings = [files.read("library.json", book, limit), files.read("mara.jsonl", chat, limit)]
    plan = plans.make(readings, "Wren", existing=importing.existing_names(campaign))
    writes = staging.Writes()
    with PeakMemory() as memory:
        started = time.perf_counter()
        written = importing.add(bench_user(), campaign, plan, writes=writes)
        seconds = time.perf_counter() - started
    return figure("tavern add", f"the same into a 10-turn campaign, {written.turns:,} turns, peak "
                                f"+{memory.above / mib:.0f} MiB, {writes.batches} transactions, the longest "
                                f"{writes.longest * 1000:.0f} ms", [seconds], "< 10 s, no transaction near 1 s")


def _measure_scan(repeat):
    from campaigns import lineage
    from knowledge import importer, keyed, lorebooks, worldinfo
    from storyteller.context import Action, lorebook

    from .turn import generate_story

    campaign = generate_story(SCAN_TURNS)
    importer.import_keyed(campaign, "library.json", worldinfo.read(world_info(), "The Long Library"), "canon")
    path = lineage.path_of(campaign)
    people = names(ENTRIES)
    actions = [Action(mode="do", text=f"{ACTIONS[n % len(ACTIONS)]} with {people[(n * 37) % ENTRIES]} at night")
               for n in range(max(20, repeat))]
    lorebooks.keyed_index(campaign.pk)  # compiled once per change of a book, as the first turn after it does
    fired = []

    def section(action):
        _, report, _ = lorebook.sections(campaign, path, action, 6_000)
        fired.append(len(report["fired"]))

    wall = []
    for action in actions:
        started = time.perf_counter()
        section(action)
        wall.append(time.perf_counter() - started)
    scan = timed("keyed scan", f"{ENTRIES:,} entries, {SCAN_TURNS:,} turns, {sum(fired) / len(fired):.1f} fired",
                 section, actions, "< 5 ms a turn")
    index = lorebooks.keyed_index(campaign.pk)
    started = time.perf_counter()
    keyed.Index(index.items)
    compile_seconds = time.perf_counter() - started
    return [scan, figure("keyed scan, wall", f"{ENTRIES:,} entries, {SCAN_TURNS:,} turns", wall,
                         "the same, on the wall clock (two shared cores)"),
            figure("keyed compile", f"{ENTRIES:,} entries", [compile_seconds], "once per change of a book")]
