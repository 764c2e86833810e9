"""What both drivers share beyond the core (``tether.core``): helpers for reporting a run, no I/O.

The Temporal workflow imports this module inside its deterministic sandbox
(passed through), so it imports only ``tether.core`` and the standard
library, and does nothing when imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.core import nesting
from tether.core.errors import ConfigurationError

if TYPE_CHECKING:
    from tether.core.messages import Message


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` decoded, when it is a JSON object no deeper than the gate accepts; else None.

    The model wrote it: text the gate refused (a stored run's too) must not crash the report of the refusal.
    """
    try:
        value = nesting.loads(text, nesting.MAX_DEPTH)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def prompt_messages(prompt: str | Sequence[Message]) -> list[Message]:
    """A run's prompt as messages (text is the user's one message); ``ConfigurationError`` when one holds a lone
    surrogate (from bytes that were not UTF-8), which no store, hash or provider can write."""
    from tether.core.messages import Message  # as the machine is: once a run starts

    messages = [Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    for message in messages:  # on every run's way in: ASCII answered here, without a call to utf8
        text = message.content
        if isinstance(text, str) and not text.isascii() and not nesting.utf8(text):
            raise ConfigurationError("the prompt holds a lone surrogate (from bytes that were not UTF-8): not text")
    return messages
