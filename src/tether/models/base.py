"""The one seam between a run and a model: ``Model.complete``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.core.errors import ConfigurationError
from tether.core.messages import Message, ModelReply

if TYPE_CHECKING:
    from tether.tools.output import OutputMode


@dataclass(frozen=True, slots=True)
class ModelRequest:
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


@runtime_checkable
class Model(Protocol):
    """Anything that turns a request into one ``ModelReply``.

    Adapters translate; they do not judge. A reply with an odd shape is
    returned as is for the run state machine to refuse; only what cannot be
    read as a reply at all raises a ``ModelError``.
    """

    name: str

    async def complete(self, request: ModelRequest) -> ModelReply: ...

    async def aclose(self) -> None: ...


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
