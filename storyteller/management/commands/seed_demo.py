import json
from pathlib import Path

from django.core.management.base import BaseCommand

from campaigns import worldfile
from campaigns.models import Campaign
from storyteller import signin

# A small world of its own, so a new person sees the world model on the first run: the quay, the lane,
# Mara's cottage, the headland and its lantern behind a locked door, and the key somewhere in the village.
DEMO_WORLD = Path(worldfile.__file__).resolve().parent / "worlds" / "greyhollow.json"


class Command(BaseCommand):
    help = "Create the demo campaign (campaigns/worlds/greyhollow.json) for the local owner if they have none."

    def handle(self, *args, **options):
        owner = signin.owner()
        if Campaign.objects.filter(owner=owner).exists():
            return
        campaign, _ = worldfile.create_campaign(owner, json.loads(DEMO_WORLD.read_text()), context_token_budget=4096,
                                                max_output_tokens=300)
        self.stdout.write(f"Created the demo campaign “{campaign.title}”.")
