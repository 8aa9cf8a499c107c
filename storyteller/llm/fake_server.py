"""
A real HTTP fake of Ollama and OpenAI-compatible model servers.

It listens on 127.0.0.1 (a random free port unless told otherwise) in a
background thread and speaks enough of both APIs to drive every client:

    Ollama   GET /api/version, GET /api/tags, POST /api/show, POST /api/chat,
             POST /api/embed
    OpenAI   GET /v1/models, POST /v1/chat/completions, POST /v1/embeddings
    Rerank   POST /rerank (llama.cpp's and TEI's shape: {"query", "documents"} ->
             {"results": [{"index", "relevance_score"}]})

Replies come from a script: `server.script(...)` for narration,
`server.script_json(...)` for requests that carry a JSON schema (the recorder's
structured calls), `server.script_minds(...)` for those whose schema asks for
a minds record (the recorder's second call: events, perceptions, beliefs),
`server.script_gm(...)` for a game master's steps and
`server.script_characters(...)` for the characters' replies (issue 15),
kept apart so background work after a turn never takes the next turn's
scripted reply, nor one step another's. When a script runs out the server answers
DEFAULT_REPLY, or for a request with a schema the smallest JSON that matches
it — but a game master's step activates everyone its prompt lists with the
player and a character says where it believes things are (``voice_default``),
so a multi-voice turn plays unscripted — and an end-to-end test never hangs. Failures
(`fail_mid_stream`, `fail_request`, `not_found`, `stall`, `omit_done`) are one-shot unless
`persistent=True` (then until `clear_failures()`); `refuse()` lasts until `resume()`; `chunk_delay()` and
`json_delay()` last until changed. `FakeModelServer(slots=1)` answers one chat request at a time, as a
server with one slot does: the others wait in line. Chunks count as tokens: `num_predict` / `max_tokens` cut the
reply short with done_reason "length", and prompt_eval_count is the number of
whitespace-separated words in the messages.

A reasoning model's reply is scripted as `Thought(thinking, text, form)`, in the form a server sends it:
"field" (Ollama's message.thinking, an OpenAI-compatible server's reasoning_content), "tags"
(`<think>…</think>` before the text, each tag split between two chunks) or "open" (only the closing tag, as a
chat template that opened the block in the prompt leaves it); an Ollama request with `"think": false` gets the
text alone, as a model that was asked not to think. `refuse_think()` answers any Ollama request carrying `think`
as Ollama answers one for a model that cannot think (400), until `refuse_think(False)`.

An OpenAI-compatible reply's usage says how many tokens of its prompt a server with one prompt cache would have
reused (`prompt_tokens_details.cached_tokens`, storyteller.llm.caching, counted in words), as such a server reports.

Every request is recorded in `server.requests`, every chat request with its answer in `server.exchanges`
(`cache_slots=N` reports as prompt_eval_count what a server with N prompt caches reads of each prompt,
storyteller.llm.caching, counted in words), every streamed chunk with its
`time.perf_counter()` write time in `server.chunks`, and every stream the
client closed before its end in `server.cancelled`. Embeddings are
`storyteller.llm.scripted.vector_for(text)`, so tests can predict them. A
rerank scores each document by the share of the query's words it holds,
unless `script_rerank(...)` queued the scores.

`FakeModelServer(stubs=...)` answers what is not scripted from the stubs
instead (`reply(messages, schema)` for chat, `embed(text)` for embeddings):
the memory diagnostic's deterministic narrator, summariser and embedder
(storyteller.diagnostics.stubs).

OpenAI-compatible servers differ, and the fake can be told to be one of them:
`imitate("llama.cpp")` answers /props (n_ctx), /apply-template and /tokenize
and sends no usage in a stream; `imitate("vllm")` puts max_model_len in
/v1/models and counts chat messages at /tokenize; `imitate("llama-cpp-python")`
answers /extras/tokenize/count and sends no usage in a stream;
`imitate("lmstudio")` answers /api/v0/models/<id> with max_context_length.
`accept_structured(...)` limits the structured-output modes it takes (see
storyteller.llm.structured; others are refused as the real servers refuse
them, with a server's file path and stack text in the error). A request in a
mode without the schema finds it in the prompt, as a model would.

It lives in the app, not under tests/, because shipped commands run it too
(the bench's relay figures). Tests use the `fake_ollama` fixture
(tests/fake_ollama.py); people use the CLI:

    python -m tests.fake_ollama --port 11500 [--reply-file story.txt]
"""

import contextlib
import hashlib
import json
import re
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import caching, structured
from .scripted import vector_for

DEFAULT_REPLY = "The story continues."
DEFAULT_MODELS = ("qwen2.5:3b-instruct", "nomic-embed-text")
KINDS = ("plain", "llama.cpp", "vllm", "llama-cpp-python", "lmstudio")

# What llama-cpp-python answers a response_format it does not take: internals included.
REFUSED_JSON_SCHEMA = (
    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}\n\n"
    "Traceback (most recent call last):\n"
    '  File "/home/someone/.venv/lib/python3.11/site-packages/llama_cpp/server/app.py", line 376, in create\n'
    "    POST /v1/chat/completions"
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: dict | None
    headers: dict[str, str]
    at: float = 0.0  # time.perf_counter() when the request had been read


@dataclass(frozen=True)
class WrittenChunk:
    text: str
    at: float  # time.perf_counter() just after the chunk left the server


@dataclass
class _Failure:
    persistent: bool
    model: str | None = None  # not_found, stall: only this model, or every model when None
    path: str | None = None  # stall: only requests to this path, or every path when None
    after_chunks: int = 0  # fail_mid_stream
    message: str = ""  # fail_mid_stream
    seconds: float = 0.0  # stall
    status: int = 0  # fail_request


THINKING_FORMS = ("field", "tags", "open")


@dataclass(frozen=True)
class Thought:
    """A scripted reply of a reasoning model: its thinking, then its text (none: a reply that is only thinking)."""

    thinking: str
    text: str = ""
    form: str = "field"  # one of THINKING_FORMS

    def __post_init__(self):
        if self.form not in THINKING_FORMS:
            raise ValueError(f"form must be one of {THINKING_FORMS}, not {self.form!r}")


@dataclass
class _Reply:
    chunks: list[str]
    done_reason: str = "stop"
    thinking: set[int] = field(default_factory=set)  # the indexes of the chunks that are thinking (form "field")

    @property
    def text(self) -> str:
        return "".join(chunk for index, chunk in enumerate(self.chunks) if index not in self.thinking)

    @property
    def thought(self) -> str:
        return "".join(self.chunks[index] for index in sorted(self.thinking))

    def parts(self) -> list[tuple[str, bool]]:
        """Return (chunk, whether it is thinking) in order."""
        return [(chunk, index in self.thinking) for index, chunk in enumerate(self.chunks)]


@dataclass
class FakeModelServer:
    port: int = 0
    default_reply: str = DEFAULT_REPLY
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    architecture: str = "qwen2"
    context_length: int = 32768
    kind: str = "plain"  # which OpenAI-compatible server to imitate: one of KINDS (see imitate())
    stream_usage: bool = True  # send usage at the end of an OpenAI stream when asked
    structured_modes: tuple[str, ...] = structured.MODES  # the structured-output modes accepted
    stubs: object = None  # answers what is not scripted: reply(messages, schema), embed(text)
    slots: int | None = None  # chat requests answered at once; more wait in line (Ollama's OLLAMA_NUM_PARALLEL)
    # Prompt caches to report reading as (``caching.Slots``): prompt_eval_count is then what such a server reads of
    # each prompt, as Ollama reports it, instead of the whole prompt.
    cache_slots: int | None = None
    requests: list[Request] = field(default_factory=list, repr=False)
    exchanges: list[tuple[dict, str]] = field(default_factory=list, repr=False)  # (chat request body, answer), in turn
    chunks: list[WrittenChunk] = field(default_factory=list, repr=False)
    cancelled: int = 0

    def __post_init__(self):
        self._replies = deque()
        self._json_replies = deque()
        self._minds_replies = deque()
        self._gm_replies = deque()
        self._character_replies = deque()
        self._rerank_replies = deque()
        self._failures: dict[str, _Failure] = {}
        self._delay = 0.0
        self._json_delay = 0.0
        self._refuse_think = False
        self._reused = caching.Slots(1)  # what an OpenAI-compatible reply reports as cached
        self._slots = threading.Semaphore(self.slots) if self.slots else None
        self._caches = caching.Slots(self.cache_slots) if self.cache_slots else None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = None
        self._thread = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeModelServer":
        self._listen()
        return self

    def stop(self):
        self._stopping.set()  # wakes stalled handlers
        self._close()
        self._release()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def script(self, *replies: str | list[str] | dict):
        """
        Queue replies for the next chat requests, in order.

        A string is streamed split into words that keep their leading spaces,
        a list is streamed chunk by chunk as given, a dict is sent as JSON.
        """
        with self._lock:
            self._replies.extend(replies)

    def script_json(self, *replies: str | dict):
        """Queue replies for the next requests that carry a JSON schema; a dict is sent as JSON, a string as is."""
        with self._lock:
            self._json_replies.extend(replies)

    def script_minds(self, *replies: str | dict):
        """Queue replies for the next requests whose schema asks for a minds record (it has "perceptions")."""
        with self._lock:
            self._minds_replies.extend(replies)

    def script_gm(self, *replies: str | dict):
        """Queue replies for the next game-master steps (schema with "activate_characters"), in order."""
        with self._lock:
            self._gm_replies.extend(replies)

    def script_characters(self, *replies: str | dict):
        """Queue replies for the next character steps (schema with "speech"), in the order they are asked."""
        with self._lock:
            self._character_replies.extend(replies)

    def script_rerank(self, *scores: list):
        """Queue the scores (one list per request, one score per document) of the next /rerank requests."""
        with self._lock:
            self._rerank_replies.extend(scores)

    def imitate(self, kind: str):
        """Answer the endpoints that server `kind` (one of KINDS) has beyond the OpenAI chat API, as it does."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self.kind = kind
        self.stream_usage = kind not in ("llama.cpp", "llama-cpp-python")

    def accept_structured(self, *modes: str):
        """Accept only these structured-output modes (storyteller.llm.structured.MODES); refuse the others."""
        self.structured_modes = modes

    def tokens_in(self, text: str) -> int:
        """Return how many tokens this server's tokenizer counts in `text` (one per word)."""
        return len(text.split())

    def fail_request(self, path: str, status: int, message: str, *, persistent=False):
        """Answer the next request to `path` with HTTP `status` and `message` as its error, as that API does."""
        self._set(f"request {path}", _Failure(persistent, status=status, message=message))

    def fail_mid_stream(self, after_chunks: int = 1, message: str = "model runner crashed", *, persistent=False):
        """Answer 200, stream `after_chunks` chunks, then send an error line instead of the rest."""
        self._set("fail_mid_stream", _Failure(persistent, after_chunks=after_chunks, message=message))

    def not_found(self, model: str | None = None, *, persistent=False):
        """Answer 404 "model not found" for `model` (or any model) as Ollama does."""
        self._set("not_found", _Failure(persistent, model=model))

    def stall(self, seconds: float, *, persistent=False, path: str | None = None, model: str | None = None):
        """Accept the next request (to `path`, for `model`, when given), then send nothing for `seconds`."""
        self._set("stall", _Failure(persistent, model=model, path=path, seconds=seconds))

    def omit_done(self, *, persistent=False):
        """End the next OpenAI stream without its "data: [DONE]" line, as some servers do."""
        self._set("omit_done", _Failure(persistent))

    def refuse_think(self, refused: bool = True):
        """Answer an Ollama request carrying ``think`` with 400, as Ollama does for a model that cannot think."""
        self._refuse_think = refused

    def clear_failures(self):
        """Forget every scripted failure, persistent ones included."""
        with self._lock:
            self._failures.clear()

    def reset(self):
        """Forget everything scripted and not yet asked for: replies of every kind, failures and delays.

        Tests that share one server (an end-to-end module's) start each from
        here: a reply one test scripted and never used would otherwise be the
        next test's, and its failure would become theirs too.
        """
        with self._lock:
            for queue in (self._replies, self._json_replies, self._minds_replies, self._gm_replies,
                          self._character_replies, self._rerank_replies):
                queue.clear()
            self._failures.clear()
        self._delay = self._json_delay = 0.0
        self._refuse_think = False

    def chunk_delay(self, seconds: float):
        """Wait `seconds` before each streamed chunk after the first, until changed."""
        self._delay = seconds

    def json_delay(self, seconds: float):
        """Think `seconds` before answering each request with a JSON schema, until changed.

        A client that hangs up meanwhile is counted in `cancelled`, and frees its slot at once.
        """
        self._json_delay = seconds

    def refuse(self):
        """Stop listening so connections are refused, until resume().

        The port stays bound (a socket that never listens: connecting to it is
        refused), so no other server on the machine can take it meanwhile and
        answer in this one's place.
        """
        self._close()
        self._held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._held.bind(("127.0.0.1", self.port))

    def resume(self):
        """Listen again on the same port."""
        self._release()
        self._listen()

    def _release(self):
        held, self._held = getattr(self, "_held", None), None
        if held is not None:
            held.close()

    def _reuse(self, messages: list[dict], answer: str) -> int:
        """Return how many tokens of this prompt a server with one prompt cache reuses (what it reports as cached)."""
        with self._lock:
            return self._reused.serve("", messages, answer, _word_count).reused

    def bodies(self, path: str) -> list[dict | None]:
        """Return the JSON bodies of the requests made to `path`, in order."""
        return [request.body for request in self.requests if request.path == path]

    def _listen(self):
        self._httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        self._httpd.fake = self
        self.port = self._httpd.server_address[1]
        # A short poll keeps stop() and refuse() quick: shutdown() waits a poll.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.01,), name=f"fake-ollama-{self.port}", daemon=True
        )
        self._thread.start()

    def _close(self):
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
            self._httpd = None

    def _set(self, kind: str, failure: _Failure):
        with self._lock:
            self._failures[kind] = failure

    def _take(self, kind: str, model: str | None = None, path: str | None = None) -> _Failure | None:
        with self._lock:
            failure = self._failures.get(kind)
            if failure is None or (failure.model is not None and failure.model != model):
                return None
            if failure.path is not None and failure.path != path:
                return None
            if not failure.persistent:
                del self._failures[kind]
            return failure

    def _next_reply(self, schema: dict | None, limit: int | None, messages: list | None = None,
                    think: bool | None = None) -> _Reply:
        with self._lock:
            queue = self._json_replies if schema is not None else self._replies
            properties = (schema or {}).get("properties") or {}
            if "perceptions" in properties:
                queue = self._minds_replies
            elif "activate_characters" in properties:
                queue = self._gm_replies
            elif "speech" in properties:
                queue = self._character_replies
            scripted = queue.popleft() if queue else None
            if scripted is None and self.stubs is not None:
                scripted = self.stubs.reply(messages or [], schema)
        if scripted is None:
            scripted = voice_default(schema, messages or []) if schema else None
        if scripted is None:
            scripted = json.dumps(example_for(schema)) if schema else self.default_reply
        if isinstance(scripted, dict):
            scripted = json.dumps(scripted)
        thought = set()
        if isinstance(scripted, Thought):
            chunks, thought = _thought_chunks(scripted, think)
        else:
            chunks = list(scripted) if isinstance(scripted, list) else _words(scripted)
        if limit is not None and 0 <= limit < len(chunks):
            return _Reply(chunks[:limit], done_reason="length", thinking={i for i in thought if i < limit})
        return _Reply(chunks, thinking=thought)

    def _vector(self, text: str) -> list[float]:
        return self.stubs.embed(text) if self.stubs is not None else vector_for(text)

    @contextlib.contextmanager
    def _slot(self, generating: bool):
        if self._slots is None or not generating:
            yield
            return
        with self._slots:
            yield

    def _record(self, request: Request):
        with self._lock:
            self.requests.append(request)

    def _answered(self, body: dict, answer: str) -> int:
        """Record the exchange; return the prompt tokens to report: all of them, or what the caches had to read."""
        messages = body.get("messages") or []
        with self._lock:
            self.exchanges.append((body, answer))
            if self._caches is None:
                return _prompt_tokens(messages)
            return self._caches.serve("", messages, answer, _word_count).read

    def _record_chunk(self, text: str):
        with self._lock:
            self.chunks.append(WrittenChunk(text, time.perf_counter()))

    def _record_cancel(self):
        with self._lock:
            self.cancelled += 1


def _words(text: str) -> list[str]:
    """Return ``text`` as the chunks it streams in: words that keep their leading spaces."""
    return re.findall(r"\s*\S+|\s+", text)


def _thought_chunks(thought: Thought, think: bool | None) -> tuple[list[str], set[int]]:
    """Return the chunks of a reasoning model's reply in its form, and which of them are thinking (form "field").

    Asked not to think (``think`` False), the model writes its text alone.
    """
    text = _words(thought.text)
    if think is False:
        return text, set()
    thinking = _words(thought.thinking)
    if thought.form == "field":
        return thinking + text, set(range(len(thinking)))
    if thought.form == "tags":
        return ["<thi", "nk>", *thinking, "</th", "ink>\n\n", *text], set()
    return [*thinking, "</think>\n\n", *text], set()


def voice_default(schema: dict, messages: list):
    """Return the unscripted answer of a game-master or character step, so a multi-voice turn plays by itself.

    The game master activates everyone its prompt lists with the player
    (``Round 1 of 3 at Kitchen, with: A; B.``) and narrates after that round; a
    character says who it is, where it believes the first thing its brief
    lists is, and the first thing it remembers. Any
    other schema: None (the smallest matching JSON).
    """
    properties = schema.get("properties") or {}
    last = str(messages[-1].get("content") or "") if messages else ""
    if "activate_characters" in properties:
        answer = example_for(schema)
        found = re.findall(r"^Round \d+ of \d+.*?, with: (.+)\.$", last, re.MULTILINE)
        names = [n.strip() for n in found[-1].split(";") if n.strip() and n.strip() != "no one"] if found else []
        answer["activate_characters"] = [{"who": n, "why": "they are here"} for n in names[:8]]
        answer["narrate"] = True
        return json.dumps(answer)
    if "speech" in properties:
        answer = example_for(schema)
        name = re.findall(r"^Answer as (.+)\.$", last, re.MULTILINE)
        memory = re.search(r"^What you remember \(your own version\)\n- (.+)$", last, re.MULTILINE)
        believed = re.search(r"^Where you last saw things[^\n]*\n- (.+)$", last, re.MULTILINE)
        speech = f"I am {name[-1] if name else 'here'}."
        if believed:
            speech += f" As far as I know, {believed.group(1)}."
        if memory:
            speech += f" I remember: {memory.group(1)}"
        answer["speech"] = speech[:600]
        return json.dumps(answer)
    return None


def example_for(schema: dict):
    """Return the smallest value that matches the JSON `schema` (enough for the schemas we send)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return example_for(schema[key][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {name: example_for(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [example_for(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return "x" * schema.get("minLength", 0)
    return {"integer": 0, "number": 0, "boolean": False, "null": None}[kind]


def _word_count(text: str) -> int:
    return len(text.split())


def _prompt_tokens(messages: list[dict]) -> int:
    return sum(len(str(message.get("content") or "").split()) for message in messages)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeModelServer

    def handle_error(self, request, client_address):
        pass  # a client that hung up mid-reply is an expected part of the tests


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 with chunked streams, as Ollama and llama.cpp answer.
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def _handle(self):
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            # The client hung up before its request was whole (a cancelled call): nobody waits for an answer, and
            # answering would use up a scripted reply meant for the next request.
            fake._record_cancel()
            self.close_connection = True
            return
        body = json.loads(raw) if raw else None
        fake._record(Request(self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()},
                             time.perf_counter()))
        model = body.get("model") if isinstance(body, dict) else None
        stall = fake._take("stall", model, self.path)
        if stall and fake._stopping.wait(stall.seconds):
            return
        failed = fake._take(f"request {self.path}")
        if failed:
            openai = {"message": failed.message, "type": "internal_server_error"}
            self._send_json(failed.status, {"error": failed.message if self.path.startswith("/api/") else openai})
            return
        route = _ROUTES.get((self.command, self.path))
        if route is None and self.command == "GET" and self.path.startswith("/api/v0/models/"):
            route = _Handler._lmstudio_model
        if route is None:
            self._send_json(404, {"error": "404 page not found"})
            return
        if model is not None and fake._take("not_found", model):
            message = f'model "{model}" not found, try pulling it first'
            error = {"message": message, "type": "api_error"} if self.path.startswith("/v1/") else message
            self._send_json(404, {"error": error})
            return
        try:
            with fake._slot(self.path in _GENERATING):
                if fake._json_delay and _schema_in(self.path, body or {}) is not None and not self._think(fake):
                    return
                route(self, fake, body or {})
        except ConnectionError:
            self.close_connection = True

    def _think(self, fake) -> bool:
        """Wait the JSON delay; return False (counting a cancel) if the client hangs up first."""
        deadline = time.perf_counter() + fake._json_delay
        while time.perf_counter() < deadline:
            if self._peer_closed():
                fake._record_cancel()
                self.close_connection = True
                return False
            if fake._stopping.wait(0.01):
                return False
        return True

    def _api_version(self, fake, body):
        self._send_json(200, {"version": "0.12.0"})

    def _api_tags(self, fake, body):
        models = [
            {"name": name, "model": name, "size": 0, "digest": hashlib.sha256(name.encode()).hexdigest()}
            for name in fake.models
        ]
        self._send_json(200, {"models": models})

    def _api_show(self, fake, body):
        info = {"general.architecture": fake.architecture, f"{fake.architecture}.context_length": fake.context_length}
        self._send_json(200, {"details": {"family": fake.architecture}, "model_info": info})

    def _api_embed(self, fake, body):
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        self._send_json(200, {"model": body.get("model"), "embeddings": [fake._vector(text) for text in texts]})

    def _v1_embeddings(self, fake, body):
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else texts
        data = [{"object": "embedding", "index": i, "embedding": fake._vector(text)} for i, text in enumerate(texts)]
        self._send_json(200, {"object": "list", "model": body.get("model"), "data": data})

    def _rerank(self, fake, body):
        documents = [str(d) for d in body.get("documents", [])]
        with fake._lock:
            scores = fake._rerank_replies.popleft() if fake._rerank_replies else None
        if scores is None:
            wanted = set(re.findall(r"\w+", str(body.get("query", "")).lower()))
            scores = [len(wanted & set(re.findall(r"\w+", d.lower()))) / max(1, len(wanted)) for d in documents]
        self._send_json(200, {"results": [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]})

    def _v1_models(self, fake, body):
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "library"} for name in fake.models]
        if fake.kind == "vllm":
            data = [entry | {"max_model_len": fake.context_length} for entry in data]
        self._send_json(200, {"object": "list", "data": data})

    def _props(self, fake, body):
        if fake.kind != "llama.cpp":
            return self._not_found()
        self._send_json(200, {"default_generation_settings": {"n_ctx": fake.context_length}, "total_slots": 1})

    def _apply_template(self, fake, body):
        if fake.kind != "llama.cpp":
            return self._not_found()
        messages = body.get("messages", [])
        turns = "".join(f"<|im_start|>{m.get('role')}\n{m.get('content')}<|im_end|>\n" for m in messages)
        self._send_json(200, {"prompt": turns + "<|im_start|>assistant\n"})

    def _tokenize(self, fake, body):
        if fake.kind == "llama.cpp":
            self._send_json(200, {"tokens": list(range(fake.tokens_in(str(body.get("content", "")))))})
        elif fake.kind == "vllm":
            text = " ".join(f"{m.get('role')}: {m.get('content')}" for m in body.get("messages", []))
            text = str(body["prompt"]) if "prompt" in body else text
            count = fake.tokens_in(text)
            self._send_json(200, {"count": count, "max_model_len": fake.context_length, "tokens": list(range(count))})
        else:
            self._not_found()

    def _extras_tokenize_count(self, fake, body):
        if fake.kind != "llama-cpp-python":
            return self._not_found()
        self._send_json(200, {"count": fake.tokens_in(str(body.get("input", "")))})

    def _lmstudio_model(self, fake, body):
        name = self.path.removeprefix("/api/v0/models/")
        if fake.kind != "lmstudio" or name not in fake.models:
            return self._not_found()
        model = {"id": name, "object": "model", "state": "loaded", "max_context_length": fake.context_length}
        self._send_json(200, model)

    def _not_found(self):
        self._send_json(404, {"detail": "Not Found"})

    def _api_chat(self, fake, body):
        if fake._refuse_think and "think" in body:
            self._send_json(400, {"error": f'"{body.get("model")}" does not support thinking'})
            return
        options = body.get("options") or {}
        schema = body.get("format") if isinstance(body.get("format"), dict) else None
        reply = fake._next_reply(schema, options.get("num_predict"), body.get("messages"), body.get("think"))
        prompt_tokens = fake._answered(body, reply.text)
        final = {
            "model": body.get("model"),
            "created_at": _now(),
            "done": True,
            "done_reason": reply.done_reason,
            "total_duration": 1000,
            "prompt_eval_count": prompt_tokens,
            "eval_count": len(reply.chunks),
        }
        if not body.get("stream", True):
            message = {"role": "assistant", "content": reply.text} | ({"thinking": reply.thought} if reply.thought
                                                                       else {})
            self._send_json(200, final | {"message": message})
            return

        def line(text, thought):
            message = {"role": "assistant", "content": "", "thinking": text} if thought else {
                "role": "assistant", "content": text}
            part = {"model": body.get("model"), "created_at": _now(), "message": message, "done": False}
            return json.dumps(part) + "\n"

        self._stream(
            "application/x-ndjson",
            [(text, line(text, thought)) for text, thought in reply.parts()],
            closing=[json.dumps(final | {"message": {"role": "assistant", "content": ""}}) + "\n"],
            error=lambda message: json.dumps({"error": message}) + "\n",
        )

    def _v1_chat_completions(self, fake, body):
        refusal = _refusal(fake.structured_modes, body.get("response_format"))
        if refusal is not None:
            self._send_json(*refusal)
            return
        schema = _asked_schema(body.get("response_format"), body.get("messages") or [])
        reply = fake._next_reply(schema, body.get("max_tokens"), body.get("messages"))
        prompt_tokens = fake._answered(body, reply.text)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(reply.chunks),
            "total_tokens": prompt_tokens + len(reply.chunks),
            "prompt_tokens_details": {"cached_tokens": fake._reuse(body.get("messages") or [], reply.text)},
        }
        head = {"id": "chatcmpl-fake", "created": int(time.time()), "model": body.get("model")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text} | (
                {"reasoning_content": reply.thought} if reply.thought else {})
            choice = {"index": 0, "message": message, "finish_reason": reply.done_reason}
            self._send_json(200, head | {"object": "chat.completion", "choices": [choice], "usage": usage})
            return

        def sse(payload):
            return f"data: {json.dumps(payload)}\n\n"

        def event(delta, finish_reason=None):
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return sse(head | {"object": "chat.completion.chunk", "choices": [choice]})

        # llama.cpp and vLLM open with a role-only delta whose content is null.
        opening = [("", event({"role": "assistant", "content": None}))]
        closing = [event({}, reply.done_reason)]
        if fake.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
            closing.append(sse(head | {"object": "chat.completion.chunk", "choices": [], "usage": usage}))
        if not fake._take("omit_done"):
            closing.append("data: [DONE]\n\n")
        self._stream(
            "text/event-stream",
            opening + [(text, event({"reasoning_content": text} if thought else {"content": text}))
                       for text, thought in reply.parts()],
            closing=closing,
            error=lambda message: sse({"error": {"message": message, "type": "server_error"}}),
        )

    def _stream(self, content_type: str, parts: list[tuple[str, str]], *, closing: list[str], error):
        """Write `parts` (text, wire line) as a chunked stream, noticing a client that hangs up."""
        fake = self.server.fake
        failure = fake._take("fail_mid_stream")
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            written = 0
            for index, (text, wire) in enumerate(parts):
                if failure and text and written == failure.after_chunks:
                    break
                if index and fake._delay and fake._stopping.wait(fake._delay):
                    return
                if self._peer_closed():
                    fake._record_cancel()
                    self.close_connection = True
                    return
                self._write_chunk(wire)
                if text:
                    written += 1
                    fake._record_chunk(text)
            if failure:
                self._write_chunk(error(failure.message))
            else:
                if self._peer_closed():
                    fake._record_cancel()
                    self.close_connection = True
                    return
                for wire in closing:
                    self._write_chunk(wire)
            self.wfile.write(b"0\r\n\r\n")
        except ConnectionError:
            fake._record_cancel()
            self.close_connection = True

    def _write_chunk(self, text: str):
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _peer_closed(self) -> bool:
        # A client that closed its end makes the socket readable with EOF.
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except ConnectionError:
            return True

    def _send_json(self, status: int, payload: dict):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


_ROUTES = {
    ("GET", "/api/version"): _Handler._api_version,
    ("GET", "/api/tags"): _Handler._api_tags,
    ("POST", "/api/show"): _Handler._api_show,
    ("POST", "/api/chat"): _Handler._api_chat,
    ("POST", "/api/embed"): _Handler._api_embed,
    ("GET", "/v1/models"): _Handler._v1_models,
    ("POST", "/v1/chat/completions"): _Handler._v1_chat_completions,
    ("POST", "/v1/embeddings"): _Handler._v1_embeddings,
    ("GET", "/props"): _Handler._props,
    ("POST", "/apply-template"): _Handler._apply_template,
    ("POST", "/tokenize"): _Handler._tokenize,
    ("POST", "/extras/tokenize/count"): _Handler._extras_tokenize_count,
    ("POST", "/rerank"): _Handler._rerank,
}


def _mode_of(response_format: dict | None) -> str:
    kind = (response_format or {}).get("type")
    if kind == "json_schema":
        return structured.JSON_SCHEMA
    if kind == "json_object":
        return structured.JSON_OBJECT_SCHEMA if "schema" in response_format else structured.JSON_OBJECT
    return structured.TEXT


def _refusal(accepted: tuple[str, ...], response_format: dict | None) -> tuple[int, dict] | None:
    """Return (status, body) refusing `response_format` as a server that takes only `accepted` would."""
    mode = _mode_of(response_format)
    if mode == structured.TEXT or mode in accepted:  # every server takes a request without a response_format
        return None
    if mode == structured.JSON_SCHEMA:
        return 500, {"error": {"message": REFUSED_JSON_SCHEMA, "type": "internal_server_error"}}
    if mode == structured.JSON_OBJECT_SCHEMA:
        return 400, {"error": {"message": "Unrecognized request argument supplied: schema", "type": "invalid_request"}}
    return 400, {"error": {"message": "'response_format' is not supported by this server", "type": "invalid_request"}}
_GENERATING = ("/api/chat", "/v1/chat/completions")


def _schema_in(path: str, body: dict) -> dict | None:
    """Return the JSON schema a chat request carries, or None."""
    if path == "/api/chat":
        return body.get("format") if isinstance(body.get("format"), dict) else None
    return _schema_of(body.get("response_format")) if path == "/v1/chat/completions" else None


def _schema_of(response_format: dict | None) -> dict | None:
    if not response_format:
        return None
    if response_format.get("type") == "json_schema":
        return response_format.get("json_schema", {}).get("schema") or {}
    if response_format.get("type") == "json_object":
        return response_format.get("schema") or {}
    return None


def _asked_schema(response_format: dict | None, messages: list[dict]) -> dict | None:
    """Return the schema a request asks for, in its response_format or else in its prompt; None for prose."""
    schema = _schema_of(response_format)
    if schema:
        return schema
    for message in reversed(messages):
        text = str(message.get("content") or "")
        if structured.SCHEMA_MARKER in text:
            written = text.rsplit(structured.SCHEMA_MARKER, 1)[1].strip()
            return json.JSONDecoder().raw_decode(written)[0]
    return schema


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
