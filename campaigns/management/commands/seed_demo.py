from django.core.management.base import BaseCommand
from django.db import transaction

from campaigns import story
from campaigns.models import Campaign, CanonRule
from storyteller import signin

DEMO_TITLE = "The Lantern of Greyhollow"

DEMO_OPENING = (
    "Rain drums on the slate roofs of Greyhollow as the last ferry of the evening bumps against the quay. "
    "You step ashore with your satchel and the letter that summoned you: your aunt Mara, the village's "
    "lamplighter, has not been seen for three nights, and the great lantern on the headland has gone dark. "
    "A fisherman mending nets watches you from under his hood. Up the hill, one window of the lamplighter's "
    "cottage still glows."
)

DEMO_CANON = [
    "The story takes place in 1892, on the island village of Greyhollow.",
    "Magic is rare, quiet and costly; it cannot raise the dead.",
    "Mara the lamplighter is the protagonist's aunt.",
]


class Command(BaseCommand):
    help = "Create the demo campaign for the local owner if they have no campaign yet."

    def handle(self, *args, **options):
        owner = signin.owner()
        if Campaign.objects.filter(owner=owner).exists():
            return
        with transaction.atomic():
            campaign = Campaign.objects.create(
                owner=owner,
                title=DEMO_TITLE,
                genre="gothic mystery",
                protagonist="Edrin Vale, a young cartographer, Mara's nephew",
                opening=DEMO_OPENING,
                pacing="unhurried, atmospheric",
                context_token_budget=4096,
                max_output_tokens=300,
            )
            for position, text in enumerate(DEMO_CANON):
                CanonRule.objects.create(campaign=campaign, text=text, position=position)
            story.start_campaign(campaign)
        self.stdout.write(f"Created the demo campaign “{DEMO_TITLE}”.")
