"""The play page's story time and world rules panels: the clock and agendas, variables, the roll log, triggers.

Each panel is one fragment, served alone to htmx and inside a page
otherwise, and re-read after every change of the story. Every change made
here is a typed correction at the head (``storytime.correct``, or
``storytime.skip`` for Skip time, which the routines' catch-up follows in the
same transaction): validated like anything the recorder proposes, refused
with its reason, and kept with who made it.
"""

import zoneinfo

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django_htmx.http import reswap, retarget
from django.views.decorators.http import require_GET, require_POST

from . import ruleforms, storytime, uploads, viewing
from .forms import CorrectionForm
from .models import StateEvent
from .state.registry import TYPES
from .state.time import agenda, calendar, clock, rulebook
from .state.world import world
from .views import campaign_for_user

# Panel -> (its fragment, its page, the event types its forms post).
PANELS = {
    "time": ("campaigns/_time_panel.html", "campaigns/time.html",
             ("skip", "clock_mode", "clock_start", "elapse", "engagement", "engagement_edit", "intent_add",
              "intent_edit", "routine_set", "calendar_set")),
    "variables": ("campaigns/_variables_panel.html", "campaigns/variables.html",
                  ("variable_change", "variable_define", "temperament")),
    "rolls": ("campaigns/_rolls_panel.html", "campaigns/rolls.html", ("roll", "dice_check_define")),
    "triggers": ("campaigns/_triggers_panel.html", "campaigns/triggers.html",
                 ("trigger_reset", "trigger_define", "beat_addressed", "judgment")),
}
# How many rolls the log shows, newest first.
ROLL_LOG = 30
# What the campaign form offers for its time zone (any IANA name this machine knows is accepted).
TIME_ZONES = sorted(zoneinfo.available_timezones())


def time_context(campaign, view):
    """Return what ``_time_panel.html`` shows: the date and time, the viewer's engagements and plans, and where
    those it may know of are (the author's view: everyone, their routines and plans)."""
    tz = campaign.time_zone
    current = view.clock()
    context = {"clock": None, "engagements": [], "people": [], "intents": [], "modes": clock.MODES}
    if current is None:
        created = int(campaign.created_at.timestamp() * 1000)
        context["starts"] = calendar.describe_instant(created - created % 60_000, tz)
        return context
    cal = view.calendar()
    at = current.at
    context["clock"] = {"at": at, "text": calendar.describe_instant(at, tz, cal), "mode": current.mode,
                        "local": calendar.local(at, tz).strftime("%Y-%m-%d %H:%M"), "time_zone": tz,
                        "notice": view.clock_notice(), "provenance": view.clock_provenance()}
    engagements = view.engagements()
    shown, more = agenda.due(engagements, at)
    due = {e.id for e in shown}
    context["engagements"] = [
        {"engagement": e, "text": agenda.describe_engagement(e, at, tz, view.name_of), "overdue": e.overdue(at),
         "due": e.id in due} for e in sorted(engagements, key=lambda e: (e.status != "pending", e.at))]
    context["more_due"] = more
    routines = view.routines()
    moment = calendar.moment(at, tz)
    intents = view.intents()
    for key in view.whereabouts():
        place = view.where_is(key)
        slot = routines[key].at(moment, cal)[0] if key in routines else None
        context["people"].append({
            "key": key, "name": view.name_of(key), "place": place, "place_name": view.name_of(place) if place else "",
            "you": key == view.who, "window": slot, "elsewhere": bool(slot and slot.place and slot.place != place),
            "should_be": view.name_of(slot.place) if slot and slot.place else "", "routine": key in routines,
            "intents": agenda.top_intents([i for i in intents if i.who == key])})
    return context


def variables_context(campaign, view):
    """Return what ``_variables_panel.html`` shows: the values the viewer may see, and (the author) the forms."""
    rows = [{"object": obj, "name": view.name_of(obj) if obj != "world" else "the world", "variable": name,
             "text": definition.describe(value) if definition else f"{name} {value}",
             "visibility": definition.visibility if definition else ""}
            for obj, name, value, definition in sorted(view.variables(), key=lambda row: (view.name_of(row[0]),
                                                                                          row[1]))]
    definitions = view.definitions()
    context = {"definitions": [d for d in definitions if not d.builtin], "builtins": [d for d in definitions
                                                                                     if d.builtin],
               "values": rows, "temperaments": [], "targets": []}
    if view.author:
        now = view.everything
        context["temperaments"] = [{"name": now.name_of(r.subject), "value": r.value}
                                   for r in now.of_kind("temperament")]
        context["targets"] = [now.name_of(key) for key in world.characters(now)] + ["world"]
    return context


def rolls_context(campaign, view):
    """Return what ``_rolls_panel.html`` shows: the rolls the viewer may see, newest first, and the checks."""
    rolls = list(reversed(view.rolls()))[:ROLL_LOG]
    return {"rolls": [{"record": r, "data": r.data, "who": view.name_of(r.data.get("who")) if r.data.get("who")
                       else ""} for r in rolls],
            "checks": sorted(view.checks().items()),
            "characters": [name for _, name, _ in view.people_known()]}


def triggers_context(campaign, view):
    """Return what ``_triggers_panel.html`` shows: for a player, what it was told is coming; for the author, every
    trigger, its status, beats and cues."""
    if not view.author:
        return {"announcements": view.announcements()}
    now = view.everything
    tz = campaign.time_zone
    notes = rulebook.notes_of(now)
    rows = []
    for trigger, status in view.triggers():
        announce = trigger.announce
        rows.append({"trigger": trigger, "status": status,
                     "last_fired": calendar.describe_instant(status.last_fired, tz) if status.last_fired is not None else "",
                     "announce": announce, "audience": _audience(announce["audience"], now) if announce else "",
                     "judged": trigger.judged,
                     "notes": [n for n in notes if n.trigger == trigger.id]})
    return {"triggers": rows, "pending": [n for n in notes if n.status == "pending"],
            "judgments": rulebook.judgments_of(now)}


def _audience(audience, now):
    if audience == "everyone":
        return "everyone"
    if isinstance(audience, dict):
        return f"those at {now.name_of(audience.get('place', ''))}"
    return ", ".join(now.name_of(key) for key in audience)


CONTEXTS = {"time": time_context, "variables": variables_context, "rolls": rolls_context,
            "triggers": triggers_context}


def render_panel(request, campaign, panel, *, message="", error="", reload_panels=False, rule_form=None):
    """Return a panel's fragment for htmx (the others reloaded after a change), or its page around it.

    ``rule_form`` is a rule's form as the person left it (refused): shown open, in place of an empty one. The
    forms are the author's (the panel shows them in the author's view only).
    """
    campaign.refresh_from_db()
    view = viewing.view_of(campaign)
    fragment, page = PANELS[panel][:2]
    kind = next(kind for kind, name in ruleforms.PANEL_OF.items() if name == panel)
    context = {"campaign": campaign, "view": view, "panel": panel, "rules_message": message, "rules_error": error,
               "reload_panels": reload_panels, **CONTEXTS[panel](campaign, view),
               "form": rule_form or ruleforms.blank(kind, _sync_url(campaign, kind)),
               "rule_open": rule_form is not None}
    return render(request, fragment if request.htmx else page, context)


def _panel_view(panel):
    @login_required
    @require_GET
    def view(request, pk):
        return render_panel(request, campaign_for_user(request, pk), panel)
    view.__name__ = f"{panel}_panel"
    view.__doc__ = f"The {panel} panel of the play page."
    return view


time_panel = _panel_view("time")
variables_panel = _panel_view("variables")
rolls_panel = _panel_view("rolls")
triggers_panel = _panel_view("triggers")


class RuleCorrectionForm(CorrectionForm):
    """A correction from a rules panel: ``data`` fields of kind json are posted as JSON text (read by the bounded
    reader imports use), names comma separated (split by ``CorrectionForm``)."""

    def payload(self, posted):
        event = super().payload(posted)
        fields = TYPES[event["type"]].fields
        for name, value in list(event["data"].items()):
            if fields[name].kind == "json":
                if len(value.encode()) > uploads.FIELD.max_bytes:
                    raise ValueError(f"{name} is {len(value.encode()):,} bytes of JSON; a rule may be at most "
                                     f"{uploads.FIELD.max_bytes:,}")
                try:
                    event["data"][name] = uploads.parse(value, uploads.FIELD, name)
                except uploads.UploadRefused as refusal:
                    raise ValueError(f"{str(refusal).rstrip('.')}; correct it and send again") from None
        return event


@login_required
@require_POST
def rules_correct(request, pk, panel):
    """Apply one correction from a rules panel; return the panel, and reload the others (they show it too)."""
    campaign = campaign_for_user(request, pk)
    if panel not in PANELS:
        return render_panel(request, campaign, "time", error="Nothing was changed: there is no such panel.")
    form = RuleCorrectionForm(request.POST)
    if not form.is_valid() or form.cleaned_data["type"] not in PANELS[panel][2]:
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        return render_panel(request, campaign, panel, error=f"Nothing was changed ({problems or 'not this panel'}).")
    try:
        payload = form.payload(request.POST)
    except ValueError as error:
        return render_panel(request, campaign, panel, error=f"Nothing was changed: {error}.")
    if payload["type"] == "skip":
        event = storytime.skip(campaign, request.user, payload["data"])
    else:
        event = storytime.correct(campaign, request.user, payload)
    if event.status == StateEvent.Status.REJECTED:
        return render_panel(request, campaign, panel, error=f"Nothing was changed: {event.reason}.")
    return render_panel(request, campaign, panel, message=_done(event), reload_panels=True)


def _done(event):
    kind = event.payload.get("type")
    data = event.payload.get("data", {})
    if kind == "skip":
        return f"Skipped {calendar.describe_duration(data['log']['to'] // 1000 - data['log']['from'] // 1000)}."
    if kind == "roll":
        return f"Rolled {data['result']['expression']}: {data['result']['read']}."
    return "Corrected. The narrator sees it from the next turn."


def _sync_url(campaign, kind):
    return reverse("rule_form", args=[campaign.pk, kind])


def _posted_rule(campaign, kind, posted):
    """Return (the rule's form as posted, read from its JSON if that changed, "" or what is wrong with the JSON)."""
    try:
        form, error = ruleforms.FORMS[kind].from_post(posted), ""
    except ValueError as problem:
        form, error = ruleforms.FORMS[kind](posted), (
            f"The JSON cannot be read ({problem}); the form still shows what it had. Correct the JSON, or change the "
            "form and the JSON follows.")
    return form.wire(_sync_url(campaign, kind)), error


@login_required
@require_POST
def rule_form(request, pk, kind):
    """Redraw a rule's form from what changed: its fields (the JSON follows) or its JSON (the fields follow)."""
    campaign = campaign_for_user(request, pk)
    if kind not in ruleforms.FORMS:
        raise Http404("no such kind of rule")
    form, error = _posted_rule(campaign, kind, request.POST)
    sample = ruleforms.sample_roll(form.entry()) if kind == "dice" and not error else None
    whole = bool(error or request.POST.get("redraw"))
    response = render(request, "campaigns/_rule_form.html" if whole else "campaigns/_rule_sync.html",
                      {"campaign": campaign, "form": form, "rule_error": error, "sample": sample,
                       "json_open": bool(error), "oob": not whole})
    if whole and not request.POST.get("redraw"):  # unreadable JSON found on a field's change: the whole form says so
        response = reswap(retarget(response, f"#rule-form-{kind}"), "outerHTML")
    return response


@login_required
@require_POST
def rule_save(request, pk, kind):
    """Define the rule the form (or its JSON) makes, as a correction at the head; refused, the form stays filled."""
    campaign = campaign_for_user(request, pk)
    if kind not in ruleforms.FORMS:
        raise Http404("no such kind of rule")
    panel = ruleforms.PANEL_OF[kind]
    form, error = _posted_rule(campaign, kind, request.POST)
    if error:
        return render_panel(request, campaign, panel, error=error, rule_form=form)
    event = storytime.correct(campaign, request.user, ruleforms.correction(form))
    if event.status == StateEvent.Status.REJECTED:
        return render_panel(request, campaign, panel, error=f"Nothing was changed: {event.reason}.", rule_form=form)
    return render_panel(request, campaign, panel, message=_defined(kind, form), reload_panels=True)


def _defined(kind, form):
    entry = form.entry()
    name = entry.get("name") or entry.get("id") or entry.get("key") or entry.get("who")
    what = {"variable": "The variable", "trigger": "The trigger", "dice": "The check", "routine": "The routine of"}
    return f"{what[kind]} {name} is {'set' if kind == 'routine' else 'defined'}. The narrator sees it from the next turn."
