"""Strict decoding of the JSON text a model wrote as tool-call arguments.

Python's ``json`` is lenient where a host must not be: it keeps the last of
duplicate keys and accepts ``NaN`` and ``Infinity``. Here each is an error,
and so is anything but an object at the top level, and so is nesting deeper
than ``MAX_DEPTH`` levels (measured before decoding, see ``tether.core.nesting``):
every check and record after this one walks the arguments recursively.
"""

from __future__ import annotations

import json
import math
from json.scanner import make_scanner
from typing import Any

from tether.core.envelope import quoted
from tether.core.nesting import MAX_DEPTH, NotText, check_text, nested_deeper, text_of


class InvalidJson(ValueError):
    """The arguments are not one strict JSON object; ``str()`` says why."""


class DuplicateKey(InvalidJson):
    """A key came twice in one object: which of its values counts is anybody's guess."""


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for a strict decode: a key that comes twice in one object is refused, not last-wins."""
    result = dict(pairs)  # built in C; a shorter dict means a key came twice
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"duplicate key {quoted(key)}")
            seen.add(key)
    return result


def no_constants(name: str) -> Any:
    """``parse_constant`` for a strict decode: NaN and Infinity are no JSON."""
    raise InvalidJson(f"{name} is not valid JSON")


def finite(text: str) -> float:
    """``parse_float`` for a strict decode: a number out of a float's range (``1e400``) is refused, not infinity."""
    value = float(text)
    if math.isinf(value):  # 1e400 parses to inf without passing through parse_constant
        raise InvalidJson(f"number {text[:20]} is out of range")
    return value


# Built once: ``json.loads`` with hooks builds a new decoder (and its scanner) on every call.
_DECODER = json.JSONDecoder(object_pairs_hook=no_duplicates, parse_constant=no_constants, parse_float=finite)
# The decoder's own scanner, called directly for text that starts with its value: ``decode`` would match
# whitespace with a regex on both sides first. Anything else goes through ``decode`` (and its messages).
_SCAN = make_scanner(_DECODER)  # type: ignore[arg-type]  # typeshed types the argument as make_scanner itself
_JSON_WHITESPACE = " \t\n\r"


def strict_loads(text: str) -> dict[str, Any]:
    """Decode ``text`` as one JSON object, refusing anything lenient."""
    try:
        # JSON deeper than MAX_DEPTH takes more than twice as many characters (what is shorter and deep is not
        # JSON, and fails below within that depth): most calls' arguments are answered by ``len``.
        if len(text) > 2 * MAX_DEPTH and nested_deeper(text_of(text), MAX_DEPTH):
            raise InvalidJson(f"arguments are nested more than {MAX_DEPTH} levels deep")
        if isinstance(text, str) and text[:1] in ("{", "["):
            try:
                value, end = _SCAN(text, 0)
            except StopIteration:  # cannot be read from here: decode says why
                value, end = _DECODER.decode(text), len(text)
            if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
                value = _DECODER.decode(text)  # raises: extra data after the value
        elif isinstance(text, str) and not text.startswith("\ufeff"):
            value = _DECODER.decode(text)
        else:  # bytes, or a byte order mark: ``json.loads`` has the checks and the messages for those
            value = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constants, parse_float=finite)
    except InvalidJson:
        raise
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"arguments are not valid JSON: {exc.msg}") from None
    except RecursionError:  # not past the check above; kept so a decoder change cannot crash a run
        raise InvalidJson(f"arguments are nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:  # e.g. an integer past Python's digit limit
        raise InvalidJson("arguments hold a number too large to read") from None
    if not isinstance(value, dict):
        raise InvalidJson(f"arguments must be a JSON object, got {_json_type(value)}")
    if isinstance(text, str):
        try:
            check_text(text, value)
        except NotText:
            raise InvalidJson("arguments hold a lone UTF-16 surrogate, which is not text") from None
    return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


json_type = _json_type


def canonical(value: Any) -> str:
    """One spelling of a JSON value, for comparisons and fingerprints."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
