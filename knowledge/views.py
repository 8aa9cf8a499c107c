"""The knowledge pages: the campaign's sources, one source, the search box, and their actions.

Views parse, call the importer or retrieval, render. Every campaign and source
is fetched with the signed-in owner in the query, so anyone else's is a 404.
"""

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from campaigns import importing, lineage, playing
from campaigns.models import ContextSnapshot, Node
from campaigns.state.world import lore
from campaigns.views import campaign_for_user

from . import importer, lorebooks, retrieval, worldinfo
from .forms import SourceForm, UploadForm
from .models import Source


def _get_source_for_user(request, pk, source_pk):
    campaign_for_user(request, pk)  # seating.access: the owner's alone
    return get_object_or_404(Source.objects.select_related("campaign"), pk=source_pk, campaign__pk=pk)


def _turns_using(campaign):
    """Return {source id: [(node id, turn), ...]} from the stored prompt reports, newest first."""
    used = {}
    rows = (ContextSnapshot.objects.filter(node__campaign=campaign).order_by("-node__created_at")
            .values_list("node_id", "node__depth", "report__knowledge__sources"))
    for node_id, depth, sources in rows:
        for source_id in sources or []:
            used.setdefault(source_id, []).append((node_id, depth // 2))
    return used


def _page_context(campaign, **extra):
    sources = (Source.objects.filter(campaign=campaign)
               .annotate(passage_count=Count("passages"), token_count=Sum("passages__tokens")))
    used = _turns_using(campaign)
    for source in sources:
        source.turns_used = len(used.get(source.pk, []))
    return {"campaign": campaign, "sources": sources, "form": UploadForm(), "world_lore": _world_lore(campaign),
            **extra}


def _world_lore(campaign):
    """Return the world file's lore entries at the head, each with who knows it (the book "world")."""
    entries = lorebooks.world_lore_at(campaign)
    known = lorebooks.knowers(campaign, [entry.key for entry in entries]) if entries else {}
    return [{"entry": entry, "known_by": known.get(entry.key, [])} for entry in entries]


@login_required
@require_GET
def knowledge_page(request, pk):
    campaign = campaign_for_user(request, pk)
    template = "knowledge/knowledge.html#sources" if request.htmx else "knowledge/knowledge.html"
    return render(request, template, _page_context(campaign))


@importing.upload_view
@login_required
@require_POST
async def upload(request, pk):
    """Import the files on the import thread (campaigns.importing), so nobody else's play waits for them."""
    request.user = await request.auser()  # resolved here, not again on the import thread
    if importing.full():
        return await sync_to_async(_busy)(request, pk)
    return await importing.run(_upload, request, pk)


def _upload(request, pk):
    campaign = campaign_for_user(request, pk)
    form = UploadForm(request.POST)
    files = request.FILES.getlist("files")
    results = []
    if form.is_valid() and files:
        results = [_import_one(campaign, upload, form.cleaned_data) for upload in files]
    elif not files:
        form.add_error(None, "Choose one or more .md or .txt files to import.")
    context = _page_context(campaign, results=results)
    context["form"] = form
    status = 200 if any(ok for ok, _ in results) else 400
    template = "knowledge/knowledge.html#import" if request.htmx else "knowledge/knowledge.html"
    return render(request, template, context, status=status)


def _import_one(campaign, upload, options):
    try:
        importer.check_size(upload.name, upload.size)
        source = importer.import_source(
            campaign, upload.name, upload.read(), options["classification"], hidden=options["hidden"],
            always_include=options["always_include"], allow_duplicate=options["allow_duplicate"],
            lorebook=options["lorebook"], lore_scope=options["lore_scope"],
        )
    except importer.ImportRefused as refusal:
        return False, str(refusal)
    except playing.TurnInProgress as refusal:
        return False, f"{upload.name} was not imported as a lorebook: {refusal}"
    importer.embed_source(source)
    message = f"Imported {upload.name} as “{source.title}” ({source.get_classification_display()})."
    if source.lorebook:
        message += f" It is a lorebook of {source.lore_entries.count()} entries, keys “{source.lore_book}:…”."
    if source.semantic_detail:
        message += f" {source.semantic_detail}"
    return True, message


@login_required
@require_GET
def knowledge_panel(request, pk):
    """Return the play page's Knowledge panel: the campaign's files and which of them the shown reply drew on."""
    campaign = campaign_for_user(request, pk)
    if not request.htmx:
        return redirect("knowledge", campaign.pk)
    head = (lineage.path_of(campaign).nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR)
            .values_list("snapshot__report__knowledge__sources", flat=True).first())
    sources = list(Source.objects.filter(campaign=campaign).only(
        "title", "classification", "enabled", "hidden", "always_include", "campaign"))
    for source in sources:
        source.used_last = source.pk in (head or [])
    # A narrator-only file's title can say what the player's character is not to know: counted, not named.
    hidden = 0 if campaign.author_view else sum(source.hidden for source in sources)
    if hidden:
        sources = [source for source in sources if not source.hidden]
    return render(request, "knowledge/_knowledge_panel.html", {"campaign": campaign, "sources": sources,
                                                               "hidden": hidden,
                                                               "view": {"author": campaign.author_view}})


def _source_context(source, **extra):
    entries = list(source.lore_entries.all()) if source.lorebook else []
    known = lorebooks.knowers(source.campaign, [entry.key for entry in entries]) if entries else {}
    settings = {lore.entry_id(item.uid): item for item in worldinfo.parse(source.text).entries} if source.keyed else {}
    for entry in entries:
        entry.known_by = known.get(entry.key, [])
        entry.scope_now = entry.scope or source.lore_scope
        entry.keyed = settings.get(entry.key.split(":", 1)[-1])
    return {"campaign": source.campaign, "source": source, "passages": source.passages.all(),
            "form": SourceForm(instance=source), "turns": _turns_using(source.campaign).get(source.pk, []),
            "entries": entries, **extra}


@login_required
@require_GET
def source_page(request, pk, source_pk):
    """The source's page; for htmx, its lorebook entries alone (who knows each, at the head of the story)."""
    source = _get_source_for_user(request, pk, source_pk)
    template = "knowledge/source.html#lore" if request.htmx else "knowledge/source.html"
    return render(request, template, _source_context(source))


@login_required
@require_POST
def source_update(request, pk, source_pk):
    source = _get_source_for_user(request, pk, source_pk)
    form = SourceForm(request.POST, instance=source)
    saved = form.is_valid()
    if saved:
        try:
            lorebooks.save_settings(form)
        except (lorebooks.LoreRefused, playing.TurnInProgress) as refusal:
            form.add_error(None, str(refusal))
            saved = False
    if not saved and not request.htmx:
        source.refresh_from_db()
        return render(request, "knowledge/source.html", _source_context(source, form=form), status=400)
    if request.htmx:
        source.refresh_from_db()
        return render(request, "knowledge/source.html#settings",
                      {"campaign": source.campaign, "source": source, "form": form if not saved else
                       SourceForm(instance=source), "saved": saved}, status=200 if saved else 400)
    return redirect(source)


@login_required
@require_POST
def source_delete(request, pk, source_pk):
    """Delete a source; a lorebook that characters' knowledge still names, or any during a turn, is refused."""
    source = _get_source_for_user(request, pk, source_pk)
    try:
        lorebooks.delete_source(source)
    except (lorebooks.LoreRefused, playing.TurnInProgress) as refusal:
        template = "knowledge/source.html#removal" if request.htmx else "knowledge/source.html"
        return render(request, template, _source_context(source, removal_error=str(refusal)), status=409)
    if request.htmx:
        return HttpResponseClientRedirect(reverse("knowledge", args=[pk]))
    return redirect("knowledge", pk)


@login_required
@require_POST
async def rebuild(request, pk):
    """Re-cut every source from its stored text and rebuild its vectors (on the import thread); the story is not
    touched."""
    request.user = await request.auser()
    if importing.full():
        return await sync_to_async(_busy)(request, pk)
    return await importing.run(_rebuild, request, pk)


def _busy(request, pk):
    context = _page_context(campaign_for_user(request, pk), results=[(False, importing.BUSY)])
    template = "knowledge/knowledge.html#import" if request.htmx else "knowledge/knowledge.html"
    return render(request, template, context, status=503)


def _rebuild(request, pk):
    campaign = campaign_for_user(request, pk)
    for source in Source.objects.filter(campaign=campaign):
        importer.recut_source(source)
        importer.embed_source(source)
    template = "knowledge/knowledge.html#sources" if request.htmx else "knowledge/knowledge.html"
    return render(request, template, _page_context(campaign, rebuilt=True))


@login_required
@require_GET
async def search(request, pk):
    campaign = await sync_to_async(campaign_for_user)(request, pk)
    text = request.GET.get("q", "").strip()[:500]
    result = None
    if text:
        query = await retrieval.aembed_query(campaign, retrieval.Query(text))
        result = await sync_to_async(retrieval.retrieve)(campaign, query, exclude_always_included=False)
    rows = [(hit, result.passages[hit.passage_id]) for hit in result.hits] if result else []
    context = {"campaign": campaign, "q": text, "result": result, "rows": rows}
    template = "knowledge/search.html#results" if request.htmx else "knowledge/search.html"
    return await sync_to_async(render)(request, template, context)
