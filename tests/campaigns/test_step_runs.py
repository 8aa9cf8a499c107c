"""The seven run tables of the post-turn steps share one abstract model, keep their names, and lose no row to it."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from campaigns.models import ConsolidationRun, JudgeRun, OffstageRun, RecorderRun, StepRun
from memory.models import CheckpointRun, MemoryRun, MindsRun

RUNS = {RecorderRun: "campaigns_recorderrun", JudgeRun: "campaigns_judgerun", OffstageRun: "campaigns_offstagerun",
        ConsolidationRun: "campaigns_consolidationrun", MemoryRun: "memory_memoryrun",
        CheckpointRun: "memory_checkpointrun", MindsRun: "memory_mindsrun"}
# The last migrations before the tables shared StepRun.
BEFORE = [("campaigns", "0011_evening_controls"), ("memory", "0009_minds")]


def test_every_run_table_is_a_step_run_under_its_own_name_with_its_own_statuses():
    for model, table in RUNS.items():
        assert issubclass(model, StepRun) and model._meta.db_table == table
        assert model._meta.get_field("status").choices == model.Status.choices
        assert {"node", "status", "error", "updated_at"} <= {field.name for field in model._meta.fields}
        assert model.Status.FAILED == "failed" and repr(model.Status.FAILED) == f"{model.__name__}.Status.FAILED"
    assert RecorderRun(status="waiting").get_status_display() == "Waiting for a stage boundary"


@pytest.mark.django_db
def test_the_models_and_the_migrations_agree():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def _rows():
    with connection.cursor() as cursor:
        found = {}
        for table in RUNS.values():
            cursor.execute(f"SELECT * FROM {table} ORDER BY id")
            columns = [column[0] for column in cursor.description]
            found[table] = [dict(zip(columns, row)) for row in cursor.fetchall()]
    return found


@pytest.mark.django_db(transaction=True)
def test_migrating_a_database_with_runs_keeps_every_row_as_it_was():
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(BEFORE)
    try:
        old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
        user = old.get_model("auth", "User").objects.create(username="rows")
        campaign = old.get_model("campaigns", "Campaign").objects.create(owner=user, title="Rows")
        branch = old.get_model("campaigns", "Branch").objects.create(campaign=campaign)
        for depth in (1, 3):
            node = old.get_model("campaigns", "Node").objects.create(campaign=campaign, branch=branch, depth=depth,
                                                                     role="narrator", text=f"reply {depth}")
            common = {"node": node, "error": f"why {depth}"}
            old.get_model("campaigns", "RecorderRun").objects.create(**common, status="waiting", attempts=depth,
                                                                     model="m")
            old.get_model("campaigns", "JudgeRun").objects.create(**common, status="nothing", model="m")
            old.get_model("campaigns", "OffstageRun").objects.create(**common, status="nothing_due", played=depth,
                                                                     waiting=1, note="n", attempts=2)
            old.get_model("campaigns", "ConsolidationRun").objects.create(**common, status="not_due", note="q")
            with_campaign = {**common, "campaign": campaign}
            old.get_model("memory", "MemoryRun").objects.create(**with_campaign, status="nothing_due", written=depth)
            old.get_model("memory", "CheckpointRun").objects.create(**with_campaign, status="not_needed")
            old.get_model("memory", "MindsRun").objects.create(**with_campaign, status="recorded", applied=depth,
                                                               asked_again=True, model="m")
        before = _rows()
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    assert _rows() == before
    assert all(len(rows) == 2 for rows in before.values())
    assert RecorderRun.objects.get(node__depth=3).get_status_display() == "Waiting for a stage boundary"
