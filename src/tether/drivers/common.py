"""What both drivers share beyond the core (``tether.core``): helpers for reporting a run, no I/O.

The Temporal workflow imports this module inside its deterministic sandbox
(passed through), so it imports only ``tether.core`` and the standard
library, and does nothing when imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.core import envelope, nesting
from tether.core.deferred import deferred
from tether.core.envelope import ErrorCode
from tether.core.errors import ConfigurationError

if TYPE_CHECKING:
    from tether.core import messages as conversing
    from tether.core.messages import Message
    from tether.tools.context import Principal
    from tether.tools.tool import Tool
else:
    conversing = deferred("tether.core.messages")  # as the machine is: loaded once a run starts


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
    messages = [conversing.Message("user", prompt)] if isinstance(prompt, str) else list(prompt)
    for message in messages:  # on every run's way in: ASCII answered here, without a call to utf8
        text = message.content
        if isinstance(text, str) and not text.isascii() and not nesting.utf8(text):
            raise ConfigurationError("the prompt holds a lone surrogate (from bytes that were not UTF-8): not text")
    return messages


async def principal_now(
    resolve: Callable[[Principal], Awaitable[Principal | None] | Principal | None] | None,
    principal: Principal,
    tool: Tool | None,
) -> Principal | None:
    """The principal a call of ``tool`` runs for, as the application knows it now (``resolve_principal``, plain or
    async, asked with the run's ``principal``); None when it is gone or may no longer call ``tool``.

    Asked before each call runs, by both drivers: roles change while a call waits (for approval, say), and a
    call runs for the principal as it is then. Without a resolver, the run's principal as it is.
    """
    if resolve is None:
        return principal
    found = resolve(principal)
    if inspect.isawaitable(found):
        found = await found
    if found is None or tool is None or not found.allows(tool.scopes):
        return None
    return found


def no_longer_allowed(tool: str) -> str:
    """The result of a call that ``principal_now`` refused: it did not run."""
    return envelope.error(ErrorCode.FORBIDDEN, f"this principal may no longer call {tool}")
