"""Message histories: two history processors, and a pydantic adapter to store a history as JSON.

    agent = Agent(model, tools, history_processors=[keep_last_turns(5), fit_tokens(8_000)])
    text = messages_adapter.dump_json(result.all_messages())        # bytes of JSON
    history = messages_adapter.validate_json(text)                  # list[Message], equal to the one dumped

A history processor changes what a request sends, never the stored
transcript. Both here only leave messages out, and never the system
messages at the start, a call without its result or a result without its
call: they cut at a turn (a turn starts at a user message) or, inside the
last turn, at a step (an assistant message and its calls' results). A
result left out no longer taints the run (DESIGN.md §7); a processor that
writes messages of its own leaves every untrusted result counting.

``messages_adapter`` is a ``pydantic.TypeAdapter(list[Message])``, made
(and pydantic imported) on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.core.budget import estimate_tokens
from tether.core.errors import ConfigurationError
from tether.core.messages import Message

if TYPE_CHECKING:
    import pydantic

    messages_adapter: pydantic.TypeAdapter[list[Message]]

__all__ = ["fit_tokens", "keep_last_turns", "messages_adapter"]


def _split(messages: Sequence[Message]) -> tuple[int, list[int]]:
    """How many system messages lead, and where each turn (a user message) starts after them."""
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    return head, [i for i in range(head, len(messages)) if messages[i].role == "user"]


def keep_last_turns(turns: int) -> Callable[[list[Message]], list[Message]]:
    """A history processor: the leading system messages and the last ``turns`` turns, each whole."""
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        raise ConfigurationError(f"keep_last_turns needs a number of turns of 1 or more, not {turns!r}")

    def keep_last(messages: list[Message]) -> list[Message]:
        head, starts = _split(messages)
        if len(starts) <= turns:
            return messages
        return [*messages[:head], *messages[starts[-turns] :]]

    keep_last.__name__ = f"keep_last_turns({turns})"
    return keep_last


def fit_tokens(limit: int) -> Callable[[list[Message]], list[Message]]:
    """A history processor: as many of the latest messages as fit ``limit`` tokens (estimated locally).

    The count is ``tether.core.budget``'s local estimate (UTF-8 bytes / 3,
    plus 4 a message; tool schemas are not counted). Whole turns go first,
    the oldest first; if the last turn alone is too long, its oldest steps
    go, never its user message or its last step. The leading system
    messages always stay: a history that cannot be made to fit is sent as
    short as it gets.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigurationError(f"fit_tokens needs a token limit of 1 or more, not {limit!r}")

    def fit(messages: list[Message]) -> list[Message]:
        sizes = [estimate_tokens((m,)) for m in messages]
        if sum(sizes) <= limit:
            return messages
        head, starts = _split(messages)
        left = limit - sum(sizes[:head])
        after = [0] * (len(messages) + 1)  # after[i]: the tokens of messages[i:]
        for i in range(len(messages) - 1, -1, -1):
            after[i] = after[i + 1] + sizes[i]
        for start in starts:
            if after[start] <= left:
                return [*messages[:head], *messages[start:]]
        # The last turn alone is too long: keep its prompt and its latest steps (at least the last).
        first = starts[-1] if starts else head
        steps = [i for i in range(first, len(messages)) if messages[i].role == "assistant"]
        prompt = [messages[first]] if starts else []
        spent = sizes[first] if starts else 0
        kept = next((s for s in steps if spent + after[s] <= left), steps[-1] if steps else len(messages))
        return [*messages[:head], *prompt, *messages[kept:]]

    fit.__name__ = f"fit_tokens({limit})"
    return fit


def __getattr__(name: str) -> Any:
    """``messages_adapter``, made on first use: pydantic is imported only by the programs that use it."""
    if name == "messages_adapter":
        import pydantic

        adapter = pydantic.TypeAdapter(list[Message])
        globals()[name] = adapter
        return adapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
