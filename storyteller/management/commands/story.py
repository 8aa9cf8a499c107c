"""manage.py story append | state: write a story from a script, and read its state after any depth."""

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from campaigns import worldfile
from campaigns.state import registry
from storyteller import scripting, signin


class Command(BaseCommand):
    help = "Append scripted turns to a campaign (story append) or print its state after a depth (story state)."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        append = commands.add_parser("append", help="Commit the turns of a JSON Lines script after the head.")
        append.add_argument("script", help="the script: one turn per line (docs/events.md)")
        append.add_argument("--campaign", type=int, help="the campaign to append to")
        append.add_argument("--new", action="store_true", help="create the campaign first from --world")
        append.add_argument("--world", help="the world file (JSON or zip) a --new campaign starts from")
        append.add_argument("--owner", help="the new campaign's owner (default: the local owner)")
        append.add_argument("--json", action="store_true", help="print one JSON object per line")
        state = commands.add_parser("state", help="Print the state of the current line after a depth.")
        state.add_argument("--campaign", type=int, required=True)
        state.add_argument("--depth", default="", help="a depth, or 'all' for every depth (default: the head)")
        state.add_argument("--json", action="store_true", help="print JSON (an array with --depth all)")
        schema = commands.add_parser("schema", help="Print the JSON Schema of every event type (docs/events.md).")
        schema.add_argument("--type", help="one event type only")
        schema.add_argument("--recorder", action="store_true", help="the recorder's whole answer schema instead")

    def handle(self, *args, command, **options):
        try:
            if command == "append":
                self._append(**options)
            elif command == "schema":
                self._schema(**options)
            else:
                self._state(**options)
        except (ValueError, scripting.ScriptRefused, worldfile.WorldRefused) as error:
            raise CommandError(str(error)) from None

    def _append(self, script, campaign, new, world, owner, json, **options):
        if new == (campaign is not None):
            raise CommandError("Give either --campaign N or --new --world WORLD.json.")
        turns = scripting.read(_read(script).decode("utf-8"))
        if new:
            if not world:
                raise CommandError("--new needs --world WORLD.json, the world the campaign starts from.")
            made, findings = worldfile.create_campaign(_owner(owner), worldfile.read(_read(world)))
            self._say(json, {"campaign": made.pk, "lint": [str(f) for f in findings]},
                      f"Created campaign {made.pk}.", *[f"  lint {f}" for f in findings])
        else:
            made = scripting.campaign_for(campaign)
        for result in scripting.append(made, turns):
            text = (f"line {result['line']} (depth {result['depth']}): {result['type']} "
                    f"{result['status']}{': ' + result['reason'] if result['reason'] else ''}")
            self._say(json, result, text)

    def _state(self, campaign, depth, json, **options):
        made = scripting.campaign_for(campaign)
        if depth == "all":
            states = [scripting.state_after(made, d) for d in range(made.head_depth + 1)]
            if json:
                self.stdout.write(_json(states))
                return
        else:
            states = [scripting.state_after(made, int(depth) if depth else made.head_depth)]
            if json:
                self.stdout.write(_json(states[0]))
                return
        for state in states:
            self.stdout.write(_describe(state))

    def _schema(self, type, recorder, **options):
        if recorder:
            self.stdout.write(_json(registry.recorder_schema()))
            return
        names = [type] if type else list(registry.types_for("correction")) + ["world_section"]
        unknown = [name for name in names if name not in registry.TYPES]
        if unknown:
            raise CommandError(f"Unknown event type {unknown[0]!r}; the types are {', '.join(registry.TYPES)}.")
        schemas = {name: registry.schema(name, "world" if name == "world_section" else "correction") for name in names}
        self.stdout.write(_json(schemas[type] if type else schemas))

    def _say(self, as_json, value, *lines):
        if as_json:
            self.stdout.write(_json(value, indent=None))
        else:
            for line in lines:
                self.stdout.write(line)


def _read(path):
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise CommandError(f"Cannot read {path}: {error.strerror}.") from None


def _owner(name):
    if not name:
        return signin.owner()
    try:
        return get_user_model().objects.get(username=name)
    except get_user_model().DoesNotExist:
        raise CommandError(f"There is no user {name!r}.") from None


def _json(value, indent=2):
    return json.dumps(value, indent=indent, ensure_ascii=False)


def _describe(state):
    """The state as a person reads it in a terminal: who is where, what is locked, who holds what."""
    names = {e["key"]: e["name"] for e in state["entities"]}
    lines = [f"After depth {state['depth']} (node {state['node']}):"]
    for place in state["places"]:
        people = ", ".join(names.get(k, k) for k in place["characters"]) or "nobody"
        lines.append(f"  {place['name']}: {people}")
    doors = set()
    for exit in state["exits"]:
        if exit["state"] == "open" or (exit["to"], exit["from"], exit["door"]) in doors:
            continue
        back = exit["door"] and any((e["from"], e["to"], e["door"]) == (exit["to"], exit["from"], exit["door"])
                                    for e in state["exits"])
        if back:  # a door's two sides are one line
            doors.add((exit["from"], exit["to"], exit["door"]))
        way = "⇄" if back else "→"
        lines.append(f"  {names.get(exit['from'])} {way} {names.get(exit['to'])}: {exit['state']}")
    for item in state["items"]:
        if item["quantity"] > 0:
            chain = " in ".join(names.get(k, k) for k in item["chain"])
            lines.append(f"  {chain}" + (f" ×{item['quantity']}" if item["quantity"] != 1 else ""))
    return "\n".join(lines)
