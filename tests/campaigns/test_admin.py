"""The admin lists every story model for the owner, and canon rules are editable there."""

import pytest
from django.urls import reverse

from campaigns.models import CanonRule
from storyteller import signin
from tests.campaigns.test_lineage import act


@pytest.fixture
def admin_client(client, campaign):
    client.force_login(signin.owner())
    act(campaign, "open the gate", "The gate creaks open.")
    return client


@pytest.mark.parametrize("model", ["campaign", "branch", "node", "contextsnapshot", "savepoint", "canonrule"])
def test_every_story_model_has_a_searchable_admin_list(admin_client, model):
    response = admin_client.get(reverse(f"admin:campaigns_{model}_changelist"), {"q": "gate"})
    assert response.status_code == 200


def test_story_nodes_cannot_be_changed_or_deleted_in_the_admin(admin_client):
    from campaigns.models import Node

    node = Node.objects.get(depth=2)
    page = admin_client.get(reverse("admin:campaigns_node_change", args=[node.pk])).content.decode()
    assert 'name="text"' not in page
    assert admin_client.post(reverse("admin:campaigns_node_delete", args=[node.pk]), {"post": "yes"}).status_code == 403
    assert Node.objects.filter(pk=node.pk).exists()


def test_canon_rules_are_editable_in_the_admin(admin_client, campaign):
    rule = campaign.canon_rules.get()
    response = admin_client.post(
        reverse("admin:campaigns_canonrule_change", args=[rule.pk]),
        {"campaign": campaign.pk, "text": "Magic can never resurrect the dead.", "scope": "invariant", "enabled": "on",
         "position": 0},
    )
    assert response.status_code == 302
    assert CanonRule.objects.get(pk=rule.pk).text == "Magic can never resurrect the dead."


def test_a_whole_campaign_can_be_deleted_but_not_a_branch_under_its_nodes(admin_client, campaign):
    from django.db.models import RestrictedError

    from campaigns.models import Branch, Campaign, Node

    with pytest.raises(RestrictedError):
        Branch.objects.get(pk=campaign.head_branch_id).delete()
    # The admin never deletes story (its nodes are read-only there)...
    response = admin_client.post(reverse("admin:campaigns_campaign_delete", args=[campaign.pk]), {"post": "yes"})
    assert response.status_code == 403 and Node.objects.exists()
    # ...but the campaign as a whole can go, with everything in it.
    Campaign.objects.get(pk=campaign.pk).delete()
    assert not Campaign.objects.exists() and not Node.objects.exists() and not Branch.objects.exists()
