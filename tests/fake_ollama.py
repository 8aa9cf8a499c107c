"""The fake model server as a pytest fixture and a command.

The server itself is ``storyteller.llm.fake_server`` (shipped commands run it
too); this module re-exports it so tests keep importing it from here.

    python -m tests.fake_ollama --port 11500 [--reply-file story.txt]
"""

import argparse
import contextlib
import threading

import pytest

from storyteller.llm.fake_server import DEFAULT_MODELS, DEFAULT_REPLY, FakeModelServer, Request, Thought, example_for

__all__ = ["DEFAULT_MODELS", "DEFAULT_REPLY", "FakeModelServer", "Request", "Thought", "example_for", "fake_ollama",
           "serving"]


@contextlib.asynccontextmanager
async def serving(settings, **options):
    """Run a FakeModelServer(**options) with the app pointed at it as Ollama; settle the post-turn work after."""
    from storyteller.steps import postturn

    with FakeModelServer(**options) as server:
        settings.STORYTELLER_LLM_URL = server.url
        settings.STORYTELLER_LLM_URL_CONFIGURED = True
        settings.STORYTELLER_LLM_API = "ollama"
        yield server
        await postturn.settle()


@pytest.fixture
def fake_ollama():
    """Yield a running FakeModelServer; stop it after the test."""
    with FakeModelServer() as server:
        yield server


def main():
    parser = argparse.ArgumentParser(description="Serve a fake Ollama / OpenAI-compatible model server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=11500)
    parser.add_argument("--reply-file", help="a text file whose contents become every reply")
    args = parser.parse_args()
    server = FakeModelServer(port=args.port)
    if args.reply_file:
        with open(args.reply_file, encoding="utf-8") as file:
            server.default_reply = file.read()
    with server:
        print(f"fake model server listening on {server.url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
