"""The "Bring your story" page: drop files, see what each becomes, then import; and the export of a campaign.

Reading files is work on the import thread (``storyteller.importing``),
never on the thread every page and socket shares: a drop of a dozen cards
and a 2,500-message chat takes a second to read. Preview and import post
the same form, so what is imported is exactly what was shown: the files
are read again, the person's choices (the persona's name, each book's
level, the campaign) applied, and a new campaign is written in the
background with the import progress page, or added to a chosen one in one
transaction.
"""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from campaigns import importing as import_thread
from campaigns import playing, seating
from campaigns import views as campaign_views
from campaigns.models import Campaign, Persona

from . import exporting, files, importing
from . import plan as plans

MAX_FILES = 50  # one drop: a cast of cards, their books and chats


@import_thread.upload_view
@login_required
@require_http_methods(["GET", "POST"])
@seating.hosts_only
async def bring(request):
    """The page (GET); a POST reads the files on the import thread: the preview (htmx) or the import itself."""
    request.user = await request.auser()
    if request.method == "GET":
        return await sync_to_async(_page)(request)
    if import_thread.full():
        return await sync_to_async(_page)(request, error=import_thread.BUSY, status=503)
    return await import_thread.run(_posted, request)


def _page(request, *, error="", status=200):
    return render(request, "tavern/bring.html", {**_choices(request), "error": error,
                                                  "limit": settings.STORYTELLER_BUNDLE_MAX_BYTES}, status=status)


def _choices(request):
    persona = Persona.objects.filter(owner=request.user).order_by("-updated_at").first()
    return {"campaigns": Campaign.objects.filter(owner=request.user).order_by("-updated_at"),
            "persona": request.POST.get("persona", persona.name if persona else ""),
            "target": request.POST.get("campaign", ""), "levels": plans.LEVEL_WORDS}


def _posted(request):
    uploads = request.FILES.getlist("files")
    target, error = _target(request)
    if error:
        return _answer(request, error=error)
    plan, error = _read(request, uploads, target)
    if error:
        return _answer(request, error=error)
    if request.POST.get("action") != "import":
        return _answer(request, plan=plan, target=target)
    if not plan.usable:
        return _answer(request, plan=plan, target=target, error=importing.nothing_imported(plan))
    if target is not None:
        try:
            importing.add(request.user, target, plan)
        except (importing.ImportRefused, playing.TurnInProgress) as refusal:
            return _answer(request, plan=plan, target=target, error=str(refusal))
        return _go(request, reverse("play", args=[target.pk]))
    title = request.POST.get("title", "").strip()[:200]
    token = import_thread.start(request.user, f"“{title or plan.title}”", importing.rows_of(plan) + 1,
                                lambda add: importing.create(request.user, plan, title=title, progress=add).campaign)
    return _go(request, reverse("import_progress", args=[token]))


def _go(request, url):
    """Send the browser to ``url``: the page itself for htmx (the files stay chosen only while the page does)."""
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _target(request):
    chosen = request.POST.get("campaign", "")
    if not chosen:
        return None, ""
    campaign = Campaign.objects.filter(owner=request.user, pk=chosen if chosen.isdigit() else 0).first()
    if campaign is None:
        return None, "That campaign is not one of yours; choose one from the list, or a new campaign."
    return campaign, ""


def _read(request, uploads, target):
    """Return (the Plan of the uploaded files, "") or (None, why in words)."""
    if not uploads:
        return None, "Choose one or more files to bring in (or drop them on the page)."
    if len(uploads) > MAX_FILES:
        return None, f"{len(uploads)} files were chosen; bring at most {MAX_FILES} at once."
    limit = settings.STORYTELLER_BUNDLE_MAX_BYTES
    total = sum(upload.size for upload in uploads)
    if total > limit:
        return None, (f"The files come to {filesizeformat(total)}; one import may bring at most "
                      f"{filesizeformat(limit)} (STORYTELLER_BUNDLE_MAX_MB). Bring them in smaller groups.")
    readings = []
    for upload in uploads:
        readings.append(files.read(upload.name, upload.read(), limit))
    levels = {number: request.POST.get(f"level-{number}") for number in range(len(readings) * 2)}
    if target is None:
        return plans.make(readings, request.POST.get("persona", ""), levels), ""
    return plans.make(readings, request.POST.get("persona", ""), levels, importing.existing_names(target),
                      importing.existing_books(target)), ""


def _answer(request, *, plan=None, target=None, error=""):
    context = {**_choices(request), "plan": plan, "target_campaign": target, "error": error,
               "limit": settings.STORYTELLER_BUNDLE_MAX_BYTES}
    status = 400 if error else 200
    if request.htmx:
        return render(request, "tavern/_preview.html", context, status=status)
    return render(request, "tavern/bring.html", context, status=status)


@login_required
@require_GET
def export_tavern(request, pk):
    """Download the campaign in SillyTavern's formats: a zip of its cards, lorebooks and current line."""
    campaign = campaign_views.campaign_for_user(request, pk)
    response = HttpResponse(exporting.zipped(campaign), content_type="application/zip")
    name = slugify(campaign.title) or f"campaign-{campaign.pk}"
    response["Content-Disposition"] = f'attachment; filename="{name}.sillytavern.zip"'
    return response


@login_required
@require_http_methods(["GET", "POST"])
async def read_into_state(request, pk):
    """What an imported story's reading costs (GET); a POST has the recorder read each reply, oldest first."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    found = await sync_to_async(importing.unread)(campaign)
    if request.method == "POST" and found.nodes:
        importing.start_reading(campaign.pk, found.nodes)
    return await sync_to_async(render)(request, "tavern/_read_story.html", {
        "campaign": campaign, "unread": found, "started": importing.reading(campaign.pk)})
