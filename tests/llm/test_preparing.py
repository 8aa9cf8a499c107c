"""How the built-in narrator's background build is read: building (with minutes left), gone, ready, failed."""

import json
import subprocess
import time

import pytest

from storyteller.llm import preparing


@pytest.fixture
def folder(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    path = tmp_path / "narrator"
    path.mkdir()
    return path


@pytest.fixture
def building():
    """A real process standing for scripts/prepare-narrator while it runs."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def say(folder, **status):
    (folder / "build.json").write_text(json.dumps(status))


def test_a_running_build_says_it_is_being_prepared_with_the_minutes_left_from_the_compilers_progress(
    folder, building
):
    say(folder, state="building", started=time.time() - 110, pid=building.pid)
    (folder / "build.log").write_text("Building wheel…\n[49/100] Building CXX object a.o\n[50/100] Building CXX b.o\n")

    build = preparing.state()

    assert build.state == "building"
    assert build.minutes_left == 2  # 110 s for the first half: about 110 s more
    assert build.message == ("The built-in narrator is being prepared (about 2 minutes); connect Ollama to play now.")


def test_before_the_compiler_says_how_far_it_is_the_measured_length_is_used(folder, building, monkeypatch):
    monkeypatch.setattr(preparing.os, "cpu_count", lambda: 2)
    say(folder, state="building", started=time.time() - 30, pid=building.pid)

    build = preparing.state()

    assert build.minutes_left == -(-(preparing.BUILD_SECONDS_ON_TWO_CORES - 30) // 60)
    assert "minute" in build.message and "Ollama" in build.message


def test_a_build_whose_process_is_gone_is_not_building(folder):
    gone = subprocess.Popen(["true"])
    gone.wait()
    say(folder, state="building", started=time.time() - 30, pid=gone.pid)

    # Gone without saying how it ended; what decides is what is installed (here: everything, so it plays).
    assert preparing.state().state == "ready"


def test_the_words_for_a_failed_and_a_missing_build_say_what_to_do(folder):
    log = folder / "build.log"

    failed = preparing.Build("failed", log=log).message
    missing = preparing.Build("missing", log=log).message

    assert str(log) in failed and "scripts/install builtin" in failed and "Connect Ollama" in failed
    assert "not installed" in missing and "scripts/install builtin" in missing
    assert "`" not in failed + missing
    assert preparing.Build("ready").message == ""
