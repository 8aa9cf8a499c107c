"""The self-check, as manage.py doctor prints it and the model settings page shows it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storyteller import doctor

ROOT = Path(__file__).resolve().parents[2]


def run_doctor(tmp_path, **env):
    environment = {key: value for key, value in os.environ.items() if key != "STORYTELLER_LLM_URL"}
    environment.update(STORYTELLER_DATA_DIR=str(tmp_path / "data"), **env)
    return subprocess.run([sys.executable, "manage.py", "doctor"], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=300)


def test_the_doctor_says_in_one_line_each_what_would_play_and_that_the_builtin_narrator_answers(tmp_path):
    done = run_doctor(tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok   Narrator", "ok   Built-in narrator", "ok   Processor", "ok   Data folder", "ok   Memory"]
    assert "The built-in narrator would play: no model server answers at http://127.0.0.1:11434" in lines[0]
    assert "Its process started and answered a 5-token request in " in lines[1]
    assert "with ggml's extra buffer types off" in lines[1]
    assert "AVX2 yes" in lines[2] or "AVX2 no" in lines[2]
    assert f"{tmp_path / 'data'} is yours alone (mode 700) and writable" in lines[3]
    assert "The built-in narrator's process uses" in lines[4] and " MB of memory" in lines[4]
    assert "`" not in done.stdout, "player-facing words, no backticks"


def test_a_configured_server_that_does_not_answer_is_a_line_that_says_so_and_the_doctor_fails(tmp_path, fake_ollama):
    fake_ollama.refuse()

    done = run_doctor(tmp_path, STORYTELLER_LLM_URL=fake_ollama.url)

    assert done.returncode == 1
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FIX  Narrator")]
    assert f"The ollama server at {fake_ollama.url} would play, but it does not answer" in line
    assert "1 of 5 checks need attention: Narrator." in done.stderr


def test_a_data_folder_others_can_read_is_found_with_what_to_do(tmp_path):
    tmp_path.chmod(0o755)

    finding = doctor.data_folder(tmp_path)

    assert not finding.ok
    assert "can be read by other users of this machine (mode 755)" in finding.text
    assert f"chmod -R go-rwx {tmp_path}" in finding.text


def test_a_data_folder_that_is_missing_says_to_choose_another(tmp_path):
    finding = doctor.data_folder(tmp_path / "gone")

    assert not finding.ok and "set STORYTELLER_DATA_DIR to a folder of your own" in finding.text


@pytest.mark.parametrize("flags,ok,said", [
    ("fpu sse2 avx avx2 avx512f", True, "AVX2 yes, AVX-512 yes, AMX no."),
    ("fpu sse2 avx avx2 avx512f amx_tile amx_int8 amx_bf16", True, "AMX yes. ggml's extra buffer types crash"),
    ("fpu sse2 avx", False, "AVX2 no, AVX-512 no, AMX no. Without AVX2 the built-in narrator writes slowly"),
], ids=["avx512", "amx", "old"])
def test_the_processors_features_are_read_from_cpuinfo(tmp_path, flags, ok, said):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")

    finding = doctor.processor(cpuinfo)

    assert finding.ok is ok and said in finding.text
