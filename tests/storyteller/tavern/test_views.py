"""The Bring your story page: the page, the preview (htmx) of every kind of file, the import into a campaign of
one's own, another's campaign refused, the export download, the portraits served to their owner only."""

import io
import json
import zipfile
import zlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from campaigns.models import CharacterCard, Node

from . import make

pytestmark = pytest.mark.django_db(transaction=True)


def _upload(name, data):
    return SimpleUploadedFile(name, data)


def test_the_page_asks_for_files_your_name_and_where_they_go(client_of, campaign):
    response = client_of.get(reverse("bring"))
    assert response.status_code == 200
    text = response.content.decode()
    assert "Bring your story" in text and 'name="files"' in text and campaign.title in text
    assert client_of.put(reverse("bring")).status_code == 405


def test_the_preview_shows_what_each_file_becomes_escaped(client_of, campaign):
    response = client_of.post(reverse("bring"), {
        "files": [_upload("mara.png", make.card_png(make.v2(character_book=make.character_book()))),
                  _upload("abbey.json", json.dumps(make.world_info()).encode()),
                  _upload("mara.jsonl", make.mara_chat()), _upload("junk.json", b"{}")],
        "persona": "Wren", "action": "preview"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    text = response.content.decode()
    assert "A new campaign: “Mara”" in text
    assert "teapot" in text and "dragon, wyrm" in text and "Sit by the fire." not in text  # only the line's ends
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text and "<script>alert" not in text
    assert "junk.json" in text and "not a character card, a lorebook" in text
    assert "talkativeness" in text and "vector search" in text
    assert Node.objects.filter(campaign__owner=campaign.owner).count() == 1, "a preview writes nothing"
    assert "stays in 2 turns once it fires, then out 1 turn" in text, "the teapot's timers, in turns"
    assert "You have not given your name" not in text


def test_the_preview_says_what_you_are_called_when_no_name_is_given(client_of):
    response = client_of.post(reverse("bring"), {"files": [_upload("mara.json", json.dumps(make.v2()).encode())],
                                                 "persona": " ", "action": "preview"}, HTTP_HX_REQUEST="true")
    assert "the narrator will call your character “you”" in response.content.decode()


def test_adding_to_a_campaign_of_ones_own_writes_it_in_one_go(client_of, campaign):
    response = client_of.post(reverse("bring"), {
        "files": [_upload("mara.json", json.dumps(make.v3()).encode())], "campaign": str(campaign.pk),
        "action": "import"})
    assert response.status_code == 302 and response["Location"] == reverse("play", args=[campaign.pk])
    htmx = client_of.post(reverse("bring"), {
        "files": [_upload("edrin.json", json.dumps(make.v3(name="Edrin")).encode())], "campaign": str(campaign.pk),
        "action": "import"}, HTTP_HX_REQUEST="true")
    assert htmx["HX-Redirect"] == reverse("play", args=[campaign.pk])
    assert list(CharacterCard.objects.filter(campaign=campaign).values_list("name", flat=True)) == ["Mara", "Edrin"]


def test_the_preview_of_a_chat_added_to_a_campaign_says_the_story_moves_to_it(client_of, campaign):
    response = client_of.post(reverse("bring"), {"files": [_upload("mara.jsonl", make.mara_chat())],
                                                 "campaign": str(campaign.pk), "action": "preview"},
                              HTTP_HX_REQUEST="true")
    text = response.content.decode()
    assert "— a line of its own from the opening." in text
    assert "The story moves to this line; the line you were playing stays under Branches &amp; save points." in text


def test_another_persons_campaign_is_refused(client_of, outsider):
    from tests.conftest import make_campaign

    theirs = make_campaign(outsider)
    response = client_of.post(reverse("bring"), {
        "files": [_upload("mara.json", json.dumps(make.v3()).encode())], "campaign": str(theirs.pk),
        "action": "import"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and "not one of yours" in response.content.decode()
    assert not CharacterCard.objects.exists()


def test_too_many_bytes_at_once_are_refused_in_words(client_of, settings):
    settings.STORYTELLER_BUNDLE_MAX_BYTES = 100
    response = client_of.post(reverse("bring"), {"files": [_upload("a.json", b" " * 80), _upload("b.json", b" " * 80)],
                                                 "action": "preview"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400
    assert "come to 160\xa0bytes; one import may bring at most 100\xa0bytes" in response.content.decode()


def test_the_export_and_the_portrait_are_the_owners_only(client_of, campaign, outsider, client):
    client_of.post(reverse("bring"), {"files": [_upload("mara.png", make.card_png(make.v2()))],
                                      "campaign": str(campaign.pk), "action": "import"})
    card = CharacterCard.objects.get(campaign=campaign)
    portrait = client_of.get(reverse("card_portrait", args=[campaign.pk, card.pk]))
    assert portrait.status_code == 200 and portrait["Content-Type"] == "image/png"
    assert portrait["X-Content-Type-Options"] == "nosniff"
    exported = client_of.get(reverse("export_tavern", args=[campaign.pk]))
    with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
        assert "characters/mara.png" in archive.namelist()
    client_of.logout()
    client_of.force_login(outsider)
    assert client_of.get(reverse("card_portrait", args=[campaign.pk, card.pk])).status_code == 404
    assert client_of.get(reverse("export_tavern", args=[campaign.pk])).status_code == 404
    assert client_of.get(reverse("cast_panel", args=[campaign.pk])).status_code == 404


def test_the_preview_counts_only_what_is_made_and_names_a_refused_file_once(client_of):
    bomb = make.png_with(make.chunk(b"zTXt", b"chara\0\0" + zlib.compress(b"A" * 5_000_000)))
    response = client_of.post(reverse("bring"), {
        "files": [_upload("bomb.png", bomb), _upload("nai.json", json.dumps(make.novelai_book()).encode())],
        "persona": "Wren", "action": "preview"}, HTTP_HX_REQUEST="true")
    text = response.content.decode()
    assert "<strong>bomb.png</strong>: <span class=\"error\">not imported: A compressed text chunk" in text
    assert "bomb.png: A compressed" not in text, "the name is not said twice"
    assert ">2 lorebook entries</p>" in text and "0 turns" not in text and "0 characters" not in text
