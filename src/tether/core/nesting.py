"""How deep JSON text from outside may nest, measured before it is decoded.

Python's ``json``, ``jsonschema``, pydantic and tether's own walks
(redaction, canonical text, events) all recurse once per level: text nested
a few thousand levels deep raises ``RecursionError`` wherever it is first
decoded or walked. So tether measures the depth of text from outside (a
call's arguments, a model's reply, a tool's result) before decoding it, with
a regular expression and a running sum rather than recursion, and refuses
text nested deeper than its limit. Everything past that point only ever
holds values at most that deep.

The measure is exact for valid JSON. For invalid JSON it is at least the
depth the decoder reaches before it fails (both read strings the same way up
to the first error), so a text that passes never makes the decoder recurse
past the limit.

The same reading counts arrays and objects (``containers_past``): each one
costs far more memory decoded than its two bytes of text (a content block of
an MCP result, parsed into the SDK's objects, about 2 KB), so text bounded in
bytes is bounded in memory only when its containers are bounded too.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

# A call's arguments and a tool's result: far deeper than real ones (BFCL's deepest ground-truth arguments: 4).
MAX_DEPTH = 64
# A model's reply body or stream event: room for the envelope around a call's input (an Anthropic
# tool_use block holds it as an object), so a too-deep input is the model's invalid_json to repair.
MAX_REPLY_DEPTH = 2 * MAX_DEPTH

# A run of brackets (group 1), or a run of anything else: strings (each to its closing quote, or to the end of a
# text where it never closes), escapes outside a string (invalid, but one must not open a string) and the rest.
# A run, not each string, is one match: text of many short strings costs one step in Python, not one per string.
# Possessive, and each part starts with its own character: a failed match never backtracks.
_TOKEN = re.compile(r'(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"?|\\.|[^"\\\[\]{}]++)++|([\[\]{}]++)', re.DOTALL)
# The same over UTF-8 bytes, and as exact: no byte of a character written in several is a quote, a backslash or
# a bracket.
_BYTES_TOKEN = re.compile(_TOKEN.pattern.encode(), re.DOTALL)
# What ``containers_past`` reads text with, and the brackets that open a container in it, by the text's type.
_READINGS: dict[type, tuple[re.Pattern[Any], Any, Any]] = {str: (_TOKEN, "[", "{"), bytes: (_BYTES_TOKEN, b"[", b"{")}
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__


# A UTF-16 surrogate's escape: one half of a pair, or alone (which no store, hash or terminal takes as text).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotText(ValueError):
    """JSON text that decodes to a string holding a lone UTF-16 surrogate: no text, and nothing can store it."""

    def __init__(self) -> None:
        super().__init__("not text: it holds a lone UTF-16 surrogate")


def utf8(text: str) -> bool:
    """Whether UTF-8 can write ``text``: it holds no lone surrogate (ASCII is answered without encoding)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(text: str, value: Any) -> None:
    """``NotText`` if ``value`` (decoded from ``text``) holds a lone surrogate.

    Only text with a surrogate's escape, or with a surrogate itself (bytes
    that were not UTF-8), can decode to one: other text is answered by a
    substring search and ``utf8`` before anything is walked.
    """
    escaped = "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None
    if not escaped and utf8(text):
        return
    if not utf8(json.dumps(value, ensure_ascii=False)):
        raise NotText()


class NestedTooDeep(ValueError):
    """JSON text nests arrays and objects deeper than its limit; ``str()`` names the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested more than {limit} levels deep")
        self.limit = limit


def text_of(data: str | bytes | bytearray) -> str:
    """``data`` as text, decoded as ``json.loads`` decodes bytes (UTF-8, -16 or -32)."""
    if isinstance(data, str):
        return data
    if data[:1] in (b"{", b"[") and data[1:2] != b"\x00":  # what detect_encoding says of such a start: UTF-8
        return bytes(data).decode("utf-8", "surrogatepass")
    return bytes(data).decode(json.detect_encoding(data), "surrogatepass")


def nested_deeper(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` levels deep.

    Text with no more brackets than ``limit`` cannot be; that is the common
    case, answered by two ``str.count``. Otherwise the brackets outside
    strings are summed run by run, stopping at the first level past the
    limit: linear in the text (also for a string that never ends), and no
    copy of it is made.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for token in _TOKEN.finditer(text):
        brackets = token.group(1)
        if brackets is None:
            continue  # a string or an escape: brackets in it are text
        if max(accumulate(map(_STEP, brackets), initial=depth)) > limit:
            return True
        depth += len(brackets) - 2 * (brackets.count("]") + brackets.count("}"))
    return False


def containers_past(text: str | bytes, limit: int) -> bool:
    """Whether JSON ``text`` (or its UTF-8 bytes) holds more than ``limit`` arrays and objects.

    Text with no more brackets that open one than ``limit`` cannot; that is
    the common case, answered by two counts. Otherwise the brackets outside
    strings are counted run by run, stopping once past the limit or once
    more close than opened (invalid from there: the decoder stops before
    it). So Python steps at most about ``4 * limit`` times, whatever the
    text. Exact for valid JSON; for invalid JSON at least what the decoder
    makes before it fails.
    """
    tokens, array, obj = _READINGS[type(text)]
    if text.count(array) + text.count(obj) <= limit:
        return False
    held = depth = 0
    for token in tokens.finditer(text):
        brackets = token.group(1)
        if brackets is None:
            continue  # strings and the rest: brackets in a string are text
        opened = brackets.count(array) + brackets.count(obj)
        held += opened
        depth += 2 * opened - len(brackets)
        if held > limit:
            return True
        if depth < 0:
            return False
    return False


def value_nested_deeper(value: Any, limit: int) -> bool:
    """Whether a decoded value nests lists and dicts more than ``limit`` levels deep (walked without recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list | tuple) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


def loads(data: str | bytes | bytearray, limit: int, **options: Any) -> Any:
    """``json.loads(data, **options)``, or ``NestedTooDeep`` (a ``ValueError``) past ``limit`` levels, or
    ``NotText`` (one too) for a string holding a lone surrogate."""
    text = text_of(data)
    if nested_deeper(text, limit):
        raise NestedTooDeep(limit)
    value = json.loads(text, **options)
    check_text(text, value)
    return value


# What ``loads`` refuses beyond invalid JSON; each ``str()`` reads after "the body is".
REFUSED = (NestedTooDeep, NotText)
