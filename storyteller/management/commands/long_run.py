import asyncio
import contextlib

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from storyteller import signin
from storyteller.diagnostics import long_run
from storyteller.diagnostics.stubs import DiagnosticStubs
from storyteller.llm.fake_server import FakeModelServer


class Command(BaseCommand):
    help = ("Play a long campaign against the configured model server through the real turn path, plant a "
            "story-only fact, ask for it at the end and say whether memory alone kept it (seed 004 §C.5). "
            "Writes a JSON file under the data folder and a report page on the campaign.")

    def add_arguments(self, parser):
        parser.add_argument("--turns", type=int, help="Turns to play before the recall question (default 100; "
                            "with --resume, the run's own).")
        parser.add_argument("--independent-fact", action="store_true",
                            help="Plant a story-only fact at turn 2 and judge its recall at the end.")
        parser.add_argument("--resume", action="store_true",
                            help="Go on with an unfinished run from its last committed turn.")
        parser.add_argument("--campaign", type=int, help="With --resume: the run's campaign (default: the newest "
                            "unfinished run).")
        parser.add_argument("--stop-after", type=int, help="Play at most this many turns now; --resume goes on.")
        parser.add_argument("--stubs", action="store_true",
                            help="Play against the deterministic stubs of seed 004 §C.4 (script narrator, best-case "
                            "summariser, concept embedder) on a fake model server on a free loopback port, instead of "
                            "the configured server.")
        parser.add_argument("--owner", help="Who owns the run's campaign (default: the local owner).")
        parser.add_argument("--context-budget", type=int, default=4096, help="The campaign's context_token_budget.")
        parser.add_argument("--max-output", type=int, default=200, help="The campaign's max_output_tokens.")
        parser.add_argument("--capacity", type=int, help="The memory bank's capacity for this run (default: "
                            "STORYTELLER_MEMORY_BANK_CAPACITY); a small one shows eviction within 100 turns.")
        parser.add_argument("--top-k", type=int, help="How many memories a turn may use in this run (default: "
                            "STORYTELLER_MEMORY_TOP_K; seed 004 §K's real run used 4).")

    def handle(self, *args, stubs, **options):
        with contextlib.ExitStack() as stack:
            if stubs:
                stubbed = DiagnosticStubs(facts=[long_run.planted_fact()])
                server = stack.enter_context(FakeModelServer(stubs=stubbed))
                stack.enter_context(override_settings(
                    STORYTELLER_LLM_URL=server.url, STORYTELLER_LLM_URL_CONFIGURED=True, STORYTELLER_LLM_API="ollama"))
                self.stdout.write(f"Stub model server on {server.url}")
            self._run(**options)

    def _run(self, *, turns, independent_fact, resume, campaign, stop_after, owner, context_budget, max_output,
             capacity, top_k, verbosity, **options):
        try:
            if resume:
                if independent_fact or capacity or top_k:
                    raise long_run.RunError("--independent-fact, --capacity and --top-k are the run's own settings; "
                                            "leave them out with --resume.")
                run = long_run.resume(campaign, turns=turns)
            else:
                run = long_run.start(self._owner(owner), turns=100 if turns is None else turns,
                                     independent_fact=independent_fact, context_token_budget=context_budget,
                                     max_output_tokens=max_output, capacity=capacity,
                                     top_k=top_k)
            self.stdout.write(f"Long run of campaign {run['campaign']}: {long_run.report_path(run['campaign'])}")
            run = asyncio.run(long_run.play(run, stop_after=stop_after,
                                            say=self.stdout.write if verbosity > 1 else lambda line: None))
        except long_run.RunError as error:
            raise CommandError(str(error)) from error
        except KeyboardInterrupt:
            raise CommandError("Interrupted: the run keeps every committed turn. Go on with: "
                               "manage.py long_run --resume") from None
        self.stdout.write(f"{run['status']}: {len(run['timeline'])} turns in {run['elapsed_seconds']:.1f} s")
        if run["status"] == "stopped":
            self.stdout.write(f"Go on with: manage.py long_run --resume --campaign {run['campaign']}")
        if run["verdict"]:
            self.stdout.write(f"verdict: {run['verdict']}")
        self.stdout.write(str(long_run.report_path(run["campaign"])))

    def _owner(self, username):
        if username is None:
            return signin.owner()
        try:
            return get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise long_run.RunError(f"There is no user {username!r}; leave --owner out to use the local owner.")
