"""A message history given to a run from outside: its checks, and the list a run's result hands back.

``agent.run(prompt, message_history=...)`` takes earlier messages (a
``result.all_messages()``, or a list read back with ``tether.messages_adapter``).
Before any request is sent, ``check_history`` refuses a history the wire
could not carry or the host could not have written, naming the first bad
message (``ConfigurationError``):

- each item is a ``Message`` with a known role; user and system messages
  carry text; only an assistant message carries tool calls, each with a
  non-empty id (unique within the message), a name and its arguments as a
  string; only a tool message carries a ``tool_call_id``, and it must;
- system messages come first, before any other;
- every call of an assistant message is answered by exactly one tool
  message, right after it (before any other message, and before the
  history ends); a tool message answers a call of the assistant message just
  before it, once;
- an assistant message that made no call is followed by a user message, not
  by another assistant message or a tool result.

Who wrote a history's tool results cannot be checked: ``MessageHistory``
(what ``RunResult.all_messages()`` returns) carries the results its run
marked untrusted; a history without such marks is taken as untrusted
throughout (see ``untrusted_results``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tether.core.errors import ConfigurationError
from tether.core.messages import Message, ToolCall

ROLES = frozenset({"system", "user", "assistant", "tool"})


class MessageHistory(list[Message]):
    """A run's messages, and which of its tool results someone other than the principal wrote.

    A plain list for every purpose (it compares equal to one, and serializes
    as one); ``untrusted`` maps the call id of each such result to its tool,
    so that passing it back as ``message_history`` keeps those results
    tainting (DESIGN.md §7).
    """

    def __init__(self, messages: Iterable[Message] = (), untrusted: Mapping[str, str] | None = None) -> None:
        super().__init__(messages)
        shown = {m.tool_call_id for m in self if m.role == "tool"}
        self.untrusted: dict[str, str] = {k: v for k, v in (untrusted or {}).items() if k in shown}


def untrusted_results(history: Sequence[Message]) -> dict[str, str]:
    """Call id -> tool for the results of ``history`` that taint a run given it.

    A ``MessageHistory`` says which; for any other history the host cannot
    tell who wrote its tool results, so each of them counts.
    """
    if isinstance(history, MessageHistory):
        return dict(history.untrusted)
    made = {c.id: c.name for m in history if m.role == "assistant" for c in m.tool_calls}
    return {m.tool_call_id: made.get(m.tool_call_id, "a tool") for m in history if m.role == "tool" and m.tool_call_id}


def given_history(history: Any, prompt: Sequence[Message]) -> list[Message]:
    """``message_history`` as a list, once it and the ``prompt`` messages after it are found well formed."""
    if isinstance(history, str | bytes) or not isinstance(history, Sequence):
        raise ConfigurationError(
            f"message_history must be a list of Message (e.g. result.all_messages()), not {type(history).__name__}"
        )
    listed = list(history)
    check_history([*listed, *prompt], len(listed))
    return listed


def check_history(messages: Sequence[Any], given: int, name: str = "message_history") -> None:
    """Refuse ``messages`` (a history of ``given`` messages, then the new prompt's) unless well formed.

    Raises ``ConfigurationError`` naming the first bad message, as
    ``message_history[i]`` (``name[i]``) or, past the history, ``the prompt's message i``.
    """

    def where(index: int) -> str:
        return f"{name}[{index}]" if index < given else f"the prompt's message {index - given}"

    outstanding: dict[str, str] = {}  # call id -> tool, calls of the last assistant message not answered yet
    answered: set[str] = set()
    asked = -1  # the index of the last assistant message
    previous: Message | None = None
    for index, message in enumerate(messages):
        problem = _malformed(message)
        if problem is None and outstanding and message.role != "tool":
            raise ConfigurationError(_unanswered(where(asked), outstanding, f"before {where(index)}"))
        if problem is None:
            problem = _out_of_place(message, previous, outstanding, answered)
        if problem is not None:
            raise ConfigurationError(f"{where(index)} {problem}")
        if message.role == "assistant":
            outstanding = {c.id: c.name for c in message.tool_calls}
            answered, asked = set(), index
        elif message.role == "tool":
            answered.add(message.tool_call_id or "")
            outstanding.pop(message.tool_call_id or "", None)
        previous = message
    if outstanding:
        raise ConfigurationError(_unanswered(where(asked), outstanding, "before the history ends"))


def _unanswered(where: str, outstanding: dict[str, str], until: str) -> str:
    call_id = next(iter(outstanding))
    return (
        f"{where} (assistant) calls {outstanding[call_id]} (id {call_id!r}), and no tool message answers it {until}: "
        "every call is answered right after the assistant message that made it"
    )


def _malformed(message: Any) -> str | None:
    """What is wrong with one message on its own, if anything."""
    if not isinstance(message, Message):
        return (
            f"is a {type(message).__name__}, not a Message: build Message(...) values, or read JSON back with "
            "tether.messages_adapter.validate_json(...)"
        )
    role = message.role
    if role not in ROLES:
        return f"has the role {role!r}; it must be one of system, user, assistant, tool"
    if message.content is not None and not isinstance(message.content, str):
        return f"({role}) has content of type {type(message.content).__name__}; it must be a string"
    if role in ("system", "user", "tool") and message.content is None:
        return f"({role}) has no content"
    if message.tool_calls and role != "assistant":
        return f"({role}) carries tool calls; only an assistant message may"
    if role == "tool":
        if not isinstance(message.tool_call_id, str) or not message.tool_call_id:
            return "(tool) has no tool_call_id: a tool message answers one call"
    elif message.tool_call_id is not None:
        return f"({role}) has a tool_call_id; only a tool message has one"
    if not isinstance(message.tool_calls, tuple | list):
        return f"({role}) has tool_calls of type {type(message.tool_calls).__name__}; they must be a tuple of ToolCall"
    seen: set[str] = set()
    for call in message.tool_calls:
        if not isinstance(call, ToolCall):
            return f"(assistant) has a tool call of type {type(call).__name__}, not a ToolCall"
        if not isinstance(call.id, str) or not call.id:
            return "(assistant) has a tool call without an id"
        if call.id in seen:
            return f"(assistant) has two tool calls with the id {call.id!r}"
        seen.add(call.id)
        if not isinstance(call.name, str) or not call.name:
            return f"(assistant) has a tool call ({call.id!r}) without a name"
        if not isinstance(call.arguments, str):
            return f"(assistant) has a tool call ({call.id!r}) whose arguments are not a JSON string"
    return None


def _out_of_place(
    message: Message, previous: Message | None, outstanding: dict[str, str], answered: set[str]
) -> str | None:
    """What is wrong with ``message`` where it stands, if anything."""
    role = message.role
    if role == "system":
        if previous is not None and previous.role != "system":
            return "(system) comes after other messages; system messages come first"
        return None
    if role == "tool":
        call_id = message.tool_call_id or ""
        if call_id in outstanding:
            return None
        if call_id in answered:
            return f"(tool) answers the call {call_id!r} a second time"
        return f"(tool) answers the call {call_id!r}, which the assistant message before it did not make"
    if role == "assistant" and previous is not None and previous.role == "assistant" and not previous.tool_calls:
        return "(assistant) follows an assistant answer with no user message between"
    return None
