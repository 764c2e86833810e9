"""What an application runs around a run's model requests: instructions, history processors, output validators.

Each is a plain function or an async one. Given one parameter more than
its plain form, it gets the run's ``RunContext`` first (run id, principal,
step, deps):

- an instruction, ``() -> str | None`` or ``(ctx) -> str | None`` (or a
  fixed string), is evaluated before each model request; the instructions'
  texts, joined by a blank line, go with that request only, as a system
  message after the transcript's leading system messages. They are never
  stored in the transcript: a resumed run computes them again.
- a history processor, ``(messages) -> messages`` or ``(ctx, messages) ->
  messages``, rewrites the list of messages a request sends (the stored
  transcript does not change). What it returns must be a well-formed
  history (``tether.core.history.check_history``).
- an output validator, ``(output) -> output | None`` or ``(ctx, output) ->
  output | None``, sees a run's final answer (its typed value with an
  ``output_type``, else its text) before the run takes it; it may return a
  replacement, or raise ``tether.Retry("why")`` to refuse it.

An exception other than ``Retry`` is the application's bug: it propagates
out of the run, which stays as it was saved (with a store, resumable).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.core.errors import ConfigurationError
from tether.tools.context import RunContext
from tether.tools.tool import Retry
from tether.tools.toolbox import truncate

if TYPE_CHECKING:
    from tether.core.messages import Message

InstructionFunction = Callable[..., str | Awaitable[str | None] | None]
Instruction = str | InstructionFunction
Instructions = Instruction | Sequence[Instruction]
HistoryProcessor = Callable[..., "list[Message] | Awaitable[list[Message]]"]
OutputValidator = Callable[..., Any]

__all__ = [
    "HistoryProcessor",
    "Hook",
    "Instruction",
    "Instructions",
    "OutputValidator",
    "instructions_of",
    "process_history",
    "render_instructions",
    "request_messages",
    "validate_output",
]


class Hook:
    """An application function, called with the run's context when it takes one (decided once, when it is given)."""

    __slots__ = ("function", "name", "with_context")

    def __init__(self, function: Callable[..., Any], plain: int, what: str) -> None:
        if not callable(function):
            raise ConfigurationError(f"{what} must be a function, not {type(function).__name__}")
        self.function = function
        self.name = getattr(function, "__name__", type(function).__name__)
        self.with_context = _takes_more_than(function, plain)

    async def __call__(self, context: RunContext[Any], *args: Any) -> Any:
        found = self.function(context, *args) if self.with_context else self.function(*args)
        if inspect.isawaitable(found):
            found = await found
        return found


def _takes_more_than(function: Callable[..., Any], plain: int) -> bool:
    """Whether ``function`` takes more positional arguments than ``plain`` (then the context comes first)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: its plain form
        return False
    positional = 0
    for parameter in parameters:
        if parameter.kind is parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional > plain


def instructions_of(value: Instructions | None) -> tuple[str | Hook, ...]:
    """``Agent(instructions=...)`` or ``run(..., instructions=...)`` as the driver keeps it."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) or callable(value) else value
    if not isinstance(items, Sequence):
        raise ConfigurationError(
            f"instructions must be a string, a function of the run's context, or a list of them, "
            f"not {type(value).__name__}"
        )
    kept: list[str | Hook] = []
    for item in items:
        if isinstance(item, str):
            if item:
                kept.append(item)
        elif callable(item):
            kept.append(Hook(item, 0, "an instruction"))
        else:
            raise ConfigurationError(
                f"an instruction must be a string or a function of the run's context, not {type(item).__name__}"
            )
    return tuple(kept)


async def render_instructions(items: Sequence[str | Hook], context: RunContext[Any]) -> str | None:
    """The instructions' texts for one request, joined by a blank line; None when there are none."""
    parts: list[str] = []
    for item in items:
        if isinstance(item, str):
            parts.append(item)
            continue
        text = await item(context)
        if text is None:
            continue
        if not isinstance(text, str):
            raise ConfigurationError(
                f"the instruction function {item.name} returned {type(text).__name__}: return a string, or None"
            )
        if text:
            parts.append(text)
    return "\n\n".join(parts) or None


async def process_history(
    processors: Sequence[Hook], context: RunContext[Any], messages: list[Message]
) -> list[Message]:
    """``messages`` as the history processors leave them, checked to be a history a request can send."""
    # A run needs the history and messages modules, building an agent does not (issue 19: the cost of the import).
    from tether.core.history import check_history

    for processor in processors:
        found = await processor(context, messages)
        if not isinstance(found, list):
            raise ConfigurationError(
                f"the history processor {processor.name} returned {type(found).__name__}: return a list of Message"
            )
        check_history(found, len(found), f"what the history processor {processor.name} returned")
        messages = found
    return messages


async def validate_output(validators: Sequence[Hook], context: RunContext[Any], output: Any) -> tuple[Any, str | None]:
    """The answer as the validators leave it, and why one refused it (``Retry``), if one did."""
    for validator in validators:
        try:
            found = await validator(context, output)
        except Retry as refusal:
            return output, truncate(str(refusal), 300)
        if found is not None:
            output = found
    return output, None


async def request_messages(
    stored: Sequence[Message],
    processors: Sequence[Hook],
    instructions: Sequence[str | Hook],
    context: RunContext[Any],
    untrusted: Mapping[str, str],
) -> tuple[Sequence[Message], frozenset[str]]:
    """What one request sends of the transcript ``stored``, and the untrusted results it leaves out.

    The history processors go first, then the instructions' text is put
    after the leading system messages (so no processor drops it). A result
    left out no longer taints the run; but when a processor wrote a message
    of its own (a summary, say: it may carry an untrusted result's text),
    every untrusted result still counts.
    """
    messages: Sequence[Message] = stored
    hidden: frozenset[str] = frozenset()
    if processors:
        messages = await process_history(processors, context, list(stored))
        if untrusted:
            hidden = _left_out(stored, messages, untrusted)
    text = await render_instructions(instructions, context) if instructions else None
    if text is not None:
        at = next((i for i, m in enumerate(messages) if m.role != "system"), len(messages))
        from tether.core.messages import Message

        messages = [*messages[:at], Message("system", text), *messages[at:]]
    return messages, hidden


def _left_out(stored: Sequence[Message], sent: Sequence[Message], untrusted: Mapping[str, str]) -> frozenset[str]:
    """The untrusted results of ``stored`` not in ``sent``; none when ``sent`` holds a message ``stored`` does not."""
    kept = {id(m) for m in stored}
    if any(id(m) not in kept for m in sent):
        return frozenset()
    shown = {m.tool_call_id for m in sent if m.role == "tool"}
    return frozenset(call_id for call_id in untrusted if call_id not in shown)
