"""An import costs a bounded amount whatever the bytes: zip bombs and lying headers are refused while reading
(issue 10, point 2), with this process's resident memory measured while it happens."""

import io
import json
import time
import zipfile

import pytest

from campaigns.models import Campaign
from storyteller import bundle
from storyteller.diagnostics.load import PeakMemory, lying, zip_bomb

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def bomb():
    return zip_bomb(256 * MiB)


@pytest.mark.parametrize("make, words", [
    (lambda data: data, "unpacks to more than"),
    (lambda data: lying(data, 1000), "larger than its header says"),
    (lambda data: lying(data, 40 * MiB), "larger than its header says"),
], ids=["zip-bomb", "header-says-1000-bytes", "header-says-40-MiB"])
def test_a_zip_that_inflates_past_the_limit_is_refused_while_reading(outsider, bomb, make, words):
    data = make(bomb)
    with PeakMemory() as memory:
        started = time.perf_counter()
        with pytest.raises(bundle.BundleRefused) as refusal:
            bundle.import_bundle(outsider, data)
        seconds = time.perf_counter() - started
    assert words in str(refusal.value) and "Nothing was imported" in str(refusal.value)
    assert memory.above < 200 * MiB, f"{memory.above / MiB:.0f} MiB above idle"
    assert seconds < 10, f"refused after {seconds:.1f} s"
    assert not Campaign.objects.exists()


def test_a_zip_whose_directory_is_enormous_is_refused_before_it_is_parsed(outsider):
    # 40,000 empty members: a directory of about 2 MB, which zipfile would turn into 40,000 objects.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for index in range(40_000):
            archive.writestr(f"{index}", b"")
    with pytest.raises(bundle.BundleRefused, match="holds 40,000 files; a campaign bundle zip holds at most 100"):
        bundle.import_bundle(outsider, buffer.getvalue())


def test_a_zip_without_the_bundle_says_what_it_lacks(outsider):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", b"hello")
    with pytest.raises(bundle.BundleRefused, match="holds no campaign.json"):
        bundle.import_bundle(outsider, buffer.getvalue())


def test_a_bundle_over_the_limit_is_refused_before_it_is_read(outsider, settings):
    settings.STORYTELLER_BUNDLE_MAX_BYTES = 1 * MiB
    with pytest.raises(bundle.BundleRefused, match="at most 1,048,576 bytes"):
        bundle.import_bundle(outsider, b" " * (2 * MiB))


def test_a_bundle_of_tiny_values_is_refused_before_it_is_parsed(outsider):
    # 60 MiB of "[]," parses into twenty million lists (well over a gigabyte); it is refused on its skeleton.
    data = b"[" + b"[]," * (20 * MiB) + b"[]]"
    with PeakMemory() as memory:
        with pytest.raises(bundle.BundleRefused, match="separate values"):
            bundle.import_bundle(outsider, data)
    assert memory.above < 200 * MiB, f"{memory.above / MiB:.0f} MiB above idle"


def test_a_padded_bundle_within_the_limit_imports_at_a_bounded_cost(campaign, outsider):
    exported = bundle.export_campaign(campaign)
    data = json.dumps(exported).encode()
    padded = data[:-1] + b" " * (50 * MiB) + data[-1:]
    with PeakMemory() as memory:
        imported = bundle.import_bundle(outsider, padded)
    assert imported.owner == outsider
    assert memory.above < 200 * MiB, f"{memory.above / MiB:.0f} MiB above idle"
