"""A bundle is untrusted data: it never touches rows the import did not create (issue 10, point 1).

Every table the bundle carries is crafted with another person's database ids;
each crafted bundle is refused in words, or confined to the new campaign, and
every row that existed before the import is byte-for-byte what it was.
"""

import copy
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection

from campaigns.models import (
    Branch,
    Campaign,
    CanonRule,
    ContextSnapshot,
    Node,
    RecorderRun,
    SavePoint,
    StateEvent,
    StateRecord,
)
from knowledge.models import Source
from memory import bank
from memory.models import Checkpoint, Memory, MemoryRun
from storyteller import bundle
from storyteller.steps import compaction
from tests.storyteller.test_bundle import rich  # noqa: F401  (the fixture)

# The bundle's tables and the model each one is written to.
TABLES = {
    ("campaigns", "branches"): Branch,
    ("campaigns", "nodes"): Node,
    ("campaigns", "snapshots"): ContextSnapshot,
    ("campaigns", "save_points"): SavePoint,
    ("campaigns", "canon_rules"): CanonRule,
    ("campaigns", "state_events"): StateEvent,
    ("campaigns", "state_records"): StateRecord,
    ("campaigns", "recorder_runs"): RecorderRun,
    ("memory", "memories"): Memory,
    ("memory", "memory_runs"): MemoryRun,
    ("memory", "checkpoints"): Checkpoint,
    ("knowledge", "sources"): Source,
}


@pytest.fixture
def victim(rich):
    """The owner's campaign with a row in every table a bundle carries."""
    reply = Node.objects.filter(campaign=rich, role="narrator").order_by("depth").first()
    bank.record_run(reply, status=MemoryRun.Status.WRITTEN, written=1)
    compaction.write_by_hand(rich, "Aldric opened the gate and Mara hid the sundial.")
    rich.refresh_from_db()
    return rich


@pytest.fixture
def exported(victim):
    data = bundle.export_campaign(victim)
    for section, table in TABLES:
        assert data["sections"][section][table], f"the fixture leaves {table} empty"
    return data


def dump():
    """Return every row of every table the apps own (and the users), by table: what must not change."""
    tables = [t for t in connection.introspection.table_names()
              if t.startswith(("campaigns_", "memory_", "knowledge_", "auth_user")) and "_fts" not in t]
    with connection.cursor() as cursor:
        return {table: cursor.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall() for table in tables}


def rows_outside(snapshot, campaign):
    """Return ``snapshot`` without the rows that belong to ``campaign`` (the one an import created)."""
    nodes = set(Node.objects.filter(campaign=campaign).values_list("pk", flat=True))
    kept = {}
    with connection.cursor() as cursor:
        for table, rows in snapshot.items():
            columns = [c.name for c in connection.introspection.get_table_description(cursor, table)]

            def belongs(row):
                values = dict(zip(columns, row))
                if table == Campaign._meta.db_table:
                    return values["id"] == campaign.pk
                if "campaign_id" in values:
                    return values["campaign_id"] == campaign.pk
                return values.get("node_id") in nodes

            kept[table] = [row for row in rows if not belongs(row)]
    return kept


def import_as(user, data):
    return bundle.import_bundle(user, json.dumps(data).encode())


def reseal(data):
    data["checksum"] = bundle.checksum(data["sections"])
    return data


def crafted_fields(model, row):
    """Return the database names that would point a row of ``model`` at ``row``: its id and every foreign key."""
    fields = {"id": row.pk}
    for field in model._meta.concrete_fields:
        if field.is_relation:
            fields[field.attname] = getattr(row, field.attname)
    return fields


@pytest.mark.parametrize("section, table", list(TABLES), ids=[t for _, t in TABLES])
def test_a_row_naming_another_campaigns_ids_is_refused_and_nothing_changes(victim, exported, outsider, section,
                                                                            table):
    model = TABLES[(section, table)]
    scope = {"node__campaign": victim} if "campaign" not in {f.name for f in model._meta.fields} else \
        {"campaign": victim}
    target = model.objects.filter(**scope).order_by("pk").first()
    data = copy.deepcopy(exported)
    for row in data["sections"][section][table]:
        row.update(crafted_fields(model, target))
    reseal(data)
    before = dump()

    with pytest.raises(bundle.BundleRefused) as refusal:
        import_as(outsider, data)

    assert dump() == before, "a refused import writes nothing"
    message = str(refusal.value)
    assert table in message and "Nothing was imported" in message
    assert "_id" in message or "“id”" in message, message


def test_the_campaign_itself_cannot_name_an_owner_an_id_or_a_head(victim, exported, outsider):
    before = dump()
    for field, value in [("id", victim.pk), ("owner_id", victim.owner_id), ("owner", victim.owner_id),
                         ("head_branch_id", victim.head_branch_id)]:
        data = copy.deepcopy(exported)
        data["sections"]["campaigns"]["campaign"][field] = value
        with pytest.raises(bundle.BundleRefused, match=field):
            import_as(outsider, reseal(data))
    assert dump() == before


def test_a_link_to_a_row_the_bundle_does_not_carry_is_refused_in_words(victim, exported, outsider):
    before = dump()
    for section, table, field in [("campaigns", "nodes", "branch"), ("campaigns", "snapshots", "node"),
                                  ("campaigns", "state_records", "event"), ("memory", "memories", "branch")]:
        data = copy.deepcopy(exported)
        data["sections"][section][table][0][field] = victim.head_branch_id + 1000
        with pytest.raises(bundle.BundleRefused) as refusal:
            import_as(outsider, reseal(data))
        assert table in str(refusal.value) and field in str(refusal.value)
    assert dump() == before


def test_a_resealed_tampered_bundle_lands_only_in_a_new_campaign_of_the_importer(victim, exported, outsider):
    data = copy.deepcopy(exported)
    sections = data["sections"]
    sections["campaigns"]["campaign"]["title"] = "Stolen"
    for node in sections["campaigns"]["nodes"][1:]:
        node["text"] = "Tampered text."
    sections["campaigns"]["canon_rules"].append({**sections["campaigns"]["canon_rules"][0],
                                                 "text": "Obey the importer."})
    sections["memory"]["memories"][0]["text"] = "A planted memory."
    sections["memory"]["memories"][0]["pinned"] = True
    for branch in sections["campaigns"]["branches"][1:]:
        branch["parent"] = 0
    reseal(data)
    before = dump()

    imported = import_as(outsider, data)

    assert imported.owner == outsider and imported.pk != victim.pk
    assert rows_outside(dump(), imported) == before, "every row that existed is unchanged and no other has appeared"
    assert CanonRule.objects.filter(campaign=imported, text="Obey the importer.").exists()
    assert not CanonRule.objects.filter(campaign=victim, text="Obey the importer.").exists()
    assert Memory.objects.get(campaign=imported, text="A planted memory.").pinned


def test_report_ids_never_point_at_rows_the_import_did_not_create(victim, exported, outsider):
    others = Source.objects.filter(campaign=victim).order_by("pk")
    data = copy.deepcopy(exported)
    (with_knowledge,) = [s for s in data["sections"]["campaigns"]["snapshots"] if "knowledge" in s["report"]]
    knowledge = with_knowledge["report"]["knowledge"]
    knowledge["sources"].append(others.last().pk + 50)
    knowledge["used"][0]["source"] = others.last().pk + 50  # a source the bundle does not carry
    data["sections"]["knowledge"]["sources"] = data["sections"]["knowledge"]["sources"][:1]
    reseal(data)

    imported = import_as(outsider, data)

    ours = set(Source.objects.filter(campaign=imported).values_list("pk", flat=True))
    ours_passages = set(Source.objects.filter(campaign=imported).values_list("passages__pk", flat=True))
    (report,) = [s.report for s in ContextSnapshot.objects.filter(node__campaign=imported) if "knowledge" in s.report]
    assert set(report["knowledge"]["sources"]) <= ours
    for entry in [*report["knowledge"]["used"], *report["knowledge"]["standing"]]:
        assert entry["source"] in ours | {None} and entry["id"] in ours_passages | {None}


def path_set(data, path, value):
    target = data["sections"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


HUGE = 10 ** 30

# (where, value, words the refusal must contain): each is a value the forms (or the model's own rules) refuse.
REFUSED_VALUES = [
    (("campaigns", "campaign", "title"), "x" * 201, "at most 200 characters"),
    (("campaigns", "campaign", "title"), "", "title"),
    (("campaigns", "campaign", "title"), 42, "text"),
    (("campaigns", "campaign", "opening"), "x" * 2_000_000, "opening"),
    (("campaigns", "campaign", "point_of_view"), "sideways", "not a valid choice"),
    (("campaigns", "campaign", "context_token_budget"), HUGE, "context_token_budget"),
    (("campaigns", "campaign", "context_token_budget"), "4096", "whole number"),
    (("campaigns", "campaign", "context_token_budget"), 100, "512"),
    (("campaigns", "campaign", "max_output_tokens"), -5, "max_output_tokens"),
    (("campaigns", "campaign", "max_output_tokens"), 4000, "half of the context budget"),
    (("campaigns", "campaign", "temperature"), 1e300, "temperature"),
    (("campaigns", "campaign", "created_at"), "yesterday at noon", "date and time"),
    (("campaigns", "campaign", "created_at"), "2026-13-45T00:00:00Z", "date and time"),
    (("campaigns", "campaign", "head_depth"), 99, "head"),
    (("campaigns", "nodes", 1, "role"), "god", "not a valid choice"),
    (("campaigns", "nodes", 1, "depth"), True, "whole number"),
    (("campaigns", "nodes", 1, "text"), "x" * 300_000, "nodes"),
    (("campaigns", "nodes", 1, "direction"), "x" * 5000, "direction"),
    (("campaigns", "canon_rules", 0, "scope"), "maybe", "not a valid choice"),
    (("campaigns", "canon_rules", 0, "text"), "x" * 50_000, "canon_rules"),
    (("campaigns", "save_points", 0, "name"), "x" * 101, "at most 100 characters"),
    (("campaigns", "state_events", 0, "payload"), ["not", "an", "object"], "payload"),
    (("campaigns", "state_events", 0, "payload"), {"type": "add_fact", "value": "x" * 10_000}, "payload"),
    (("campaigns", "state_events", 0, "status"), "approved", "not a valid choice"),
    (("campaigns", "state_records", 0, "data"), "not an object", "data"),
    (("campaigns", "state_records", 0, "authority"), "god", "not a valid choice"),
    (("campaigns", "snapshots", 0, "report"), [1, 2, 3], "report"),
    (("memory", "memories", 0, "text"), "x" * 2_000_000, "memories"),
    (("memory", "memories", 0, "authority"), "canon", "not a valid choice"),
    (("memory", "memories", 0, "use_count"), HUGE, "use_count"),
    (("memory", "memories", 0, "last_used_at"), "2026-02-30T10:00:00Z", "date and time"),
    (("knowledge", "sources", 0, "classification"), "gospel", "not a valid choice"),
    (("knowledge", "sources", 1, "always_include"), True, "Canon"),
    (("knowledge", "sources", 0, "filename"), "run.exe", ".md or .txt"),
]


@pytest.mark.parametrize("where, value, words", REFUSED_VALUES,
                         ids=[f"{'.'.join(map(str, w))}={str(v)[:12]}" for w, v, _ in REFUSED_VALUES])
def test_values_the_forms_refuse_are_refused_in_words(exported, outsider, where, value, words):
    data = copy.deepcopy(exported)
    if where[:2] == ("knowledge", "sources") and where[-1] == "always_include":
        data["sections"]["knowledge"]["sources"][1]["classification"] = "reference"
    path_set(data, where, value)
    reseal(data)
    before = dump()
    with pytest.raises(bundle.BundleRefused) as refusal:
        import_as(outsider, data)
    message = str(refusal.value)
    assert words in message, message
    assert "Nothing was imported" in message
    for python in ("Traceback", "Error:", "Expecting", "line 1 column", "KeyError", "TypeError"):
        assert python not in message, message
    assert dump() == before


@pytest.mark.parametrize("data, words", [
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"format": "storyteller-campaign", "version": 2, "n": ' + b"9" * 5000 + b"}", "number"),
    (b'{"format": "storyteller-campaign", "version": 2, "n": NaN}', "number"),
    (b'{"format": "storyteller-campaign", "version": 2, "n": "\\ud800"}', "Unicode"),
    (b"{\"format\": \"storyteller-campaign\",", "not complete JSON"),
    (b"\xff\xfe{}", "UTF-8"),
], ids=["nesting", "huge-integer", "nan", "lone-surrogate", "truncated", "not-utf8"])
def test_malformed_json_is_refused_in_words_before_anything_is_read(outsider, data, words):
    with pytest.raises(bundle.BundleRefused) as refusal:
        bundle.import_bundle(outsider, data)
    message = str(refusal.value)
    assert words in message and "Nothing was imported" in message, message
    assert "Expecting" not in message and "char " not in message, message


def test_a_report_nested_past_the_limit_is_refused(exported, outsider):
    data = copy.deepcopy(exported)
    deep = {}
    for _ in range(200):
        deep = {"d": deep}
    data["sections"]["campaigns"]["snapshots"][0]["report"] = deep
    with pytest.raises(bundle.BundleRefused, match="nested"):
        import_as(outsider, reseal(data))


@pytest.mark.django_db(transaction=True)
def test_the_import_page_refuses_a_crafted_bundle_with_the_reason(client, owner, outsider, campaign):
    data = bundle.export_campaign(campaign)
    data["sections"]["campaigns"]["nodes"][0]["campaign_id"] = campaign.pk
    client.force_login(outsider)
    before = dump()
    response = client.post("/campaigns/import/", {
        "bundle": SimpleUploadedFile("b.json", json.dumps(reseal(data)).encode())})
    assert response.status_code == 400
    assert "campaign_id" in response.content.decode() and "Nothing was imported" in response.content.decode()
    assert dump() == before


def bad_date(campaign):
    data = bundle.export_campaign(campaign)
    data["sections"]["campaigns"]["campaign"]["created_at"] = "2026-02-30T25:61:00Z"
    return json.dumps(reseal(data)).encode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("payload, words", [
    (lambda campaign: b"[" * 50_000, "nested"),
    (bad_date, "date and time"),
    (lambda campaign: b'{"n": ' + b"1" * 10_000 + b"}", "number"),
], ids=["nesting", "bad-date", "huge-integer"])
def test_the_import_page_answers_bad_json_with_words_not_a_500(client, outsider, campaign, payload, words):
    client.force_login(outsider)
    response = client.post("/campaigns/import/", {"bundle": SimpleUploadedFile("b.json", payload(campaign))})
    assert response.status_code == 400
    assert words in response.content.decode()
