"""``manage.py memory_diagnostic``: scenarios by name or all, a table or one JSON object, isolated by default."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from campaigns.models import Campaign

pytestmark = pytest.mark.django_db(transaction=True)


def test_json_maps_each_scenario_asked_for_to_its_verdict_and_stages():
    out = StringIO()
    call_command("memory_diagnostic", "--scenario", "long_block_fact_early", "--scenario", "long_block_fact_late",
                 "--json", "--here", stdout=out)
    results = json.loads(out.getvalue())
    assert list(results) == ["long_block_fact_early", "long_block_fact_late"]
    for result in results.values():
        assert result["verdict"] == "injected" and result["counts"]
        assert set(result["stages"]) == {"created", "retained", "ranked", "injected"}
        assert result["isolation"]["holds"]
    # --here plays as its own user, in campaigns named for the diagnostic.
    assert set(Campaign.objects.values_list("title", "owner__username")) == {
        ("Memory diagnostic: long_block_fact_early", "memory-diagnostic"),
        ("Memory diagnostic: long_block_fact_late", "memory-diagnostic")}


def test_by_default_it_runs_in_a_throwaway_data_folder_and_touches_no_campaign_here():
    out = StringIO()
    call_command("memory_diagnostic", "--scenario", "long_block_fact_late", stdout=out)
    [line] = out.getvalue().splitlines()
    assert line.split()[:2] == ["long_block_fact_late", "injected"] and "isolation holds" in line
    assert not Campaign.objects.exists()


def test_an_unknown_scenario_is_refused_with_the_names_there_are():
    with pytest.raises(CommandError, match="independent_default"):
        call_command("memory_diagnostic", "--scenario", "no_such_scenario")


def test_a_scenario_or_all_is_required():
    with pytest.raises(CommandError, match="--scenario --all"):
        call_command("memory_diagnostic")
