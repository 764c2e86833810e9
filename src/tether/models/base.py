"""The one seam between a run and a model: ``Model.complete``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.core.errors import ConfigurationError
from tether.core.quick import quick_init
from tether.core.settings import ModelSettings

if TYPE_CHECKING:
    from tether.core.messages import Message, ModelReply
    from tether.tools.output import OutputMode

__all__ = ["Model", "ModelRequest", "ModelSettings", "output_mode", "settings_for"]


@quick_init
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One step's request. ``settings`` are the run's model settings (the agent's and the run's, merged);
    the adapter merges them over its own (``settings_for``). ``max_tokens`` is a shorthand for
    ``settings.max_tokens`` (which wins when both are given)."""

    messages: Sequence[Message]
    tools: Sequence[dict[str, Any]] = ()
    max_tokens: int | None = None
    timeout: float | None = None  # seconds left before the run's deadline
    tool_choice: str | dict[str, Any] | None = None  # None: the provider's default ("auto")
    on_text: Callable[[str], None] | None = field(default=None, compare=False)  # streamed text pieces
    response_format: dict[str, Any] | None = None  # structured output in native mode (json_schema)
    stream: bool | None = None  # None: as the adapter was configured
    # Pieces of tool-call arguments as they stream: (index, id or None, name or None, arguments piece).
    on_tool_delta: Callable[[int, str | None, str | None, str], None] | None = field(default=None, compare=False)
    settings: ModelSettings | None = None


def settings_for(own: ModelSettings | None, request: ModelRequest) -> ModelSettings | None:
    """What ``request`` asks of an adapter whose own settings are ``own``: ``own``, then the request's
    ``max_tokens``, then its ``settings``, each field over the one before; None when nothing is set."""
    settings = request.settings
    if request.max_tokens is not None and (settings is None or settings.max_tokens is None):
        shorthand = ModelSettings(max_tokens=request.max_tokens)
        settings = shorthand if settings is None else replace(settings, max_tokens=request.max_tokens)
    if own is None:
        return settings
    return own.merged(settings)


@runtime_checkable
class Model(Protocol):
    """Anything that turns a request into one ``ModelReply``.

    Adapters translate; they do not judge. A reply with an odd shape is
    returned as is for the run state machine to refuse; only what cannot be
    read as a reply at all raises a ``ModelError``.
    """

    name: str

    async def complete(self, request: ModelRequest) -> ModelReply:
        """One reply to ``request``, within ``request.timeout``; a ``ModelError`` when none can be had."""

    async def aclose(self) -> None:
        """Close what the model holds open (connections, loaded weights)."""


def output_mode(mode: str, supported: Sequence[OutputMode], adapter: str) -> OutputMode:
    """``mode`` if ``adapter`` can ask for a structured answer that way, else a ``ConfigurationError``.

    An adapter's ``output_mode`` is how a run with an ``output_type`` asks for its answer unless the
    ``Agent`` says otherwise (``native``: ``response_format``; ``tool``: a final-answer tool;
    ``prompted``: the schema in a system message); its ``output_modes`` are the ones it can send.
    The CLI sets ``output_mode`` from the provider profile; ``Agent(output_mode=...)`` is checked
    against ``output_modes`` here too.
    """
    if mode not in ("native", "tool", "prompted"):
        raise ConfigurationError(f"output_mode must be one of native, tool, prompted, not {mode!r}")
    if mode not in supported:
        offered = " or ".join(repr(m) for m in supported)
        why = " (it sends no response_format)" if mode == "native" else ""
        raise ConfigurationError(
            f"{adapter} cannot ask for a structured answer with output_mode={mode!r}{why}: "
            f"pass output_mode={offered}, or leave output_mode out for the model's own"
        )
    return mode  # type: ignore[return-value]
