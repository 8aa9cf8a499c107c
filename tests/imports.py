"""Waiting for a background import (campaigns.importing.start) the way the person's browser does."""

import time


def finished_import(client, progress_url, seconds=120):
    """Follow an import's progress page until it sends the person on; return where to."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        page = client.get(progress_url)
        if page.status_code == 302:
            return page["Location"]
        assert page.status_code == 200 and "records written" in page.content.decode(), page.content.decode()[-2000:]
        time.sleep(0.05)
    raise AssertionError(f"the import at {progress_url} did not finish in {seconds} s")
