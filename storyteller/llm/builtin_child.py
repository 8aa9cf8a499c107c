"""The built-in narrator's own process: SmolLM2-135M under llama.cpp, spoken to over a pipe (issue 21).

Native code that can fault (ggml's AMX weight repack takes a general
protection fault on virtualised Sapphire Rapids CPUs) must never share a
process with the web server. So the web process never imports llama_cpp:
``llm.supervisor`` starts this module as its child
(``python -m storyteller.llm.builtin_child``) and writes it one JSON object a
line on stdin; the child answers one JSON object a line on stdout, and its
stderr is the narrator's log. This is the only module of the app that imports
llama_cpp.

In::

    {"id": 7, "op": "chat", "messages": [...], "options": {...}}    stream a reply
    {"id": 8, "op": "json", "messages": [...], "schema": {...}, "options": {...}}
    {"op": "cancel", "id": 7}                                        stop it (between tokens, or mid-prompt)

Out::

    {"ready": {"load_ms": 210, "context_length": 8192, "extra_buffers": "off"}}   once, the model loaded
    {"failed": "words"}                                                            instead, and the child exits
    {"id": 7, "started": true}                                                     the request has the model
    {"id": 7, "text": "…"}                                                         a piece of the reply
    {"id": 7, "done": {"done_reason": "stop", "prompt_eval_count": 48, "eval_count": 60}, "ms": 840.2}
    {"id": 8, "json": "{…}", "usage": {"prompt": 900, "read": 40, "written": 31}, "ms": 5120.4}
    {"id": 7, "cancelled": true}
    {"id": 7, "error": "words for a person"}

Every request ends with exactly one of done, json, cancelled or error; "ms"
is the child's own time from reading the request to answering it, so the
parent can tell the pipe's cost from the model's. One generation at a time,
in the order asked; a cancel for a request still waiting drops it.

The child dies with the app: it asks the kernel for SIGKILL when its parent
thread ends (PR_SET_PDEATHSIG) and exits when its stdin closes.
"""

import contextlib
import ctypes
import functools
import json
import os
import queue
import signal
import sys
import threading
import time

from . import bounds, gbnf
from .base import ChatOptions, NarratorError
from .builtin import CHARS_PER_TOKEN, MAX_ITEMS, REPEAT_PENALTY, model_path

PR_SET_PDEATHSIG = 1  # linux/prctl.h

THREADS = max(1, (os.cpu_count() or 2) // 2)


class Cancelled(Exception):
    """The parent cancelled the request being generated."""


def main():
    _die_with_parent()
    out = _Out(sys.stdout)
    requests = queue.Queue()
    current = _Current()
    threading.Thread(target=_read, args=(sys.stdin, requests, current, out), name="builtin-child-stdin",
                     daemon=True).start()
    try:
        model = _Model.load()
    except NarratorError as error:
        out.send({"failed": str(error)})
        sys.exit(1)
    out.send({"ready": model.facts})
    while True:
        request = requests.get()
        if not current.take(request):
            out.send({"id": request["id"], "cancelled": True})
            continue
        try:
            out.send({"id": request["id"], "started": True})
            _answer(model, request, current, out)
        finally:
            current.release()


def _die_with_parent():
    """Ask for SIGKILL when the parent goes (Linux), and leave Ctrl-C to the parent, which ends us itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # stdin's end-of-file still ends us
    expected = os.environ.get("STORYTELLER_NARRATOR_PARENT")
    if expected and os.getppid() != int(expected):
        os._exit(0)  # the parent went before the request above was in place


class _Out:
    """stdout as JSON lines, from any thread."""

    def __init__(self, stream):
        self.stream = stream
        self.lock = threading.Lock()

    def send(self, message):
        line = json.dumps(message, ensure_ascii=False) + "\n"
        with self.lock:
            try:
                self.stream.write(line)
                self.stream.flush()
            except (BrokenPipeError, ValueError):  # the parent is gone
                os._exit(0)


class _Current:
    """The request that has the model, and the ones the parent cancelled before they began."""

    def __init__(self):
        self.lock = threading.Lock()
        self.id = None
        self.stop = threading.Event()
        self.dropped = set()

    def take(self, request):
        with self.lock:
            if request["id"] in self.dropped:
                self.dropped.discard(request["id"])
                return False
            self.id = request["id"]
            self.stop.clear()
            return True

    def release(self):
        with self.lock:
            self.id = None

    def cancel(self, request_id):
        with self.lock:
            if request_id == self.id:
                self.stop.set()
            else:
                self.dropped.add(request_id)


def _read(stream, requests, current, out):
    """Queue each request and act on each cancel at once; end the process when the parent closes the pipe."""
    for line in stream:
        try:
            message = json.loads(line)
        except ValueError:
            print(f"builtin narrator: unreadable line from the app: {line[:200]!r}", file=sys.stderr, flush=True)
            continue
        if message.get("op") == "cancel":
            current.cancel(message.get("id"))
        else:
            requests.put(message)
    os._exit(0)


def _answer(model, request, current, out):
    """Answer one request; every way it ends sends exactly one closing message."""
    started = time.perf_counter()
    request_id = request["id"]

    def elapsed():
        return round((time.perf_counter() - started) * 1000, 3)

    try:
        options = ChatOptions(**{**request["options"], "stop": tuple(request["options"].get("stop", ()))})
        if request["op"] == "chat":
            done = model.stream(request["messages"], options, current.stop,
                                lambda text: out.send({"id": request_id, "text": text}))
            out.send({"id": request_id, "done": done, "ms": elapsed()})
        elif request["op"] == "json":
            text, used = model.complete(request["messages"], request["schema"], options, current.stop)
            out.send({"id": request_id, "json": text, "usage": used, "ms": elapsed()})
        else:
            out.send({"id": request_id, "error": f"The built-in narrator does not know the request {request['op']!r}."})
    except Cancelled:
        # The log says what gave way: a recording a player's turn interrupted is asked for again later.
        print(f"builtin narrator: request {request_id} ({request['op']}) cancelled after {elapsed():.0f} ms",
              file=sys.stderr, flush=True)
        out.send({"id": request_id, "cancelled": True})
    except NarratorError as error:
        out.send({"id": request_id, "error": str(error)})
    except Exception as error:  # llama.cpp failures surface as plain exceptions
        print(f"builtin narrator: request {request_id} failed: {type(error).__name__}: {error}", file=sys.stderr,
              flush=True)
        out.send({"id": request_id, "error": f"The built-in narrator failed ({type(error).__name__}: {error}). "
                                             "Try again."})


def turn_off_extra_buffers():
    """Make every model llama-cpp-python loads from here on load without ggml's extra buffer types.

    The extra buffers (the AMX and AVX-512 weight repack) crash virtualised
    AMX CPUs (llama.cpp issue 20824) and gain little for a 135M model
    (docs/performance.md). llama-cpp-python has no option for them, so its
    default model parameters are wrapped. Return "off", or, when the
    installed llama-cpp-python's parameters have no such field (releases
    before it existed), say so instead of failing.
    """
    import llama_cpp.llama_cpp as bindings

    fields = {name for name, *_ in bindings.llama_model_params._fields_}
    if "use_extra_bufts" not in fields:
        return "not in this llama-cpp-python"
    defaults = bindings.llama_model_default_params
    if getattr(defaults, "_storyteller_wrapped", False):
        return "off"

    @functools.wraps(defaults)
    def without_extra_buffers():
        params = defaults()
        params.use_extra_bufts = False
        return params

    without_extra_buffers._storyteller_wrapped = True
    bindings.llama_model_default_params = without_extra_buffers
    return "off"


class _Model:
    """SmolLM2 loaded once, with its chat template; generates one thing at a time."""

    def __init__(self, llm, formatter, facts, stop_flag):
        self.llm = llm
        self.formatter = formatter
        self.facts = facts
        self._stop_flag = stop_flag

    @classmethod
    def load(cls, extra_buffers=False):
        """Load the model file (with ggml's extra buffer types off unless ``extra_buffers``), or say why not."""
        started = time.perf_counter()
        path = model_path()
        try:
            import llama_cpp.llama_cpp as bindings
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as error:
            raise NarratorError(
                f"The built-in narrator needs llama-cpp-python ({error}); it is installed in the background by "
                "scripts/run (or now: scripts/install builtin). Until then, start Ollama."
            ) from error
        state = "on" if extra_buffers else turn_off_extra_buffers()
        # n_ctx=0 opens the window the model was trained with (8192 for SmolLM2); the library's 512 cannot hold
        # a story. The prompt is read with half the cores, as it is generated: on two cores shared with the app
        # (and a browser), the demo's 1,296-token prompt read at 99 tokens/s with one thread and 52 with two.
        llm = Llama(model_path=str(path), n_ctx=0, n_threads_batch=THREADS, verbose=False)
        formatter = Jinja2ChatFormatter(
            template=llm.metadata["tokenizer.chat_template"],
            eos_token=_token_text(llm, llm.token_eos()),
            bos_token=_token_text(llm, llm.token_bos()),
        )
        # Checked inside every matrix product too, so Stop ends a long prompt's reading within milliseconds
        # instead of after its 512-token batch (1.5 s on two cores).
        stop_flag = [None]

        @bindings.ggml_abort_callback
        def abort(_data):
            flag = stop_flag[0]
            return bool(flag is not None and flag.is_set())

        bindings.llama_set_abort_callback(llm._ctx.ctx, abort, None)
        architecture = llm.metadata.get("general.architecture", "llama")
        facts = {
            "load_ms": round((time.perf_counter() - started) * 1000),
            "context_length": int(llm.metadata.get(f"{architecture}.context_length", llm.n_ctx())),
            "extra_buffers": state,
            "llama_cpp_python": getattr(sys.modules.get("llama_cpp"), "__version__", "unknown"),
        }
        model = cls(llm, formatter, facts, stop_flag)
        model._abort = abort  # kept alive: llama.cpp holds only the pointer
        return model

    def stream(self, messages, options, stop, relay):
        """Relay each piece of the reply to ``messages``; return its usage. Raise Cancelled once ``stop`` is set."""
        tokens, stops = self._prompt(messages, options)
        finish_reason = self._generate(tokens, stop, relay, max_tokens=options.num_predict,
                                       temperature=options.temperature, seed=options.seed, stop=stops,
                                       repeat_penalty=REPEAT_PENALTY)
        # Every sampled token but the last is fed back into the context, so its growth counts the reply exactly;
        # the count includes the token that ended it (llama-cpp's own usage leaves an end-of-turn out).
        return {"done_reason": finish_reason or "stop", "prompt_eval_count": len(tokens),
                "eval_count": self.llm.n_tokens - len(tokens) + 1}

    def complete(self, messages, schema, options, stop):
        """Return the reply to ``messages`` as JSON text following ``schema``; raise Cancelled once ``stop`` is set."""
        tokens, stops = self._prompt(messages, options)
        grammar, limit = self._grammar(schema, options.num_predict)
        parts = []
        held = self._held(tokens)
        finish_reason = self._generate(tokens, stop, parts.append, max_tokens=limit, temperature=options.temperature,
                                       seed=options.seed, stop=stops, grammar=grammar)
        if finish_reason == "length":
            raise NarratorError(
                f"The built-in narrator's answer reached its {limit:,}-token limit before it closed, so it "
                "could not be used. Try again, or start Ollama with a larger model."
            )
        return "".join(parts), {"prompt": len(tokens), "read": len(tokens) - held,
                                "written": self.llm.n_tokens - len(tokens) + 1}

    def _held(self, tokens):
        """Return how many of ``tokens`` the model's cache already holds (llama-cpp's prefix match, which reads
        the last of them again when it holds them all)."""
        held = 0
        for cached, token in zip(self.llm._input_ids.tolist(), tokens):
            if cached != token:
                break
            held += 1
        return held - 1 if held and held == len(tokens) else held

    def _generate(self, tokens, halt, on_text, **sampling):
        """Hand each piece of text to ``on_text`` until the reply ends; return why it ended (llama-cpp's words).

        Raise Cancelled once ``halt`` is set: between tokens, or inside a
        decode (the abort callback).
        """
        finish_reason = None
        with self._stoppable(halt):
            pieces = self.llm.create_completion(tokens, stream=True, **sampling)
            try:
                for piece in pieces:
                    if halt.is_set():
                        raise Cancelled
                    choice = piece["choices"][0]
                    if choice["text"]:
                        on_text(choice["text"])
                    finish_reason = choice["finish_reason"] or finish_reason
            finally:
                pieces.close()
        return finish_reason

    @contextlib.contextmanager
    def _stoppable(self, stop):
        """Let the abort callback see ``stop`` for the block; an abort it caused is a Cancelled."""
        self._stop_flag[0] = stop
        try:
            yield
        except Cancelled:
            raise
        except Exception as error:
            if stop.is_set():
                raise Cancelled from error  # llama_decode returned 2: aborted mid-prompt
            raise
        finally:
            self._stop_flag[0] = None

    def _prompt(self, messages, options):
        """Return the prompt tokens for ``messages`` and the strings that end the reply."""
        # Formatting here instead of in create_chat_completion gives the exact prompt length, which llama-cpp does
        # not report for a stream.
        formatted = self.formatter(messages=messages)
        tokens = self.llm.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special,
                                   special=True)
        if len(tokens) >= self.llm.n_ctx():
            raise NarratorError(
                f"The prompt needs {len(tokens):,} tokens but the built-in narrator's window is "
                f"{self.llm.n_ctx():,}; lower the campaign's context budget, or start Ollama with a larger model."
            )
        stops = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
        return tokens, stops + list(options.stop)

    def _grammar(self, schema, num_predict):
        """Return the grammar for ``schema``, bounded so the answer always closes, and the token limit that ensures it.

        The schema is fitted to ``num_predict`` tokens of ordinary JSON
        (CHARS_PER_TOKEN characters each); the limit then allows one token per
        character, so even an answer of digits and punctuation closes.
        """
        fitted = bounds.fit(bounds.bound(schema, max_items=MAX_ITEMS), num_predict * CHARS_PER_TOKEN)
        if fitted is None:
            _grammar_text(schema)  # says what in the schema the grammar cannot express, if that is why
            raise NarratorError(
                f"The built-in narrator cannot answer this JSON schema within {num_predict:,} tokens; "
                "raise the step's token limit or simplify the schema."
            )
        return _grammar_of(self.llm, json.dumps(fitted)), max(num_predict, bounds.longest(fitted))


@functools.lru_cache(maxsize=16)
def _grammar_of(llm, schema_json):
    """Return the llama.cpp grammar for a JSON schema, checked: sampling with a grammar llama.cpp refused crashes."""
    # The same few schemas come back every turn: convert and check each once.
    import llama_cpp
    from llama_cpp import LlamaGrammar

    text = _grammar_text(json.loads(schema_json))
    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode("utf-8"), b"root")
    if not sampler:
        raise NarratorError("The built-in narrator's grammar for this JSON schema was refused by llama.cpp; "
                            "simplify the schema.")
    llama_cpp.llama_sampler_free(sampler)
    return LlamaGrammar.from_string(text, verbose=False)


def _grammar_text(schema):
    try:
        return gbnf.grammar(schema)
    except gbnf.Unsupported as error:
        raise NarratorError(f"The built-in narrator cannot follow this JSON schema ({error}); simplify it.") from error


def _token_text(llm, token):
    return llm.detokenize([token], special=True).decode("utf-8", errors="ignore") if token >= 0 else ""


if __name__ == "__main__":
    main()
