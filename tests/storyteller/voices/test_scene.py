"""A scripted 30-turn scene with three characters, every turn a game master's, against the fake model server.

Sally, Anne and Charlie are in the Room with Edrin (the player); the marble
lies in the basket. The game master sends Sally out to the Hall (turn 4),
has Anne move the marble into the box while she is away (turn 8), and Edrin
follows Sally out (turn 12), so she acts with the player again. Over all thirty turns: no brief ever holds another
character's secret canary; Sally, who left before the marble moved, is told
(and so says) that it is in the basket; each turn writes in one commit.
"""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import connection

from campaigns import worldfile
from campaigns.models import Round
from storyteller.steps import postturn
from tests.storyteller.test_whereabouts import HOUSE
from tests.storyteller.voices.test_played import actor, gm, play

pytestmark = pytest.mark.django_db(transaction=True)

SECRETS = {"Sally": "CANARY-SALLY-7f3", "Anne": "CANARY-ANNE-a91", "Charlie": "CANARY-CHARLIE-c20"}
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def scene():
    document = json.loads(HOUSE.read_text())
    for character in document["characters"]:
        if character["name"] in ("Edrin", "Sally", "Anne", "Charlie"):
            character["place"] = "Room"
        if character["name"] in SECRETS:
            character["condition"] = {"public": "playing", "inner": f"{SECRETS[character['name']]} a secret",
                                      "mood": "calm"}
    return document


class Commits:
    """Count the commits on the database thread: each outermost transaction, and each write outside one."""

    def __init__(self):
        self.count = 0
        self._commit = None

    def __call__(self, execute, sql, params, many, context):
        if not context["connection"].in_atomic_block and sql.lstrip().split(" ", 1)[0].upper() in WRITES:
            self.count += 1
        return execute(sql, params, many, context)

    def install(self):
        self._commit = connection.commit

        def commit():
            self.count += 1
            return self._commit()

        connection.commit = commit
        connection.execute_wrappers.append(self)

    def remove(self):
        connection.execute_wrappers.remove(self)
        connection.commit = self._commit
        del connection.commit  # the instance attribute goes; the class's method is back


@sync_to_async
def briefs_of(node_id):
    return [(who, brief["text"]) for row in Round.objects.filter(node_id=node_id) for who, brief in row.briefs.items()]


@sync_to_async
def start(owner):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(scene()).encode()), game_master=True)
    return campaign


async def test_thirty_turns_keep_every_secret_sally_speaks_of_the_old_place_and_each_turn_commits_once(
        owner, narrator_server):
    campaign = await start(owner)
    commits = Commits()
    await database_sync_to_async(commits.install)()
    scripted = {4: gm(actors=[actor("Sally", "Hall")]),
                8: gm(actors=[actor("Anne", ops=[{"op": "take", "item": "marble"},
                                                 {"op": "put", "item": "marble", "to": "box"}])]),
                12: gm(actors=[actor("Edrin", "Hall")])}
    per_turn, sally_said = [], []
    try:
        for n in range(1, 31):
            if n in scripted:
                narrator_server.script_gm(scripted[n])
            before = commits.count
            result, _ = await play(campaign, "Where is the marble?" if n > 12 else f"We play, turn {n}")
            per_turn.append(commits.count - before)
            await postturn.settle()
            for who, text in await briefs_of(result.node_id):
                for owner_name, secret in SECRETS.items():
                    if owner_name.lower() != who:
                        assert secret not in text, f"turn {n}: {who}'s brief holds {owner_name}'s secret"
                if who == "sally" and n > 12:
                    assert "- the marble: in the basket" in text and "marble: in the box" not in text, text
                if who == "anne" and n > 8:
                    assert "- the marble: in the box" in text
                if n > 12:
                    assert who == "sally", "only Sally is with the player in the Hall"
            rounds = await sync_to_async(list)(Round.objects.filter(node_id=result.node_id).values_list("outputs",
                                                                                                      flat=True))
            sally_said += [o["text"] for outputs in rounds for o in outputs if o["speaker"] == "sally" and n > 12]
    finally:
        await database_sync_to_async(commits.remove)()
    assert per_turn == [1] * 30, per_turn
    assert sally_said and all("As far as I know, the marble: in the basket." in said for said in sally_said)
    assert await Round.objects.acount() == 30
