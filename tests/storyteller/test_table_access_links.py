"""Invitations and sign-in links work once and expire; joining makes an account; the seats page's forms; and the
app refuses to listen beyond loopback without STORYTELLER_ORIGIN (issue 30)."""

import subprocess
import sys
from pathlib import Path
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from campaigns import seating
from campaigns.models import Invitation, Seat
from storyteller import serving, signin

pytestmark = pytest.mark.django_db


def _invitation(campaign, character="mara"):
    seat = seating.open_seat(campaign, character)
    return seat, seating.invite(seat)[1]


def test_an_invitation_keeps_only_its_tokens_hash(campaign):
    seat, token = _invitation(campaign)
    stored = Invitation.objects.get(seat=seat)
    assert token not in stored.token_hash and len(stored.token_hash) == 64
    assert not Invitation.objects.filter(token_hash=token).exists()


def test_joining_makes_an_account_seats_it_and_spends_the_link(campaign):
    seat, token = _invitation(campaign)
    client = Client()
    page = client.get(reverse("join", args=[token]))
    assert page.status_code == 200 and "Join “The Silver Key”" in page.content.decode()
    response = client.post(reverse("join", args=[token]), {"name": "Wren"})
    assert response.status_code == 302 and response["Location"] == reverse("play", args=[campaign.pk])
    wren = get_user_model().objects.get(username="Wren")
    assert not wren.has_usable_password()
    seat.refresh_from_db()
    assert seat.user == wren and seat.status == Seat.Status.SEATED
    assert client.get(reverse("play", args=[campaign.pk])).status_code == 200
    again = Client().post(reverse("join", args=[token]), {"name": "Mallory"})
    assert again.status_code == 410 and "has been used already" in again.content.decode()
    assert not get_user_model().objects.filter(username="Mallory").exists()


def test_an_expired_or_unknown_invitation_is_refused_in_words(campaign):
    seat, token = _invitation(campaign)
    Invitation.objects.filter(seat=seat).update(expires_at=timezone.now() - timedelta(seconds=1))
    expired = Client().get(reverse("join", args=[token]))
    assert expired.status_code == 410 and "has expired" in expired.content.decode()
    unknown = Client().get(reverse("join", args=["not-a-token"]))
    assert unknown.status_code == 410 and "not one this table made" in unknown.content.decode()
    assert Client().post(reverse("join", args=[token]), {"name": "Late"}).status_code == 410
    assert Seat.objects.get(pk=seat.pk).user is None


def test_a_taken_name_is_refused_and_the_link_still_works(campaign, outsider):
    seat, token = _invitation(campaign)
    taken = Client().post(reverse("join", args=[token]), {"name": outsider.username})
    assert taken.status_code == 400 and "already called" in taken.content.decode()
    assert Client().post(reverse("join", args=[token]), {"name": "Fresh"}).status_code == 302


def test_a_signed_in_person_takes_the_seat_as_themselves(campaign, outsider):
    seat, token = _invitation(campaign)
    client = Client()
    client.force_login(outsider)
    assert client.post(reverse("join", args=[token])).status_code == 302
    assert Seat.objects.get(pk=seat.pk).user == outsider


def test_removing_a_seat_spends_its_open_invitations(campaign):
    seat, token = _invitation(campaign)
    seating.remove(seat)
    assert "removed" in Client().get(reverse("join", args=[token])).content.decode()


def test_a_sign_in_link_works_once(owner):
    link = signin.login_link(owner, base_url="")
    client = Client()
    assert client.get(link).status_code == 302
    assert Client().get(link).status_code == 403  # last_login moved: the token no longer matches


def test_a_sign_in_link_expires(owner, settings):
    """A link made longer ago than PASSWORD_RESET_TIMEOUT (3 days by default) is refused: made with the token
    generator's clock set back past it."""
    from datetime import datetime

    generator = signin.login_tokens
    generator._now = lambda: datetime.now() - timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 60)
    try:
        link = signin.login_link(owner, base_url="")
    finally:
        del generator._now
    refused = Client().get(link)
    assert refused.status_code == 403 and "already been used or has expired" in refused.content.decode()
    assert Client().get(signin.login_link(owner, base_url="")).status_code == 302  # a fresh one works


def test_the_seats_page_opens_invites_moves_pauses_and_removes(client_of, campaign):
    table = reverse("table", args=[campaign.pk])
    assert client_of.get(table).status_code == 200
    client_of.post(reverse("open_seat", args=[campaign.pk]), {"kind": "player", "character": "protagonist"})
    seat = Seat.objects.get(campaign=campaign)
    invited = client_of.post(reverse("seat_action", args=[campaign.pk, seat.pk, "invite"]), HTTP_HX_REQUEST="true")
    assert "/join/" in invited.content.decode() and 'id="seats"' in invited.content.decode()
    refused = client_of.post(reverse("open_seat", args=[campaign.pk]), {"kind": "player", "character": "nobody"})
    assert refused.status_code == 400 and "Choose a character of the cast" in refused.content.decode()
    assert Seat.objects.filter(campaign=campaign).count() == 1
    token = invited.content.decode().split("/join/")[1].split("/")[0]
    player = get_user_model().objects.create_user("player", password=None)
    seating.take(token, player)
    for action, status in (("pause", Seat.Status.PAUSED), ("resume", Seat.Status.SEATED),
                           ("remove", Seat.Status.REMOVED)):
        client_of.post(reverse("seat_action", args=[campaign.pk, seat.pk, action]))
        assert Seat.objects.get(pk=seat.pk).status == status, action
    client_of.post(reverse("open_seat", args=[campaign.pk]), {"kind": "spectator"})
    assert Seat.objects.get(campaign=campaign, kind="spectator").character == ""


def test_a_sign_in_link_for_a_seated_player_comes_from_the_seats_page(client_of, campaign):
    seat, token = _invitation(campaign)
    player = get_user_model().objects.create_user("wren", password=None)
    seating.take(token, player)
    answer = client_of.post(reverse("seat_action", args=[campaign.pk, seat.pk, "signin"])).content.decode()
    link = answer.split('readonly value="')[1].split('"')[0]
    assert "/login/" in link
    fresh = Client()
    assert fresh.get(link.split("testserver")[1]).status_code == 302
    assert fresh.get(reverse("play", args=[campaign.pk])).status_code == 200


@pytest.mark.parametrize("argv, refused", [
    (["daphne", "-b", "127.0.0.1", "-p", "8000", "storyteller.asgi:application"], False),
    (["/x/.venv/bin/daphne", "-b", "0.0.0.0", "-p", "8000", "app"], True),
    (["daphne", "--bind", "192.168.1.5", "app"], True),
    (["daphne", "-b", "::1", "app"], False),
    ([".venv/lib/python3.11/site-packages/daphne/__main__.py", "-b", "0.0.0.0", "app"], True),
    (["/x/storyteller/serve.py", "-b", "0.0.0.0", "-p", "8000", "app"], True),  # python -m storyteller.serve
    (["/x/storyteller/serve.py", "-b", "127.0.0.1", "-p", "8000", "app"], False),
    (["daphne", "-e", "tcp:port=8000:interface=0.0.0.0", "app"], True),
    (["daphne", "-e", "tcp:port=8000:interface=127.0.0.1", "app"], False),
    (["daphne", "-p", "8000", "app"], False),  # Daphne's own default: 127.0.0.1
    (["manage.py", "runserver", "0.0.0.0:8000"], True),
    (["manage.py", "runserver", "8000"], False),
    (["manage.py", "runserver", "localhost:8000"], False),
    (["manage.py", "migrate"], False),
])
def test_the_refusal_reads_the_servers_own_arguments(argv, refused):
    assert bool(serving.refusal(argv, "")) is refused
    assert serving.refusal(argv, "https://table.example.org") == ""


def test_daphne_bound_beyond_loopback_without_an_origin_does_not_start(tmp_path):
    """The real server: exit code 78 and the words, before it listens (that an origin lifts the refusal is the
    pure test above: a test never listens beyond loopback)."""
    env = {"PATH": "/usr/bin:/bin", "STORYTELLER_DATA_DIR": str(tmp_path)}
    daphne = [str(Path(sys.executable).parent / "daphne"), "-b", "0.0.0.0", "-p", "8033",
              "storyteller.asgi:application"]
    for command in (daphne, [sys.executable, "-m", "daphne", *daphne[1:]],
                    [sys.executable, "-m", "storyteller.serve", *daphne[1:]]):  # the last as scripts/run starts it
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == serving.EXIT_CODE, command
        assert "will not listen on 0.0.0.0 without STORYTELLER_ORIGIN" in done.stderr


def test_a_campaign_with_a_table_deletes_whole(campaign, outsider):
    """Seats, their invitations and whispers (anchored on the story's branches) go with the campaign."""
    from campaigns import lineage
    from campaigns.models import Whisper
    from storyteller import tidying

    seat = seating.take(_invitation(campaign)[1], outsider)
    seating.whisper(seat, "hello", lineage.path_of(campaign))
    tidying.delete(campaign, campaign.title)
    assert not Seat.objects.exists() and not Invitation.objects.exists() and not Whisper.objects.exists()
