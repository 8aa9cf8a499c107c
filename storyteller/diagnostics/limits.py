"""The largest inputs Storyteller accepts, made to order, and what importing them costs (issue 22).

Behind ``manage.py bench --only limits`` and the tests of the limits
(tests/storyteller/test_limits.py, test_limits_load.py): the largest
accepted world file (every section at its limit, ``largest_world``), the
largest accepted bundle (a story of ``MAX_NODES`` short nodes near the byte
limit, ``largest_bundle``) and the largest accepted dice check
(``largest_check``). ``measure`` imports one and reports its time, the
longest write transaction it held and the process's peak resident memory.
"""

import copy
import json
import time
from dataclasses import dataclass

from campaigns import staging, worldfile
from campaigns.state.time import dice

from .load import PeakMemory

MiB = 1024 * 1024
START = "2031-03-14T08:00"


def _text(label, number, size=160):
    """Return a description of about ``size`` characters naming ``label`` ``number``."""
    base = f"{label} {number}: weathered stone, a low door, the smell of tar and rain, gulls over the water. "
    return (base * (size // len(base) + 1))[:size].strip()


def largest_world():
    """Return a valid world document with every section at its limit (worldfile.MAX_ENTRIES)."""
    limit = worldfile.MAX_ENTRIES
    places = [{"id": f"p{n}", "name": f"Place {n}", "description": _text("Place", n),
               "features": [{"name": f"well {n}", "text": "a well with a rope"}, {"name": f"bench {n}"}]}
              for n in range(limit["places"])]
    count = limit["places"]
    steps = (1, 2, 3, 5)
    exits = [{"from": f"p{n}", "to": f"p{(n + step) % count}", "label": f"way {step} from {n}", "travel_seconds": 30}
             for n in range(count) for step in steps][:limit["exits"]]
    characters = [{"id": f"c{n}", "name": f"Person {n}", "description": _text("Person", n),
                   "place": f"p{n % count}", "condition": {"public": "awake", "mood": "calm"},
                   "relationships": [{"to": f"c{(n + k) % limit['characters']}", "label": "knows",
                                      "trust": 0.5} for k in (1, 2, 3)],
                   "knowledge": {"locations": [f"p{(n + k) % count}" for k in range(6)]},
                   "temperament": {"valence": 0.2, "arousal": -0.1, "dominance": 0.0}}
                  for n in range(limit["characters"])]
    characters[0] = {**characters[0], "protagonist": True, "name": "Edrin", "id": "edrin"}
    for character in characters:
        for relation in character["relationships"]:
            relation["to"] = "edrin" if relation["to"] == "c0" else relation["to"]
    people = [c["id"] for c in characters]
    containers = limit["items"] // 4
    items = [{"id": f"chest{n}", "name": f"Chest {n}", "holder": f"p{n % count}", "container": "open",
              "description": _text("Chest", n, 100)} for n in range(containers)]
    items += [{"id": f"coin{n}", "name": f"Coin {n}", "holder": f"chest{n % containers}", "quantity": 3}
              for n in range(containers)]
    items += [{"id": f"rope{n}", "name": f"Rope {n}", "holder": f"p{n % count}"} for n in range(containers)]
    items += [{"id": f"knife{n}", "name": f"Knife {n}", "holder": people[1 + n % (len(people) - 1)]}
              for n in range(limit["items"] - 3 * containers)]
    document = {
        "format": worldfile.FORMAT, "version": worldfile.VERSION,
        "campaign": {"title": "The Largest World", "protagonist": "Edrin, a cartographer",
                     "opening": "The harbour town spreads along the water, street after street.",
                     "canon": [f"Rule {n}: the tide turns twice a day." for n in range(10)]},
        "starting_time": START,
        "clock": {"time_zone": "Europe/Lisbon"},
        "calendar": {"hemisphere": "north", "festivals": [
            {"name": f"Festival {n}", "rule": f"{1 + n % 28} {('March', 'June', 'October')[n % 3]}"}
            for n in range(30)]},
        "slots": [{"name": f"slot{n}", "capacity": 2} for n in range(limit["slots"])],
        "places": places, "exits": exits,
        "factions": [{"id": f"f{n}", "name": f"Guild {n}", "description": _text("Guild", n, 80)}
                     for n in range(limit["factions"])],
        "characters": characters, "items": items,
        "facts": [f"Fact {n}: the harbour chain is raised at dusk." for n in range(limit["facts"])],
        "variables": [{"name": f"v{n}", "type": "number", "range": [0, 100], "default": 10}
                      for n in range(limit["variables"])],
        "dice": [largest_check(f"check{n}") if n == 0 else
                 {"key": f"check{n}", "name": f"Check {n}", "definition": {"dice": "2d6", "bands": [
                     {"label": "fail", "outcome": "it fails", "max": 6},
                     {"label": "partial", "outcome": "it half works", "min": 7, "max": 9},
                     {"label": "success", "outcome": "it works", "min": 10}]}} for n in range(limit["dice"])],
        "routines": [{"who": people[1 + n % (len(people) - 1)], "windows": [
            {"start": "08:00", "end": "12:00", "place": f"p{n % count}", "activity": "working"},
            {"start": "18:00", "end": "22:00", "place": f"p{(n + 1) % count}", "activity": "resting"}]}
            for n in range(min(limit["routines"], len(people) - 1))],
        "engagements": [{"id": f"e{n}", "who": [people[1 + n % (len(people) - 1)]], "at": "2031-03-20T10:00",
                         "place": f"p{n % count}", "what": f"meeting {n} at the quay"}
                        for n in range(limit["engagements"])],
        "intents": [{"who": people[1 + n % (len(people) - 1)], "id": f"i{n}", "plan": f"plan {n}: find the key",
                     "priority": 3, "urgency": 2, "deadline": "2031-04-01T12:00"} for n in range(limit["intents"])],
        "triggers": [{"id": f"t{n}", "when": {"type": "time", "after": f"2031-03-{15 + n % 10}T08:00"},
                      "beat": f"Bell {n} rings over the harbour."} for n in range(limit["triggers"])],
        "lore": [{"id": f"lore{n}", "title": f"Lore {n}", "text": _text("Lore", n, 200)}
                 for n in range(limit["lore"])],
    }
    return document


def largest_check(key="largest"):
    """Return the largest dice check accepted: 100d1000 with ``dice.MAX_BANDS`` bands tiling every total."""
    low, high = 100, 100_000
    size = (high - low + 1) // dice.MAX_BANDS
    bands = [{"label": f"band {n}", "outcome": f"outcome {n}", "min": low + n * size,
              "max": high if n == dice.MAX_BANDS - 1 else low + (n + 1) * size - 1} for n in range(dice.MAX_BANDS)]
    bands[0]["min"], bands[-1]["max"] = None, None
    return {"key": key, "name": "The largest check", "definition": {"dice": "100d1000", "bands": bands}}


def largest_bundle(exported, nodes=None, reply_chars=260):
    """Return bundle bytes holding ``exported``'s campaign (a bundle dict with its opening only) with a story of
    ``nodes`` nodes (MAX_NODES by default) on its first branch, its checksum made again."""
    from storyteller import bundle
    from storyteller.bundle import rows

    nodes = rows.MAX_NODES if nodes is None else nodes
    data = copy.deepcopy(exported)
    section = data["sections"]["campaigns"]
    opening = section["nodes"][0]
    reply = _text("Reply", 0, reply_chars)
    story, through = [opening], opening["tokens"]
    for depth in range(1, nodes):
        player = depth % 2 == 1
        through += 12
        story.append({**opening, "depth": depth, "role": "player" if player else "narrator",
                      "mode": "do" if player else "", "text": f"I walk on, step {depth}." if player else reply,
                      "tokens": 12, "tokens_through": through})
    section["nodes"] = story
    section["campaign"]["head_depth"] = nodes - 1
    data["checksum"] = bundle.checksum(data["sections"])
    return json.dumps(data, ensure_ascii=False).encode()


@dataclass
class Measured:
    what: str
    seconds: float
    longest: float  # the longest write transaction, seconds on the wall clock
    longest_work: float  # ... and in the importing thread's own work
    batches: int
    peak_above: int  # bytes of resident memory above what the process held before
    rows: int

    def line(self):
        return (f"{self.what}: {self.seconds:.1f} s, {self.rows:,} rows in {self.batches:,} transactions, longest "
                f"{self.longest * 1000:.0f} ms ({self.longest_work * 1000:.0f} ms of work), "
                f"peak +{self.peak_above / MiB:.0f} MiB")


def measure_world(owner, document):
    """Import ``document`` (serialised and read back, as an upload is) for ``owner``; return what it cost."""
    data = json.dumps(document).encode()
    writes = staging.Writes()
    with PeakMemory() as memory:
        started = time.perf_counter()
        worldfile.create_campaign(owner, worldfile.read(data), writes=writes)
        seconds = time.perf_counter() - started
    return Measured(f"world file ({len(data) / MiB:.1f} MiB)", seconds, writes.longest, writes.longest_work,
                    writes.batches, memory.above, writes.rows)


def measure_bundle(owner, data):
    """Import bundle bytes ``data`` for ``owner``; return what it cost."""
    from storyteller import bundle

    writes = staging.Writes()
    with PeakMemory() as memory:
        started = time.perf_counter()
        bundle.import_bundle(owner, data, writes=writes)
        seconds = time.perf_counter() - started
    return Measured(f"bundle ({len(data) / MiB:.1f} MiB)", seconds, writes.longest, writes.longest_work,
                    writes.batches, memory.above, writes.rows)


def live_uploads(app):
    """Return (name, method) for each largest accepted input, sent into the running app (diagnostics.load.LiveApp)
    by the importer while the player plays: each method takes the importer's client and returns
    (status, answer text, seconds) once the app has finished with it.

    The files are made here, before any is sent: they are files the importer already has. Made while the player
    plays, their ``json.dumps`` (one C call holding this interpreter's lock for seconds on a slow machine) stalled
    the player's socket in this process, and the stall was counted as the app's (sampled with py-spy)."""
    from .load import follow_import

    campaign = app.people["importer"]["campaign"]
    world_file = json.dumps(largest_world()).encode()
    client = app.client("importer")
    try:
        exported = json.loads(client.get(f"/campaigns/{campaign}/export/").content)
    finally:
        client.close()
    bundle_file = largest_bundle(exported)
    made = largest_check()

    def world(client):
        fields = {"title": "", "protagonist": "", "opening": "", "point_of_view": "second", "prose_length": "medium",
                  "dialogue_density": "medium", "descriptive_richness": "medium", "violence_level": "low",
                  "context_token_budget": "4096", "max_output_tokens": "200", "temperature": "0.8"}
        return _sent(client, follow_import, "/campaigns/new/", data=fields, files={"world": ("w.json", world_file)})

    def bundle(client):
        return _sent(client, follow_import, "/campaigns/import/", files={"bundle": ("b.json", bundle_file)})

    def check(client):
        return _sent(client, None, f"/campaigns/{campaign}/state/rules/rolls/correct/", data={
            "type": "dice_check_define", "subject": made["key"], "name": made["name"],
            "definition": json.dumps(made["definition"])}, headers={"HX-Request": "true"})

    return [("largest world file", world), ("largest bundle", bundle), ("largest dice check", check)]


def _sent(client, follow, url, **request):
    started = time.perf_counter()
    response = client.post(url, **request)
    status = response.status_code
    if follow is not None and status == 302 and response.headers["location"].startswith("/imports/"):
        response = follow(client, response.headers["location"])
    return status, response.text if response.status_code != 302 else response.headers["location"], \
        time.perf_counter() - started


def run_live(app, idle_turns=3):
    """Play turns as the player while the importer sends every largest input at once; return
    (idle turn seconds, {name: (status, answer, seconds)}, [(turn seconds, outcome) while they ran])."""
    import threading

    from .load import played

    player = app.socket("player")
    results, threads = {}, []
    try:
        idle = [played(player, f"look around {n}")[0] for n in range(idle_turns)]
        for name, method in live_uploads(app):
            def send(name=name, method=method):
                client = app.client("importer")
                try:
                    results[name] = method(client)
                finally:
                    client.close()
            threads.append(threading.Thread(target=send))
        for thread in threads:
            thread.start()
        turns = []
        while any(thread.is_alive() for thread in threads) or len(turns) < 3:
            turns.append(played(player, f"keep playing {len(turns)}"))
        for thread in threads:
            thread.join()
    finally:
        player.close()
    return idle, results, turns
