"""Pages: campaigns, play, branches, the prompt inspector, model settings and sign-in.

Views parse, call one function, render. Every campaign is fetched through
``_get_campaign_for_user`` so another person's campaign is a 404.
"""

import json
import time

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpResponse
from django.shortcuts import aget_object_or_404, get_object_or_404, redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_str
from django.utils.text import slugify
from django.utils.http import urlsafe_base64_decode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap, retarget

from campaigns import importing, lineage, playing, rule_views, seating, story, storytime, transcript, worldfile
from campaigns import views as campaign_views
from campaigns.forms import (MAX_ACTION, MAX_DIRECTION, CampaignForm, CanonRuleFormSet, EditCampaignForm,
                             NewCampaignForm, SavePointForm)
from campaigns.models import NODE_CHARS, Branch, Campaign, Node, OffstageRun, Round, SavePoint, TableRound
from campaigns.state.time import calendar
from memory import bank as memory_bank
from memory import views as memory_views

from . import bundle, editing, llm, narrator_views, signin
from .context import player_name, prefix_hash
from .diagnostics import long_run
from .steps import away, compaction, memories, postturn

# The play page shows the newest part of the lineage; the rest is a link away.
STORY_WINDOW = 120


def play_body_context(campaign, error="", notice=""):
    """Return what the play page's story and controls render: the story window, its versions and the controls."""
    path = lineage.path_of(campaign)
    nodes = mark_rounds(mark_versions(campaign.pk, list(path.nodes().order_by("-depth")[:STORY_WINDOW])[::-1]))
    return {
        "campaign": campaign,
        "nodes": nodes,
        "earlier_count": campaign.head_depth + 1 - len(nodes),
        **controls_context(campaign),
        "turn_error": error,
        "turn_notice": notice,
        "author_view": campaign.author_view,
    }


def controls_context(campaign):
    """Return which of Undo, Redo and Retry ``campaigns/_controls.html`` offers at the campaign's head."""
    return {
        "can_undo": campaign.head_depth > 0,
        "can_redo": lineage.can_redo(campaign),
        "can_retry": campaign.head_depth >= 2,
    }


def mark_versions(campaign_id, nodes):
    """Give each of ``nodes`` its ``versions`` (None unless Retry wrote other versions of that reply); return them."""
    found = lineage.versions(campaign_id, nodes)
    for node in nodes:
        node.versions = found.get(node.pk)
    return nodes


def mark_rounds(nodes):
    """Give each reply of ``nodes`` its game-master ``voice_rounds`` and ``narration`` (none: a single narrator's).

    Rounds hang under their reply node, so whichever version of a reply the
    line shows brings its own rounds (undo, retry and branches need no rule).
    """
    replies = {node.pk: node for node in nodes if node.role == Node.Role.NARRATOR}
    for node in replies.values():
        node.voice_rounds, node.narration = [], ""
    # A table round's input (issue 30) is every seat's action, composed: its direction is the table's own
    # stage direction (engine words, in the inspector for the author), and it is not edited as one person's action.
    players = {node.pk: node for node in nodes if node.role == Node.Role.PLAYER}
    rounds = set(TableRound.objects.filter(node_id__in=players).values_list("node_id", flat=True)) if players else ()
    for pk, node in players.items():
        node.round_input = pk in rounds
    zones = {}
    for row in Round.objects.filter(node_id__in=replies, kind=Round.Kind.GM).order_by("node_id", "number"):
        node = replies[row.node_id]
        row.voices = [o for o in row.outputs if o.get("speaker") != "gm"]
        row.when = ""  # the story time the round began, as the page shows it (none before the clock starts)
        if row.started_ms is not None:
            if node.campaign_id not in zones:
                zones[node.campaign_id] = Campaign.objects.values_list("time_zone", flat=True).get(pk=node.campaign_id)
            row.when = f"{calendar.local(row.started_ms, zones[node.campaign_id]):%H:%M}"
        node.narration = next((o["text"] for o in row.outputs if o.get("speaker") == "gm"), node.narration)
        node.voice_rounds.append(row)
    return nodes


# Each play page names itself (static/js/play.js) on its htmx requests and its
# websocket, so the tab that moved the head is not redrawn a second time.
TAB_HEADER = "X-Storyteller-Tab"


def announce_story_changed(campaign, request=None):
    """Tell the campaign's other open tabs to redraw (after the change has committed)."""
    layer = get_channel_layer()
    event = {"type": "story.changed", "tab": request.headers.get(TAB_HEADER, "") if request else ""}
    transaction.on_commit(lambda: async_to_sync(layer.group_send)(f"campaign-{campaign.pk}", event))


def _play_body(request, campaign, **extra):
    """Answer a head move: the story, its controls and messages, and the panels reloading; or the page without htmx."""
    if request.htmx:
        return render(request, "campaigns/_play_update.html", {**play_body_context(campaign, **extra),
                                                               "show_messages": True})
    return redirect("play", campaign.pk)


@login_required
@require_GET
def campaign_list(request):
    campaigns = _campaigns_of(request.user)
    return render(request, "campaigns/campaign_list.html",
                  {"campaigns": campaigns.filter(archived_at__isnull=True), "bundle_limit": bundle.max_bytes(),
                   "tables": seating.tables_of(request.user),
                   "archived": campaigns.filter(archived_at__isnull=False).order_by("-archived_at")})


def _campaigns_of(user):
    """Return the person's campaigns, each with ``last_played``: when its newest turn or retry was written, or None.

    Not ``updated_at``: creating or editing a campaign is not playing it.
    """
    played = (Node.objects.filter(campaign=OuterRef("pk")).exclude(role=Node.Role.OPENING)
              .order_by("-created_at").values("created_at")[:1])
    return Campaign.objects.filter(owner=user).annotate(last_played=Subquery(played))


@importing.upload_view
@login_required
@require_http_methods(["GET", "POST"])
@seating.hosts_only
async def campaign_create(request):
    """The new-campaign form, its budget starting from what the default narrator model can read.

    Async because asking the model server must not hold the thread the database work shares; a campaign
    started from a world file is made on the import thread (campaigns.importing), as every import is.
    """
    info = await llm.adescribe_model()
    # The form (a world file may be large) is read on a thread of its own, not the one database work shares
    # (for a multipart post importing.upload_view's CSRF check has read it already).
    files = await sync_to_async(lambda: request.FILES, thread_sensitive=False)() if request.method == "POST" else {}
    if files.get("world"):
        request.user = await request.auser()  # resolved here, not again on the import thread
        if importing.full():
            return await sync_to_async(_create_campaign)(request, info, busy=True)
        return await importing.run(_create_campaign, request, info)
    return await sync_to_async(_create_campaign)(request, info)


def _create_campaign(request, info, busy=False):
    # A server that cannot be asked says nothing about the window; the form then says nothing either.
    form = NewCampaignForm(request.POST or None, request.FILES or None, window=info.context_length,
                           model="" if info.error else info.label, owner=request.user)
    if busy:
        form.is_valid()
        form.add_error("world", importing.BUSY)
    elif request.method == "POST" and form.is_valid() and form.cleaned_data["world"] is not None:
        fields = {name: form.cleaned_data[name] for name in CampaignForm.Meta.fields}
        try:
            prepared = worldfile.prepare(request.user, form.cleaned_data["world"], **fields)
        except worldfile.WorldRefused as refusal:
            form.refuse_world(refusal)
        else:
            form.forget_world()
            token = importing.start(request.user, f"the world of “{prepared.values['title']}”", prepared.rows,
                                    lambda add: prepared.write(progress=add))
            return redirect("import_progress", token)
    elif request.method == "POST" and form.is_valid():
        campaign = form.save(commit=False)
        campaign.owner = request.user
        campaign.narrator_model = ""
        with transaction.atomic():
            campaign.save()
            story.start_campaign(campaign)
        return redirect("play", campaign.pk)
    form.keep_world()  # the page is drawn again, and a browser empties its file input: the file stays chosen here
    return render(request, "campaigns/campaign_form.html", {"form": form, "creating": True})


@login_required
@require_http_methods(["GET", "POST"])
def campaign_edit(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    form = EditCampaignForm(request.POST or None, instance=campaign)
    canon = CanonRuleFormSet(request.POST or None, instance=campaign, prefix="canon")
    mode = campaign.clock_mode
    if request.method == "POST" and form.is_valid() and canon.is_valid():
        with transaction.atomic():
            form.save()
            canon.save()
            refused = storytime.switch_mode(campaign, request.user, mode)
            if refused:
                transaction.set_rollback(True)
        if not refused:
            return redirect("play", campaign.pk)
        form.add_error("clock_mode", f"The clock of this line cannot switch: {refused}.")
    return render(request, "campaigns/campaign_form.html", {"form": form, "canon": canon, "campaign": campaign,
                                                            "time_zones": rule_views.TIME_ZONES})


@login_required
@require_GET
@never_cache  # Back must not show a stale story with its controls frozen mid-turn.
async def play(request, pk):
    """The play page; the narrator's name is asked for off the database's thread (it may probe the server)."""
    if request.htmx:  # another tab moved the story, or a turn ended in a way the page must re-read
        return await sync_to_async(_play_update)(request, pk)
    context = await sync_to_async(_play_page_context)(request, pk)
    context.update(await narrator_views.banner_context(await llm.anarrator_for(context["campaign"].narrator_model
                                                                                or None)))
    return await sync_to_async(render)(request, "campaigns/play.html", context)


def _play_update(request, pk):
    return render(request, "campaigns/_play_update.html",
                  play_body_context(campaign_views.campaign_for_user(request, pk)))


def _play_page_context(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    context = play_body_context(campaign)
    context["long_run"] = long_run.has_run(campaign.pk)
    context["player_name"] = player_name(campaign)
    context["action_limit"] = MAX_ACTION
    context["direction_limit"] = MAX_DIRECTION
    context["table"] = seating.table_of(campaign)  # issue 30: the seats' count and the whispers to the owner
    return context


@login_required
@require_POST
def undo(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    with transaction.atomic():
        if story.undo(campaign):
            announce_story_changed(campaign, request)
    return _play_body(request, campaign)


@login_required
@require_POST
def redo(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    with transaction.atomic():
        if story.redo(campaign):
            announce_story_changed(campaign, request)
    return _play_body(request, campaign)


@login_required
@require_POST
def save_point(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    form = SavePointForm(request.POST)
    if not form.is_valid():
        return _play_body(request, campaign, error="Give the save point a name.")
    story.create_save_point(campaign, form.cleaned_data["name"])
    return _play_body(request, campaign, notice=f"Saved “{form.cleaned_data['name']}”.")


@login_required
@require_POST
def show_version(request, pk, node_pk):
    """Show another version of a reply or an action in place of the one on the line (a head move); the panels
    follow."""
    campaign = campaign_views.campaign_for_user(request, pk)
    reply = get_object_or_404(Node.objects.exclude(role=Node.Role.OPENING), pk=node_pk, campaign=campaign)
    with transaction.atomic():
        if story.show_version(campaign, reply):
            announce_story_changed(campaign, request)
    return _play_body(request, campaign)


@login_required
@require_GET
def edit_form(request, pk, node_pk):
    """Return the form that edits one action or reply, in its card, saying first what saving it does."""
    campaign = campaign_views.campaign_for_user(request, pk)
    try:
        node = editing.editable(campaign, node_pk)
    except editing.EditRefused as refusal:
        return reswap(retarget(_play_body(request, campaign, error=str(refusal)), "#play-body"), "outerHTML")
    return render(request, "campaigns/_edit_form.html", {
        "campaign": campaign, "node": node, "later": editing.later_turns(campaign, node),
        "modes": [(value, label) for value, label in Node.Mode.choices if value != Node.Mode.CONTINUE],
        "action_limit": MAX_ACTION, "reply_limit": NODE_CHARS})


@login_required
@require_POST
def switch_branch(request, pk, branch_pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    branch = get_object_or_404(Branch, pk=branch_pk, campaign=campaign)
    with transaction.atomic():
        story.switch_branch(campaign, branch)
        announce_story_changed(campaign, request)
    return _redirect_to_play(request, campaign)


@login_required
@require_POST
def restore_save_point(request, pk, save_point_pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    point = get_object_or_404(SavePoint, pk=save_point_pk, campaign=campaign)
    with transaction.atomic():
        story.restore_save_point(point)
        announce_story_changed(campaign, request)
    return _redirect_to_play(request, campaign)


def _redirect_to_play(request, campaign):
    if request.htmx:
        return HttpResponseClientRedirect(campaign.get_absolute_url())
    return redirect("play", campaign.pk)


@login_required
@require_GET
def inspector(request, pk, node_pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    node = get_object_or_404(Node.objects.select_related("snapshot"), pk=node_pk, campaign=campaign, role="narrator")
    if not campaign.author_view:
        return campaign_views.author_only(request, campaign, "What the narrator was told")
    report = node.snapshot.report
    if "budget" not in report:  # a reply brought in from a chat: no narrator here was asked for it
        return render(request, "storyteller/inspector_imported.html", {
            "campaign": campaign, "node": node, "imported": report.get("imported") or {}})
    return render(request, "storyteller/inspector.html", {
        "campaign": campaign,
        "node": node,
        "snapshot": node.snapshot,
        "report": report,
        "budget": report["budget"],
        "on_path": lineage.path_of(campaign).contains(node.branch_id, node.depth),
        "voice_rounds": _voice_rounds(node, report),
        "model_requests": list(node.model_requests.all()),
    })


def _voice_rounds(node, report):
    """Return each game-master round of ``node``, its step (prompt tail, answer) and briefs, for the inspector."""
    steps = {step["number"]: step for step in (report.get("voices") or {}).get("rounds", [])}
    found = []
    for row in node.rounds.filter(kind=Round.Kind.GM).order_by("number"):
        step = steps.get(row.number, {})
        found.append({"number": row.number, "step": step,
                      "answer": json.dumps(step.get("answer", {}), ensure_ascii=False, indent=1),
                      "briefs": [(who, brief) for who, brief in row.briefs.items()]})
    return found


# The model pages ask the model server and wait for it: async, so the wait
# holds up no one else's database work (a sync view runs on its shared thread).


@login_required
@require_GET
@seating.hosts_only
async def model_settings(request):
    """What plays each campaign: the server, and per campaign its model, window, budget and structured output.

    Async, as every view that asks the model server: the network wait must not hold the database's thread.
    """
    status = await llm.aserver_status()
    user = await request.auser()
    campaigns = [campaign async for campaign in Campaign.objects.filter(owner=user)]
    described = {}
    for campaign in campaigns:
        name = campaign.narrator_model or None
        if name not in described:
            described[name] = await llm.adescribe_model(name)
        campaign.model_info = described[name]
    return await sync_to_async(render)(request, "storyteller/model_settings.html", {
        "status": status,
        "campaigns": campaigns,
        "default_model": llm.default_narrator_model(),
        **await narrator_views.builtin_context(),
    })


@login_required
@require_POST
@seating.hosts_only
async def test_connection(request):
    """Ask the model server again, now, and say what it answered and when."""
    started = time.perf_counter()
    status = await llm.aserver_status(fresh=True)
    tested = {"at": timezone.localtime(), "ms": round((time.perf_counter() - started) * 1000)}
    return await sync_to_async(render)(request, "storyteller/_connection.html", {"status": status, "tested": tested})


@login_required
@require_POST
async def choose_model(request, pk):
    """Set the campaign's narrator model and return its row, with what the server says about the model."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    campaign.narrator_model = request.POST.get("narrator_model", "").strip()[:200]
    await campaign.asave(update_fields=["narrator_model", "updated_at"])
    info = await llm.adescribe_model(campaign.narrator_model or None)
    context = {"campaign": campaign, "info": info}
    return await sync_to_async(render)(request, "storyteller/_campaign_model.html", context)


@login_required
@require_GET
async def export_campaign(request, pk):
    """Export a campaign bundle on the import thread: a long story takes seconds to write out."""
    request.user = await request.auser()
    if importing.full():
        return HttpResponse(importing.BUSY, status=503, content_type="text/plain; charset=utf-8")
    return await importing.run(_export_campaign, request, pk)


@login_required
@require_GET
def story_export(request, pk):
    """Save the story as the play page's viewer knows it (campaigns.transcript): a Markdown file; a seat's person
    gets their seat's (what their character was there for and knows; a player's own whispers)."""
    reached = seating.reach(request.user, pk)
    campaign = reached.campaign
    response = HttpResponse(transcript.write(campaign, reached), content_type="text/markdown; charset=utf-8")
    name = slugify(campaign.title) or f"campaign-{campaign.pk}"
    response["Content-Disposition"] = f'attachment; filename="{name}{"-author" if campaign.author_view else ""}.md"'
    return response


def _export_campaign(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    zipped = request.GET.get("zip") == "1"
    response = HttpResponse(bundle.dumps(campaign, zipped=zipped),
                            content_type="application/zip" if zipped else "application/json")
    name = slugify(campaign.title) or f"campaign-{campaign.pk}"
    response["Content-Disposition"] = f'attachment; filename="{name}.storyteller.{"zip" if zipped else "json"}"'
    return response


@importing.upload_view
@login_required
@require_POST
@seating.hosts_only
async def import_campaign(request):
    """Import a campaign bundle on the import thread, so nobody else's play waits for it."""
    request.user = await request.auser()  # resolved here, not again on the import thread
    if importing.full():
        return await sync_to_async(_refused_import)(request, importing.BUSY)
    return await importing.run(_import_campaign, request)


def _import_campaign(request):
    upload = request.FILES.get("bundle")
    try:
        if upload is None:
            raise bundle.BundleRefused("Choose a campaign bundle (.json or .zip) to import.")
        if upload.size > bundle.max_bytes():
            raise bundle.BundleRefused(f"The file is {upload.size:,} bytes; a bundle may be at most "
                                       f"{bundle.max_bytes():,} bytes. Nothing was imported.")
        prepared = bundle.prepare(upload)
    except bundle.BundleRefused as refusal:
        return _refused_import(request, str(refusal))
    token = importing.start(request.user, f"the campaign “{prepared.campaign.values['title']}”", prepared.rows,
                            lambda add: bundle.write(request.user, prepared, progress=add))
    return redirect("import_progress", token)


@login_required
@require_GET
def import_progress(request, token):
    """Show how far an import of the person's has been written; open the campaign once it is whole."""
    progress = importing.progress_of(token, request.user)
    if progress is None:
        raise Http404("No import of yours has this address (an import is shown here until the app restarts).")
    if progress.finished.is_set() and progress.campaign is not None:
        url = reverse("play", args=[progress.campaign])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    template = "storyteller/_import_progress.html" if request.htmx else "storyteller/import_progress.html"
    return render(request, template, {"progress": progress, "token": token})


def _refused_import(request, error):
    return render(request, "campaigns/campaign_list.html",
                  {"campaigns": _campaigns_of(request.user), "import_error": error, "bundle_limit": bundle.max_bytes()},
                  status=400)


@require_GET
def favicon(request):
    """Send browsers that ask for /favicon.ico to the icon every page links."""
    return redirect(static("favicon.svg"), permanent=True)


@require_GET
def login_page(request):
    return render(request, "storyteller/login.html")


@require_GET
def login_with_link(request, uidb64, token):
    try:
        user = get_user_model().objects.get(pk=force_str(urlsafe_base64_decode(uidb64)))
    except (ValueError, TypeError, OverflowError, get_user_model().DoesNotExist):
        raise Http404("This sign-in link is not valid.")
    if not signin.login_tokens.check_token(user, token):
        return render(request, "storyteller/login.html", {"expired": True}, status=403)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("campaign_list")


@require_POST
def logout_view(request):
    logout(request)
    return redirect("login")


@login_required
@require_POST
async def retry_recording(request, pk, node_pk):
    """Run the recorder again for a reply whose recording failed (or is still pending); return the state panel."""
    user = await request.auser()
    await seating.areach(user, pk, owner=True)
    node = await aget_object_or_404(Node, pk=node_pk, campaign__pk=pk, role=Node.Role.NARRATOR)
    await postturn.schedule(node.campaign_id, node.pk)
    return await sync_to_async(campaign_views.render_state_panel)(request, await Campaign.objects.aget(pk=pk))


@login_required
@require_POST
async def rebuild_memory_vectors(request, pk):
    """Drop the campaign's memory vectors and embed every memory again (derived data: nothing else changes)."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    await sync_to_async(memory_bank.clear_vectors)(campaign.pk)
    embedded, note = await memories.embed_missing(campaign)
    message = f"Rebuilt {embedded} memory embedding{'s' if embedded != 1 else ''}."
    return await sync_to_async(memory_views.render_panel)(request, campaign, message=message, error=note)


@login_required
@require_GET
def plot_panel(request, pk):
    return _render_plot(request, campaign_views.campaign_for_user(request, pk))


def _render_plot(request, campaign, **extra):
    """The Plot panel, checked against the stable prefix a build would send now (only the pipeline knows it)."""
    campaign.refresh_from_db()
    return memory_views.render_plot(request, campaign, prefix_hash(campaign), **extra)


@login_required
@require_POST
def edit_plot(request, pk):
    """Save the summary the person typed, at the head where they typed it; return the Plot panel."""
    campaign = campaign_views.campaign_for_user(request, pk)
    try:
        written = compaction.write_by_hand(campaign, request.POST.get("text", ""))
    except ValueError as error:
        return _render_plot(request, campaign, error=f"Nothing was saved: {error}")
    return _render_plot(request, campaign, message=(
        f"Saved. It covers depths 0–{written.source_end} and sits here (depth {written.depth}): the narrator reads it "
        "from the next turn, on this line only."))


@login_required
@require_POST
async def rebuild_plot(request, pk):
    """Ask the summariser for this line's summary afresh from the story itself; return the Plot panel."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    try:
        written = await compaction.rebuild(campaign.pk)
    except compaction.CompactionFailed as error:
        return await sync_to_async(_render_plot)(
            request, campaign, error=f"The summary was not rebuilt: {error} The story is unchanged.")
    return await sync_to_async(_render_plot)(
        request, campaign, message=f"Rebuilt from depths 0–{written.source_end} of the story.")


@login_required
@require_GET
def worker_status(request, pk):
    """Return what the post-turn worker has done for the head reply (the play page polls it while it runs)."""
    campaign = campaign_views.campaign_for_user(request, pk)
    if not request.htmx:
        return redirect("play", campaign.pk)
    worker = postturn.status(campaign)
    # The panels loaded while the worker ran: when a poll finds it finished, they load again.
    settled = request.GET.get("was") == "running" and worker.state != "running"
    return render(request, "storyteller/_worker_status.html",
                  {"campaign": campaign, "worker": worker, "reload_panels": settled})


@login_required
@require_POST
async def retry_worker(request, pk):
    """Run the post-turn steps again for the head reply and any earlier reply whose recording failed.

    A step that already succeeded for a reply skips itself.
    """
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    worker = await sync_to_async(postturn.status)(campaign)
    running = None
    for node_id in worker.retry:  # oldest first: the worker runs its queue in order
        running = postturn.schedule(campaign.pk, node_id)
    if running is not None:
        await running
    if not request.htmx:
        return redirect("play", campaign.pk)
    return await sync_to_async(render)(request, "storyteller/_worker_status.html", {
        "campaign": campaign, "worker": await sync_to_async(postturn.status)(campaign), "reload_panels": True})


@login_required
@require_GET
def meanwhile(request, pk):
    """Return the "Meanwhile" card of the head reply: what happened off stage after it (empty when nothing did)."""
    campaign = campaign_views.campaign_for_user(request, pk)
    # While a turn plays the head is still the last reply, whose card the turn cleared as it began: the worker's
    # status line asking again then must not bring it back under the streaming reply.
    # What happened off stage is what the player's character did not see: the author's view only.
    note = None if playing.playing(campaign.pk) or not campaign.author_view else away.note_of(campaign)
    return render(request, "campaigns/_meanwhile.html", {"campaign": campaign, "note": note})


@login_required
@require_GET
def offstage_rounds(request, pk, node_pk):
    """Show what happened off stage after one reply: each round, what its character was told and answered."""
    campaign = campaign_views.campaign_for_user(request, pk)
    node = get_object_or_404(Node, pk=node_pk, campaign=campaign, role=Node.Role.NARRATOR)
    if not campaign.author_view:
        return campaign_views.author_only(request, campaign, "What happened off stage")
    return render(request, "storyteller/offstage.html", {
        "campaign": campaign, "node": node, "rounds": node.rounds.filter(kind="offstage").order_by("number"),
        "run": OffstageRun.objects.filter(node=node).first()})
