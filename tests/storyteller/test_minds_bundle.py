"""Characters' minds in a campaign bundle: the records and recall uses travel, the recall index is rebuilt."""

from campaigns.models import Campaign
from memory import recall_index
from memory.models import RecallItem, RecallUse
from storyteller import bundle
from tests.storyteller.test_minds_views import KITCHEN, SCENE, played


def test_records_and_recall_uses_travel_and_the_index_is_rebuilt_after_the_import(owner):
    campaign = played(owner, KITCHEN, SCENE)
    campaign.memory_recall, campaign.reranker_url = 7, "http://127.0.0.1:9/"
    campaign.save()
    recall_index.record_use(campaign.pk, (campaign.head_branch_id, campaign.head_depth), "mara",
                            ["perception:hid-key:mara"])
    copy = bundle.import_bundle(owner, bundle.dumps(campaign))
    assert copy.pk != campaign.pk
    assert sorted(RecallItem.objects.filter(campaign=copy).values_list("slot", "owner", "text")) == sorted(
        RecallItem.objects.filter(campaign=campaign).values_list("slot", "owner", "text"))
    [use] = RecallUse.objects.filter(campaign=copy)
    assert (use.owner, use.slot, use.branch_id) == ("mara", "perception:hid-key:mara", copy.head_branch_id)
    copy = Campaign.objects.get(pk=copy.pk)
    assert copy.memory_recall == 7
    assert copy.reranker_url == "", "an imported bundle is no reason to make a request"
