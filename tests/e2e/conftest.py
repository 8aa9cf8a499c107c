"""What every end-to-end test shares."""

import pytest


@pytest.fixture(autouse=True)
def _script_starts_empty(request):
    """Start each test that uses the module's fake model server with nothing scripted on it.

    A module's tests share one server (the app is started against it once), so
    a reply a failed test left unused would be the next test's reply, and that
    test would fail in its turn.
    """
    if "fake" in request.fixturenames:
        request.getfixturevalue("fake").reset()
