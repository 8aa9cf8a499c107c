"""One-time sign-in links for the local owner.

The app has no passwords: the person who can run ``manage.py login_link`` on
this machine is the owner. A link is a password-reset style token bound to the
user's ``last_login``, so it stops working the moment it has been used.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

OWNER_USERNAME = "owner"


class _LoginLinkTokenGenerator(PasswordResetTokenGenerator):
    key_salt = "storyteller.signin.LoginLinkTokenGenerator"


login_tokens = _LoginLinkTokenGenerator()


def owner():
    """Return the local owner, creating it on first run."""
    user, created = get_user_model().objects.get_or_create(
        username=OWNER_USERNAME, defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def login_link(user, base_url="http://127.0.0.1:8000"):
    """Return a one-time sign-in address for ``user``."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return base_url.rstrip("/") + reverse("login_link", args=[uid, login_tokens.make_token(user)])
