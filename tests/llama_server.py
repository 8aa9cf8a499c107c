"""
A real OpenAI-compatible server for the tests: llama-cpp-python's, with the SmolLM2 GGUF.

The fake server (tests/fake_ollama.py) answers almost every test; this one
shows what a real server does with what the app sends — which structured
output it refuses, that it sends no usage in a stream, that it names its
model by a file path and reports no context window. It is started once per
test session, on a free loopback port, the way a person would start it:

    python -m llama_cpp.server --model <gguf> --port <port> --host 127.0.0.1 --n_ctx 8192

(plus a thread count, see THREADS), through ``tests.llama_cpp_serve``, which
turns ggml's extra buffer types off first: with them on, every generation
crashes a virtualised AMX CPU (issue 21).
"""

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from storyteller.llm.builtin import model_path

ROOT = Path(__file__).resolve().parents[1]
N_CTX = 8192

# Loading the 135M model takes about a second here; a busy machine may take ten times that.
START_TIMEOUT = 60.0

# The server reads prompts with every core by default (n_threads_batch) and generates with half of them.
# On a small machine that is also running the tests, that costs more than it gains: a 450-token prompt
# read at 33 tokens/s with two threads and 110 with one on the 2-core machine this was measured on.
THREADS = max(1, (os.cpu_count() or 2) // 2)


@dataclass
class LlamaServer:
    url: str
    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        """Return what the server has printed so far."""
        return self.log.read_text(errors="replace")

    def check_running(self):
        """Fail, with how the server ended and what it printed last, if its process is gone."""
        if self.process.poll() is not None:
            pytest.fail(f"llama-cpp-python's server is gone (exit code {self.process.returncode}); it printed "
                        f"last:\n{self.output()[-2000:]}")

    def cpu_seconds(self) -> float:
        """Return the CPU time the server process has used, all its threads together (Linux /proc)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory):
    """Yield a running llama-cpp-python server with the SmolLM2 GGUF; stop it after the session."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [sys.executable, "-m", "tests.llama_cpp_serve", "--model", str(model_path()), "--port", str(port),
               "--host", "127.0.0.1", "--n_ctx", str(N_CTX), "--n_threads_batch", str(THREADS)]
    with log.open("wb") as output:
        # Unbuffered, so the log shows what the server did when the test looks.
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT,
                                   env=os.environ | {"PYTHONUNBUFFERED": "1"})
    server = LlamaServer(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_ready(server: LlamaServer):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            exited = server.process.returncode
            pytest.fail(f"llama-cpp-python's server exited with {exited}:\n{server.output()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/v1/models", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"llama-cpp-python's server did not answer within {START_TIMEOUT:g} s:\n{server.output()[-2000:]}")
