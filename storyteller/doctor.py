"""The self-check: which narrator would play, whether the built-in one starts and answers, the processor, the data folder.

``manage.py doctor`` prints it and the model settings page shows it: one
finding a line, in a person's words, each that fails saying what to do.
"""

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from . import llm
from .llm import preparing, supervisor

# Five tokens: enough to know the model answers, little enough to be quick (about 0.2 s warm here).
PROBE_TOKENS = 5
PROBE = [
    {"role": "system", "content": "You are the narrator of a short adventure."},
    {"role": "user", "content": "I light the lantern."},
]

# Below this, an import or a long story's database can fill the disk mid-write.
FREE_SPACE = 200 * 1024 * 1024

# The flags of /proc/cpuinfo that decide how llama.cpp runs here.
FEATURES = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("amx_tile", "AMX"))


@dataclass(frozen=True)
class Finding:
    topic: str
    ok: bool
    text: str  # what was found; when not ok, what to do


async def acheck():
    """Return every finding, in order; the built-in narrator's process is started (and asked) if it can run."""
    return [
        await _narrator(),
        await _builtin(),
        processor(),
        data_folder(Path(settings.DATA_DIR)),
        _memory(),
    ]


async def _narrator():
    status = await llm.aserver_status(fresh=True)
    if status.builtin:
        if status.error:
            return Finding("Narrator", False, f"No model server answers at {status.url}. {status.error}")
        return Finding("Narrator", True, f"The built-in narrator would play: no model server answers at {status.url}. "
                                         "Connect Ollama for real stories.")
    if not status.reachable:
        return Finding("Narrator", False, f"The {status.api} server at {status.url} would play, but it does not "
                                          f"answer: {status.error}")
    model = llm.default_narrator_model()
    found = f"{status.api} at {status.url} would play, with {len(status.models)} model(s)"
    if status.api == "ollama" and model not in status.models:
        return Finding("Narrator", False, f"{found}, but not the default narrator {model}: run ollama pull {model}, "
                                          "or choose one of its models on the model settings page.")
    return Finding("Narrator", True, f"{found}.")


async def _builtin():
    build = preparing.state()
    if build.state != "ready":
        return Finding("Built-in narrator", build.state == "building", build.message)
    cold = supervisor.running() is None
    started = time.perf_counter()
    try:
        async for chunk in llm.BuiltinNarrator().stream_chat(PROBE, llm.ChatOptions(num_predict=PROBE_TOKENS,
                                                                                     temperature=0, seed=1)):
            if chunk.done:
                break
    except llm.NarratorError as error:
        return Finding("Built-in narrator", False, f"Its process did not answer: {error}")
    seconds = time.perf_counter() - started
    facts = supervisor.running().facts if supervisor.running() is not None else {}
    how = (f"started and answered a {PROBE_TOKENS}-token request in {seconds:.1f} s (its model loaded in "
           f"{facts.get('load_ms', 0) / 1000:.1f} s)") if cold else (
        f"answered a {PROBE_TOKENS}-token request in {seconds:.1f} s")
    if facts.get("extra_buffers") != "off":
        return Finding("Built-in narrator", False, f"Its process {how}, but this llama-cpp-python "
                                                   f"({facts.get('llama_cpp_python')}) cannot turn ggml's extra buffer "
                                                   "types off, which crash virtualised AMX processors: upgrade it "
                                                   "(pip install --upgrade llama-cpp-python), or connect Ollama.")
    return Finding("Built-in narrator", True, f"Its process {how}, with ggml's extra buffer types off.")


def processor(cpuinfo=Path("/proc/cpuinfo")):
    """Return which of the features in FEATURES the processor has, and what that means for the built-in narrator."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return Finding("Processor", True, "Its features are unknown here (no /proc/cpuinfo); the built-in narrator "
                                          "runs with ggml's extra buffer types off on any processor.")
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    said = ", ".join(f"{name} {'yes' if flag in flags else 'no'}" for flag, name in FEATURES)
    if "avx2" not in flags:
        return Finding("Processor", False, f"{said}. Without AVX2 the built-in narrator writes slowly; connect "
                                           "Ollama (on this machine or a faster one) for a quicker narrator.")
    if "amx_tile" in flags:
        return Finding("Processor", True, f"{said}. ggml's extra buffer types crash virtualised AMX processors; the "
                                          "built-in narrator runs with them off.")
    return Finding("Processor", True, f"{said}.")


def data_folder(path):
    """Return whether ``path`` is a folder this user alone can read, and can write, with room to spare."""
    try:
        status = path.stat()
    except OSError as error:
        return Finding("Data folder", False, f"{path} cannot be read ({error.strerror}); set STORYTELLER_DATA_DIR to "
                                             "a folder of your own.")
    if status.st_uid != os.getuid():
        return Finding("Data folder", False, f"{path} belongs to another user; set STORYTELLER_DATA_DIR to a folder "
                                             "of your own, or give this one to your user.")
    if status.st_mode & 0o077:
        return Finding("Data folder", False, f"{path} can be read by other users of this machine (mode "
                                             f"{status.st_mode & 0o777:o}); restart the app, which closes it, or "
                                             f"run chmod -R go-rwx {path}.")
    try:
        descriptor, probe = tempfile.mkstemp(dir=path, prefix=".doctor-")
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        return Finding("Data folder", False, f"{path} cannot be written ({error.strerror}); give your user write "
                                             "access to it, or set STORYTELLER_DATA_DIR to a folder of your own.")
    free = shutil.disk_usage(path).free
    if free < FREE_SPACE:
        return Finding("Data folder", False, f"{path} has only {_size(free)} free; make room on its disk, or move "
                                             "the folder (STORYTELLER_DATA_DIR) to one with more.")
    return Finding("Data folder", True, f"{path} is yours alone (mode {status.st_mode & 0o777:o}) and writable, with "
                                        f"{_size(free)} free.")


@dataclass(frozen=True)
class Report:
    """What the model settings page says about the built-in narrator now, without asking it anything."""

    build: preparing.Build
    refused: str  # why it is not started again, or ""
    running: bool
    loaded: bool
    load_seconds: float | None
    memory: str | None  # its process's resident memory, in words
    extra_buffers: str | None
    log: Path


def builtin_report():
    """Return the built-in narrator's Report."""
    child = supervisor.running()
    facts = (child.facts or {}) if child is not None else {}
    resident = supervisor.memory()
    return Report(
        build=preparing.state(),
        refused=supervisor.refused(),
        running=child is not None,
        loaded=bool(facts),
        load_seconds=facts["load_ms"] / 1000 if facts else None,
        memory=_size(resident) if resident else None,
        extra_buffers=facts.get("extra_buffers"),
        log=supervisor.log_path(),
    )


def _memory():
    resident = supervisor.memory()
    if resident is None:
        return Finding("Memory", True, "The built-in narrator's process is not running, so it uses no memory.")
    return Finding("Memory", True, f"The built-in narrator's process uses {_size(resident)} of memory.")


def _size(count):
    if count >= 1024 ** 3:
        return f"{count / 1024 ** 3:.1f} GB"
    return f"{count / 1024 ** 2:.0f} MB"
