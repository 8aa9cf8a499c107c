import asyncio
import json

from django.core.management.base import BaseCommand, CommandError

from campaigns.models import Campaign, Replay
from storyteller import comparing, replays


class Command(BaseCommand):
    help = ("Play a line of a campaign again with another narrator, onto a new branch from the line's start, "
            "through the real turn path; then print how the two lines compare (issue 29).")

    def add_arguments(self, parser):
        parser.add_argument("--campaign", type=int, help="The campaign (its id, as in its page's address).")
        parser.add_argument("--from-depth", type=int, help="The first depth of the line (turn n's action is at "
                            "depth 2n-1, its reply at 2n).")
        parser.add_argument("--to-depth", type=int, help="The last depth of the line (on the current line).")
        parser.add_argument("--model", help="The model that plays the line again, as its server names it.")
        parser.add_argument("--url", default="", help="Its server's address (default: the configured server).")
        parser.add_argument("--api", choices=replays.API_CHOICES, default="",
                            help="The API its server speaks (default: the configured server's).")
        parser.add_argument("--temperature", type=float, help="Its temperature (default: the campaign's).")
        parser.add_argument("--max-output", type=int, help="Its longest reply in tokens (default: the campaign's).")
        parser.add_argument("--same-prompts", action="store_true",
                            help="Send each original turn's stored prompt unchanged, to compare the models alone.")
        parser.add_argument("--resume", type=int, metavar="REPLAY",
                            help="Go on with replay REPLAY (stopped, failed or cut short) from its last turn.")
        parser.add_argument("--json", action="store_true", help="Print the comparison per turn as JSON.")

    def handle(self, *args, **options):
        replay = self._resumed(options["resume"]) if options["resume"] else self._started(options)
        if not options["json"]:
            self.stdout.write(f"Replay {replay.pk}: branch #{replay.branch_id}, {replay.turns} turns with "
                              f"{replay.model}.")
        say = None if options["json"] else (
            lambda turn, total, node: self.stdout.write(f"  turn {turn} of {total} played"))
        replay = asyncio.run(replays.run(replay.pk, say=say))
        if replay.status == Replay.Status.RUNNING:
            raise CommandError(f"Replay {replay.pk} is being played by another process (pid {replay.runner}).")
        summary, rows = comparing.compare(Replay.objects.select_related("branch").get(pk=replay.pk))
        if options["json"]:
            self.stdout.write(json.dumps(comparing.as_json(replay, summary, rows), indent=1))
        else:
            self._print(replay, summary)
        if replay.status == Replay.Status.FAILED:
            raise CommandError(f"{replay.error} Fix it, then: manage.py replay --resume {replay.pk}")

    def _started(self, options):
        missing = [name for name in ("campaign", "from_depth", "to_depth", "model") if options[name] is None]
        if missing:
            raise CommandError("Give " + ", ".join("--" + name.replace("_", "-") for name in missing)
                               + " (or --resume REPLAY).")
        campaign = Campaign.objects.select_related("head_branch").filter(pk=options["campaign"]).first()
        if campaign is None:
            raise CommandError(f"There is no campaign {options['campaign']}; `manage.py story list` lists them.")
        try:
            return replays.start(campaign, from_depth=options["from_depth"], to_depth=options["to_depth"],
                                 model=options["model"], url=options["url"], api=options["api"],
                                 temperature=options["temperature"], max_output_tokens=options["max_output"],
                                 same_prompts=options["same_prompts"])
        except replays.ReplayRefused as refusal:
            raise CommandError(str(refusal)) from refusal

    def _resumed(self, replay_id):
        replay = Replay.objects.filter(pk=replay_id).first()
        if replay is None:
            raise CommandError(f"There is no replay {replay_id}.")
        if replay.status != Replay.Status.RUNNING:
            try:
                replays.resume(replay)
            except replays.ReplayRefused as refusal:
                raise CommandError(str(refusal)) from refusal
        return replay

    def _print(self, replay, summary):
        def pair(values, unit=""):
            return " / ".join("—" if v is None else f"{v}{unit}" for v in values)

        self.stdout.write(f"{summary.played} of {summary.turns} turns played ({replay.get_status_display().lower()}); "
                          f"original / replay:")
        self.stdout.write(f"  refused events per turn     {pair(summary.refused_per_turn)}")
        self.stdout.write(f"  failed recordings           {pair(summary.structured_failures)}")
        self.stdout.write(f"  whole reply per turn        {pair(summary.ms_per_turn, ' ms')}")
        self.stdout.write(f"  first words per turn        {pair(summary.first_word_ms, ' ms')}")
        self.stdout.write(f"  tokens in / out per turn    {pair(summary.tokens_in_per_turn)} ; "
                          f"{pair(summary.tokens_out_per_turn)}")
        divergence = summary.first_divergence
        self.stdout.write("  the state first differs after turn " + (str(divergence) if divergence else "— (never)"))
