"""Lore by what each character knows (seed 002 实体知识, D10; WP4 scenario 7, its pure part): no database."""

from campaigns import worldfile
from campaigns.state.world import lore, world
from campaigns.state.world.lore import Entry
from tests.campaigns.test_world import PROTAGONIST_LINE, apply, applied, document, ev, keep

LORE = [
    {"id": "keep-history", "title": "The founding of the Keep", "text": "Built by the first lamplighters of the cliff."},
    {"id": "vault-curse", "title": "The vault's curse", "text": "Whoever opens the vault of the Keep hears the sea."},
    {"id": "tides", "title": "Tides", "text": "Everyone on the cliff knows the tides turn at the bell.",
     "scope": "everyone"},
]


def lore_keep():
    doc = document()
    doc["lore"] = LORE
    mara = next(c for c in doc["characters"] if c["name"] == "Mara")
    mara["knowledge"]["lore"] = ["keep-history"]
    return doc


def test_an_entry_is_known_by_its_book_and_id_and_a_bare_id_is_the_world_files():
    assert lore.lore_key("keep-history") == "world:keep-history"
    assert lore.lore_key("Old Tales:The Flood/Aftermath") == "old-tales:the-flood/aftermath"
    assert lore.lore_key("old-tales:the-flood/aftermath") == "old-tales:the-flood/aftermath", "a key is its own key"
    assert lore.entry_id("The Flood / Its Aftermath!") == "the-flood/its-aftermath"


def test_a_character_recalls_only_lore_she_has_an_edge_to_or_that_is_for_everyone_and_never_an_unknown_entry():
    entries = lore.world_entries(LORE)
    known = {"world:keep-history"}
    assert [e.key for e in lore.recallable(entries, known)] == ["world:keep-history", "world:tides"]
    assert lore.titles(entries, known) == ["The founding of the Keep", "Tides"]
    # The vault entry matches every word of the question; she does not know it, so it is never searched.
    assert lore.recall(entries, known, "whoever opens the vault of the keep hears the sea") == [entries[0]]
    assert lore.recall(entries, known, "when do the tides turn") == [entries[2]]
    assert lore.recall(entries, set(), "the founding of the keep") == []
    assert lore.recall(entries, known, "nothing shared here") == []


def test_recall_puts_title_matches_first_and_keeps_to_its_limit():
    entries = [Entry(f"b:{n}", f"Title {n}", "the lamp and the sea") for n in range(5)]
    entries.append(Entry("b:lamp", "The lamp", "oil"))
    known = {e.key for e in entries}
    found = lore.recall(entries, known, "the lamp by the sea", limit=3)
    assert [e.key for e in found] == ["b:lamp", "b:0", "b:1"]


def test_a_world_files_lore_becomes_knowledge_edges_and_entries_on_the_line():
    state = keep(lore_keep())
    assert lore.known_lore(state, "mara") == {"world:keep-history"}
    assert lore.known_lore(state, "aldric") == set()
    assert [e.key for e in lore.world_lore(state)] == ["world:keep-history", "world:vault-curse", "world:tides"]
    assert world.knowledge(state, "mara")["lore"] == {"world:keep-history": "world"}
    told = applied(apply(state, ev("know", "Aldric", "vault-curse", data={"kind": "lore", "how": "told"}))[0])
    assert told.writes[0]["slot"] == "knows:aldric:lore:world:vault-curse"
    assert [e.title for e in lore.recallable(lore.world_lore(state), lore.known_lore(state, "aldric"))] == [
        "The vault's curse", "Tides"]


def test_a_world_file_naming_lore_it_does_not_hold_or_an_id_twice_is_refused_with_the_reason():
    doc = lore_keep()
    doc["characters"][1]["knowledge"]["lore"] = ["keep-history", "dragons"]
    doc["lore"] = [*LORE, {"id": "Keep History", "title": "Again", "text": "twice"}]
    problems = worldfile.check(doc, PROTAGONIST_LINE).problems
    assert ("characters[1].knowledge.lore[1] (Mara): no entry 'dragons' in the file's lore section (a lorebook's "
            "entry is named \"<book>:<id>\")") in problems
    assert ("lore[3].id (Keep History) 'Keep History' is the id of lore[0] too; give each entry its own id "
            "(knowledge names an entry by it)") in problems
    doc = lore_keep()
    doc["characters"][1]["knowledge"]["lore"] = ["old-tales:the-flood"]
    assert not worldfile.check(doc, PROTAGONIST_LINE).errors, "a lorebook's entry may be named before it is imported"


def test_lore_edges_survive_an_export_and_a_new_import():
    state = keep(lore_keep())
    again = keep(worldfile.export(state))
    assert lore.known_lore(again, "mara") == {"world:keep-history"}
    assert lore.world_lore(again) == lore.world_lore(state)
