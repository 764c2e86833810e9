"""What a client writes to ``tether mcp serve``: its lines, each bounded and checked before the SDK reads it.

The SDK's ``stdio_server`` reads stdin a line at a time, however long the
line grows, and drops a line it cannot read without a word (its server
only logs it, at debug level): a client that sent a request on such a line
waits forever. It reads JSON as ``json`` does, keeping the last of
duplicate keys, so ``{"amount": 1, "amount": 1000}`` runs with 1000 where
the client's user may have reviewed 1. So each line is read here first:

- past ``limit`` bytes it is not read on, and the lines end (the connection
  with them) with ``MessageTooLarge``;
- a blank line is no message, and is skipped;
- otherwise it must be one JSON-RPC 2.0 message, read as strictly as a
  model's tool call (``tether.tools.decoding``): UTF-8, valid JSON holding
  at most ``MAX_MESSAGE_CONTAINERS`` arrays and objects (counted before it is
  decoded) nested at most ``MAX_MESSAGE_DEPTH`` levels, no
  ``NaN``/``Infinity`` nor a number past
  a float's range (``1e400``), no key twice
  in one object at any depth, no lone UTF-16 surrogate, and the shape of a
  request, a notification or a response.

A line that fails is not passed on. It is answered as JSON-RPC 2.0 says, on
the SDK's own write stream (whole lines, one writer): ``-32700`` Parse error
when it could not be read, ``-32602`` Invalid params for a key twice inside
``params``, ``-32600`` Invalid Request for anything else; with the request's
id when it can be read unambiguously, else ``null``. The message names what
is wrong and quotes at most ``QUOTED_CHARS`` characters of the line. A
notification or a response is never answered: it is dropped, and a warning
on the ``tether.mcp`` logger (stderr, unless logging is set up) says why,
without the line. A response that names its request's id unambiguously is
replaced by an error response to that request, so that the question it
answers (an approval asked of the user) ends at once, unanswered: a refused
answer is no approval (``unread`` says what takes its place). Either way
the next line is read as usual.

``check_line`` reads each POST's body to ``tether serve --mcp`` the same
way (``tether.serve.mcp_http``), which answers a refused one over HTTP and
ends the question a refused response answers with ``unread`` too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
import mcp.types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.core.envelope import QUOTED_CHARS, quoted, shown
from tether.core.nesting import MAX_REPLY_DEPTH, NotText, check_text, containers_past, value_nested_deeper
from tether.mcp.client import MAX_RESPONSE_BYTES, MAX_RESPONSE_CONTAINERS
from tether.mcp.stdio import MessageTooLarge
from tether.tools.decoding import DuplicateKey, InvalidJson, finite, json_type, no_constants, no_duplicates

logger = logging.getLogger("tether.mcp")

# A line a client writes (one message): the bound a server's line has on the client side.
MAX_MESSAGE_BYTES = MAX_RESPONSE_BYTES
# How deep a message may nest: room for the envelope around a call's arguments, which a call's check refuses past
# ``MAX_DEPTH`` with a tool error the client's model can read.
MAX_MESSAGE_DEPTH = MAX_REPLY_DEPTH
# The JSON arrays and objects a line may hold, counted before it is decoded: the bound a server's message has on the
# client side. Bytes bound the text, not what it takes decoded: 16 MiB of ``[],`` is 5.6 million lists to build,
# twice (here, then the SDK's).
MAX_MESSAGE_CONTAINERS = MAX_RESPONSE_CONTAINERS

_TOO_DEEP = f"Parse error: the message is nested more than {MAX_MESSAGE_DEPTH} levels deep"
_TOO_MANY = f"Parse error: the message holds more than {MAX_MESSAGE_CONTAINERS} JSON arrays and objects"

# Built once: ``json.loads`` with hooks builds a new decoder on every call.
_STRICT = json.JSONDecoder(object_pairs_hook=no_duplicates, parse_constant=no_constants, parse_float=finite)
# Every key kept (an object is a tuple of pairs): read only when a key came twice, to say where and whose it was.
_PAIRS = json.JSONDecoder(object_pairs_hook=tuple, parse_constant=no_constants, parse_float=finite)


@dataclass(frozen=True, slots=True)
class Refused:
    """A line that is not passed on: the JSON-RPC error ``code`` and ``message``; ``ident`` is the request's id
    (None when it cannot be read), and ``answered`` is False for a notification or a response."""

    code: int
    message: str
    ident: types.RequestId | None = None
    answered: bool = True
    kind: str = "message"

    def answer(self) -> SessionMessage:
        error = types.ErrorData(code=self.code, message=self.message)
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=self.ident, error=error))


class ClientLines:
    """The client's lines, as text for the SDK's ``stdio_server``: each one checked (see the module). At a line
    past ``limit`` bytes they end, and ``refused`` says why; a refused line is answered on the stream given to
    ``answer_on``."""

    def __init__(self, buffer: BinaryIO, limit: int) -> None:
        self.buffer, self.limit = buffer, limit
        self.refused: MessageTooLarge | None = None
        self._answers: Any = None
        self._ready = anyio.Event()

    def answer_on(self, write: Any) -> None:
        """Answer refused lines on ``write``, the SDK's write stream (it exists only once the lines are read)."""
        self._answers = write
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while line := await anyio.to_thread.run_sync(self.buffer.readline, self.limit + 1):
            if len(line) > self.limit and not line.endswith(b"\n"):
                self.refused = MessageTooLarge(f"the client's message is larger than {self.limit} bytes; not read")
                return
            if not line.strip():
                continue
            checked = check_line(line)
            if isinstance(checked, str):
                yield checked
            elif not checked.answered:
                logger.warning("tether mcp serve dropped a %s: %s", checked.kind, checked.message)
                if (instead := unread(checked)) is not None:
                    yield instead  # the question it answers ends now, unanswered, not when its time is up
            elif not await self._answer(checked):
                return

    async def _answer(self, refused: Refused) -> bool:
        """Send the answer; False once the SDK's writer is gone (the session ended)."""
        await self._ready.wait()
        try:
            await self._answers.send(refused.answer())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True


def check_line(line: bytes) -> str | Refused:
    """``line`` as text, if it holds one message the SDK may read; else why not (see the module)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Refused(types.PARSE_ERROR, f"Parse error: the message is not UTF-8 (at byte {exc.start})")
    if containers_past(text, MAX_MESSAGE_CONTAINERS):  # before anything is built of it
        return Refused(types.PARSE_ERROR, _TOO_MANY)
    try:
        value = _STRICT.decode(text)
    except DuplicateKey:
        return _duplicate(text)
    except InvalidJson as exc:
        return Refused(types.PARSE_ERROR, f"Parse error: {exc}")
    except (ValueError, RecursionError) as exc:
        return _unreadable(text, exc)
    # The depth is measured on the value, not on the text first (``nested_deeper``): the C decoder stops at Python's
    # recursion limit on its own (the RecursionError above), and walking what it built costs a third of scanning
    # the text. Text with no more brackets than the bound is answered by two counts.
    if text.count("[") + text.count("{") > MAX_MESSAGE_DEPTH and value_nested_deeper(value, MAX_MESSAGE_DEPTH):
        return Refused(types.PARSE_ERROR, _TOO_DEEP)
    try:
        check_text(text, value)
    except NotText:
        return _refused(value, "it holds a lone UTF-16 surrogate, which is not text")
    try:
        message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return _refused(value, _not_a_message(value))
    if isinstance(message, types.JSONRPCNotification) and "id" in value:  # the SDK would drop its id, and it
        return _refused(value, _not_a_message(value))  # waits for an answer
    return text


def _unreadable(text: str, exc: ValueError | RecursionError) -> Refused:
    """-32700 for text ``json`` could not read, saying where (and quoting from there, bounded)."""
    if isinstance(exc, json.JSONDecodeError):
        near = text[exc.pos : exc.pos + QUOTED_CHARS + 1].rstrip("\r\n")
        where = f"character {exc.pos}, near {quoted(near)}" if near.strip() else "its end"
        return Refused(types.PARSE_ERROR, f"Parse error: the message is not JSON: {exc.msg} at {where}")
    if isinstance(exc, RecursionError):  # the decoder reached Python's recursion limit, and stopped
        return Refused(types.PARSE_ERROR, _TOO_DEEP)
    return Refused(types.PARSE_ERROR, "Parse error: the message holds a number too large to read")


def _refused(value: Any, why: str) -> Refused:
    """-32600 for a message ``value`` that the SDK may not read, answered unless it is a notification or a
    response."""
    pairs = tuple(value.items()) if isinstance(value, dict) else None
    return _refusal(pairs, types.INVALID_REQUEST, f"Invalid Request: {why}")


def _duplicate(text: str) -> Refused:
    """A message with a key twice in one object: -32600 at the top, -32602 inside ``params``, naming the key."""
    try:
        value = _PAIRS.decode(text)
    except (ValueError, RecursionError) as exc:  # the rest of the line is no JSON either: that comes first
        return _unreadable(text, exc)
    path, key = _first_duplicate(value)
    where = f" in {shown(_spelled(path))}" if path else ""
    pairs = value if isinstance(value, tuple) else None
    if path and path[0] == "params":
        return _refusal(pairs, types.INVALID_PARAMS, f"Invalid params: duplicate key {quoted(key)}{where}")
    return _refusal(pairs, types.INVALID_REQUEST, f"Invalid Request: duplicate key {quoted(key)}{where}")


def _first_duplicate(value: Any) -> tuple[list[str], str]:
    """Where the first key that comes twice is (the keys and indexes down to its object), and the key; ``value``
    holds each object as a tuple of pairs, arrays as lists. Depth-first, an object's own keys before its values."""
    stack: list[tuple[Any, list[str]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        children: list[tuple[str, Any]]
        if isinstance(item, tuple):
            seen: set[str] = set()
            for key, _ in item:
                if key in seen:
                    return path, key
                seen.add(key)
            children = [(key if key.isidentifier() else quoted(key), child) for key, child in item]
        elif isinstance(item, list):
            children = [(f"[{index}]", child) for index, child in enumerate(item)]
        else:
            continue
        stack.extend((child, [*path, step]) for step, child in reversed(children) if isinstance(child, tuple | list))
    raise AssertionError("no key came twice")  # only called for text the strict decoder refused for one


def _spelled(path: list[str]) -> str:
    """``params.arguments.items[1]``: keys after dots, indexes in brackets."""
    return "".join(step if step.startswith("[") else f".{step}" for step in path).lstrip(".")


def _refusal(pairs: tuple[tuple[str, Any], ...] | None, code: int, message: str) -> Refused:
    """The refusal of a message whose top-level object is ``pairs`` (None when it is no object): a notification
    (a method and no id) and a response (a result or an error, no method) are not answered; a request is, with its
    id when the message holds exactly one that is a string or an integer."""
    keys = [key for key, _ in pairs or ()]
    methods = [v for k, v in pairs or () if k == "method"]
    if "id" not in keys and len(methods) == 1 and isinstance(methods[0], str):
        return Refused(code, message, answered=False, kind="notification")
    ids = [v for k, v in pairs or () if k == "id"]
    ident = ids[0] if len(ids) == 1 and isinstance(ids[0], int | str) and not isinstance(ids[0], bool) else None
    if not methods and ("result" in keys or "error" in keys):
        return Refused(code, message, ident=ident, answered=False, kind="response")
    return Refused(code, message, ident=ident)


def unread(refused: Refused) -> str | None:
    """In place of a client's response that is not passed on and names its request's id (``refused.ident``; a
    question this server asked, or none the SDK knows, which drops it): an error response to that question, so
    that it ends at once, unanswered. None for any other refused message, which nothing takes the place of."""
    if refused.kind != "response" or refused.ident is None:
        return None
    error = {"code": refused.code, "message": f"the client's answer was not read: {refused.message}"}
    return json.dumps({"jsonrpc": "2.0", "id": refused.ident, "error": error})


def _not_a_message(value: Any) -> str:
    """Why a decoded ``value`` is no JSON-RPC 2.0 message, as precisely as its shape says."""
    if isinstance(value, list):
        return "a message is one JSON object, not an array (a batch is not accepted)"
    if not isinstance(value, dict):
        return f"a message is one JSON object, not {json_type(value)}"
    if value.get("jsonrpc") != "2.0":
        return 'its "jsonrpc" must be "2.0"'
    ident = value.get("id")
    if "id" in value and (isinstance(ident, bool) or not isinstance(ident, int | str)) and "error" not in value:
        return f'its "id" must be a string or an integer, not {json_type(ident)}'
    if "method" in value:
        if not isinstance(value["method"], str):
            return f'its "method" must be a string, not {json_type(value["method"])}'
        return f'its "params" must be an object, not {json_type(value.get("params"))}'
    if "result" in value:
        return f'its "result" must be an object, not {json_type(value["result"])}'
    if "error" in value:
        return 'its "error" must be an object with an integer "code" and a string "message"'
    return 'it is no request ("method" and "id"), notification ("method") or response ("result" or "error")'
