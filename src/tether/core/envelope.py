"""The result envelope the model sees for every call (DESIGN.md §4)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from tether.core.nesting import utf8


class ErrorCode(StrEnum):
    """The error codes of the result envelope: why a call was not run, or how it failed (DESIGN.md §4)."""

    INVALID_JSON = "invalid_json"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    FORBIDDEN = "forbidden"
    DENIED = "denied"
    TIMEOUT = "timeout"
    TOOL_FAILED = "tool_failed"
    CALL_ID_REUSED = "call_id_reused"
    REPEATED_CALL = "repeated_call"
    BUDGET_EXHAUSTED = "budget_exhausted"


# The model may fix these by changing its call; the others need something else.
RETRYABLE = frozenset({ErrorCode.INVALID_JSON, ErrorCode.UNKNOWN_TOOL, ErrorCode.INVALID_ARGUMENTS, ErrorCode.TIMEOUT})


_JSON = json.JSONEncoder(ensure_ascii=False).encode  # made once: json.dumps with options makes one per call


def text(written: str) -> str:
    """``written`` with each lone UTF-16 surrogate made U+FFFD: what a tool says (a file name read with
    ``surrogateescape``, an exception's message) becomes text that can be stored, hashed and printed."""
    if utf8(written):
        return written
    return written.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


QUOTED_CHARS = 100  # of a model's text (a tool name, a call id, a key) that an error message quotes


def shown(written: str, limit: int = QUOTED_CHARS) -> str:
    """``written`` as an error message shows it: its first ``limit`` characters, ``…`` when there were more.

    A model's text can be of any length; an error that quotes it is read back by the model, stored and printed.
    """
    return written if len(written) <= limit else f"{written[:limit]}…"


def quoted(written: object, limit: int = QUOTED_CHARS) -> str:
    """``repr(written)`` cut as ``shown`` cuts text: the first ``limit`` characters of the text, ``…`` after the
    quotes when there were more (of anything else, of its ``repr``)."""
    if not isinstance(written, str):
        return shown(repr(written), limit)
    return repr(written) if len(written) <= limit else f"{written[:limit]!r}…"


def _TEXT(value: Any) -> str:
    return text(_JSON(value))


def ok(result: Any) -> str:
    return _TEXT({"ok": True, "result": result})


DEFAULT_MAX_RESULT_CHARS = 20_000  # of a result's JSON text the model reads, unless its tool says otherwise


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with a marker giving the original size."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated: showing {limit} of {len(text)} characters]"


def ok_within(result: Any, limit: int, written: str | None = None) -> str:
    """The ``ok`` envelope of ``result``, whose JSON text is ``written`` (made here if not given), cut to ``limit``
    characters: text is cut as text, anything else as its JSON text (``truncate``)."""
    written = _TEXT(result) if written is None else text(written)
    if len(written) <= limit:
        return f'{{"ok": true, "result": {written}}}'  # what ok(result) writes, without writing it again
    return ok(truncate(result if isinstance(result, str) else written, limit))


def error(code: ErrorCode, message: str, retryable: bool | None = None) -> str:
    if retryable is None:
        retryable = code in RETRYABLE
    return _TEXT({"ok": False, "error": {"code": code.value, "message": message, "retryable": retryable}})


def outcome_code(content: str) -> str:
    """``"ok"`` or the error code of an envelope, for reports and events."""
    if content.startswith('{"ok": true'):  # our own json.dumps: key order and spacing are fixed
        return "ok"
    data = json.loads(content)
    return "ok" if data.get("ok") else str(data["error"]["code"])
