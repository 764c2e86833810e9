"""``FallbackModel``: the next model when one is down.

    model = FallbackModel(OpenAIChatModel("gpt-4o-mini"), AnthropicModel("claude-sonnet-4-5"))
    agent = Agent(model, tools)

Each step asks the models in order, starting again from the first, and
returns the first reply. The next model is asked only when one fails to
give a reply at all, with a connection error, a timeout, 429 or 5xx
(``FALLBACK_ON``; ``on=`` narrows or widens that to other ``ModelError``
classes, or a predicate over the error). A reply is a reply and is
returned: a ``length`` cut, a content filter, or calls the gates then
refuse are the run's to judge, never a reason to ask another model.
Each model retries as it is configured before the next is asked
(``max_retries=0`` on the first moves on at once).

Which model answered is on the reply (``ModelReply.answered_by``, and
``skipped``: why each model before it gave none), so the run's
``model_replied`` event names it. When every model fails, the step fails
with ``FallbackExhausted``, naming each failure.

Streaming: a model whose stream fails before any of it reached the run's
listeners (no text, no call piece) is passed over like any failure; once a
piece has been delivered, a failure is the step's error, since listeners
cannot take back what they were shown.

The run's deadline holds across the chain: each model gets the time left,
and none is asked once it has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tether.core.errors import (
    ConfigurationError,
    FallbackExhausted,
    ModelConnectionError,
    ModelError,
    ModelTimeout,
    RateLimited,
    ServerError,
)
from tether.core.messages import ModelReply
from tether.core.settings import ModelSettings
from tether.models.base import Model, ModelRequest

if TYPE_CHECKING:
    from tether.tools.output import OutputMode

__all__ = ["FALLBACK_ON", "FallbackModel"]

# The failures after which the next model is asked: the endpoint could not be reached or gave no reply in time,
# or it is rate-limited or failing (429, 5xx). A 4xx, an unreadable reply or a refused key are not the
# endpoint being down, and another model would most likely fail the same way.
FALLBACK_ON: tuple[type[ModelError], ...] = (ModelConnectionError, ModelTimeout, RateLimited, ServerError)

FallbackOn = tuple[type[ModelError], ...] | Callable[[ModelError], bool]


class FallbackModel:
    """A ``Model`` that asks ``primary``, then each of ``others`` in turn while they fail (see the module)."""

    def __init__(self, primary: Model, *others: Model, on: FallbackOn = FALLBACK_ON) -> None:
        self.models: tuple[Model, ...] = (primary, *others)
        for model in self.models:
            if not isinstance(model, Model):
                raise ConfigurationError(
                    f"FallbackModel takes Model objects (OpenAIChatModel(...), AnthropicModel(...)), not "
                    f"{type(model).__name__}"
                )
        if isinstance(on, tuple):
            if not on or not all(isinstance(c, type) and issubclass(c, ModelError) for c in on):
                raise ConfigurationError("FallbackModel(on=...) takes ModelError classes, or a predicate")
        elif not callable(on):
            raise ConfigurationError("FallbackModel(on=...) takes a tuple of ModelError classes, or a predicate")
        self.on = on
        self.name = "fallback:" + ",".join(m.name for m in self.models)
        # One request serves every model of the chain: a structured answer is asked for in a way all of
        # them can send, and tools go in strict form only when every server enforces it.
        modes = [getattr(m, "output_modes", None) for m in self.models]
        known = [m for m in modes if m is not None]
        if known:
            common = tuple(mode for mode in known[0] if all(mode in other for other in known[1:]))
            if not common:
                raise ConfigurationError(
                    "the models of this FallbackModel share no way to ask for a structured answer (output_modes)"
                )
            self.output_modes: tuple[OutputMode, ...] = common
            first = getattr(primary, "output_mode", None)
            self.output_mode: OutputMode = next((m for m in common if m == first), common[0])
        self.strict_tools = all(bool(getattr(m, "strict_tools", False)) for m in self.models)

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(repr(m) for m in self.models)})"

    def check_settings(self, settings: ModelSettings | None) -> None:
        """Settings every model of the chain can send: a setting one of them refuses is refused here."""
        for model in self.models:
            check = getattr(model, "check_settings", None)
            if check is not None:
                check(settings)

    def falls_back(self, error: ModelError) -> bool:
        """Whether the next model is asked after ``error``."""
        if isinstance(self.on, tuple):
            return isinstance(error, self.on)
        return bool(self.on(error))

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The first model's reply that can be had; ``FallbackExhausted`` naming each failure when none can."""
        failed: list[tuple[str, ModelError]] = []
        started = time.monotonic() if request.timeout is not None else 0.0
        for model in self.models:
            attempt, delivered = _watched(request)
            if request.timeout is not None:
                left = request.timeout - (time.monotonic() - started)
                if failed and left <= 0:
                    break  # the run's deadline has passed: no model is asked after it
                attempt = replace(attempt, timeout=max(0.0, left))
            try:
                reply = await model.complete(attempt)
            except ModelError as exc:
                if delivered and delivered[0]:
                    exc.add_note(f"{model.name} failed after part of its streamed reply was delivered")
                    raise
                if not self.falls_back(exc):
                    for name, earlier in failed:
                        exc.add_note(f"asked before it: {name}: {type(earlier).__name__}: {earlier}")
                    raise
                failed.append((model.name, exc))
                continue
            skipped = tuple(f"{name}: {type(exc).__name__}: {exc}" for name, exc in failed)
            # A chain within a chain: its own member answered, after its own skipped ones.
            return replace(reply, answered_by=reply.answered_by or model.name, skipped=skipped + reply.skipped)
        if len(failed) == 1:
            raise failed[0][1]
        raise FallbackExhausted(failed) from failed[-1][1]

    async def aclose(self) -> None:
        """Close every model's client, the later ones too when one fails to close (its error is raised)."""
        failure: BaseException | None = None
        for model in self.models:
            try:
                await model.aclose()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def _watched(request: ModelRequest) -> tuple[ModelRequest, list[bool]]:
    """``request`` with listeners that note whether any streamed piece was delivered (``[True]``), and the note."""
    if request.on_text is None and request.on_tool_delta is None:
        return request, []
    delivered = [False]
    on_text, on_tool_delta = request.on_text, request.on_tool_delta
    changes: dict[str, Any] = {}
    if on_text is not None:

        def text(piece: str) -> None:
            delivered[0] = True
            on_text(piece)

        changes["on_text"] = text
    if on_tool_delta is not None:

        def tool_delta(index: int, ident: str | None, name: str | None, piece: str) -> None:
            delivered[0] = True
            on_tool_delta(index, ident, name, piece)

        changes["on_tool_delta"] = tool_delta
    return replace(request, **changes), delivered
