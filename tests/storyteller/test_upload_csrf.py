"""An upload's CSRF check runs on the import thread, where its form is read, and still refuses (issue 22).

Checking a form's token reads the whole form; the middleware runs on the one
thread every socket's database work shares, so a large upload read there held
other people's turns for seconds (tests/storyteller/test_limits_load.py). The
check of every upload view (a world file, a bundle, knowledge files, the
"Bring your story" page) runs on a thread of its own (importing.upload_view):
these tests show each is such a view and still refuses a post without the
token, and nothing is imported.
"""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import resolve

from campaigns.models import Campaign
from knowledge.models import Source
from tests.conftest import make_campaign

WORLD = {"world_format": 1, "title": "Greyhollow", "protagonist": "Mara",
         "places": [{"id": "quay", "name": "The quay", "description": "Wet stones."}]}


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user("ana", password="pw-for-tests")


def _client(person):
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    return client


def _world_fields():
    return {"title": "", "protagonist": "", "opening": "", "point_of_view": "second", "prose_length": "medium",
            "dialogue_density": "medium", "descriptive_richness": "medium", "violence_level": "low",
            "context_token_budget": "4096", "max_output_tokens": "200", "temperature": "0.8"}


def _file(name, document):
    return SimpleUploadedFile(name, json.dumps(document).encode(), content_type="application/json")


def _text(name, text):
    return SimpleUploadedFile(name, text.encode(), content_type="text/markdown")


@pytest.mark.parametrize("path", ["/campaigns/new/", "/campaigns/import/", "/campaigns/1/knowledge/upload/", "/bring/"])
def test_every_upload_form_reads_its_form_off_the_shared_thread(path):
    # The middleware leaves these views' check to the view's own wrapper, which reads the form on a thread of its own.
    assert getattr(resolve(path).func, "csrf_read_apart", False), path


@pytest.mark.django_db(transaction=True)
def test_a_world_file_posted_without_the_token_is_refused_and_makes_nothing(person):
    client = _client(person)
    response = client.post("/campaigns/new/", {**_world_fields(), "world": _file("w.json", WORLD)})
    assert response.status_code == 403
    assert not Campaign.every.filter(owner=person).exists()


@pytest.mark.django_db(transaction=True)
def test_a_bundle_posted_without_the_token_is_refused(person):
    client = _client(person)
    response = client.post("/campaigns/import/", {"bundle": _file("b.json", {"format": "storyteller-bundle"})})
    assert response.status_code == 403
    assert not Campaign.every.filter(owner=person).exists()


@pytest.mark.django_db(transaction=True)
def test_with_the_token_the_upload_is_read(person):
    client = _client(person)
    client.get("/")
    token = client.cookies["csrftoken"].value
    response = client.post("/campaigns/import/", {"csrfmiddlewaretoken": token,
                                                  "bundle": _file("b.json", {"format": "not a bundle"})})
    # Past the check, the bundle itself is read and refused in words (not a 403).
    assert response.status_code == 400, response.content[:500]


@pytest.mark.django_db(transaction=True)
def test_knowledge_files_posted_without_the_token_are_refused_and_nothing_is_imported(person):
    campaign = make_campaign(person)
    client = _client(person)
    response = client.post(f"/campaigns/{campaign.pk}/knowledge/upload/",
                           {"classification": "reference", "files": _text("abbey.md", "# The abbey\n\nOld stones.")})
    assert response.status_code == 403
    assert not Source.objects.filter(campaign=campaign).exists()
    # With the token, the same post imports the file.
    client.get("/")
    response = client.post(f"/campaigns/{campaign.pk}/knowledge/upload/",
                           {"csrfmiddlewaretoken": client.cookies["csrftoken"].value, "classification": "reference",
                            "files": _text("abbey.md", "# The abbey\n\nOld stones.")})
    assert response.status_code == 200, response.content[:500]
    assert Source.objects.filter(campaign=campaign).count() == 1


@pytest.mark.django_db(transaction=True)
def test_files_brought_in_without_the_token_are_refused_and_make_nothing(person):
    client = _client(person)
    fields = {"action": "import", "files": _text("notes.md", "# Notes\n\nThe quay floods at night.")}
    response = client.post("/bring/", fields)
    assert response.status_code == 403
    assert not Campaign.every.filter(owner=person).exists()
    client.get("/")
    response = client.post("/bring/", {**fields, "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
                                       "files": _text("notes.md", "# Notes\n\nThe quay floods at night.")})
    assert response.status_code != 403, response.content[:500]
