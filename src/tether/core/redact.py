"""Keep secrets out of logs, events and printed output.

Any mapping key that looks like a credential has its value replaced, at any
depth. Matching is on the key name, case-insensitive, so ``api_key``,
``X-Api-Key``, ``refreshToken`` and ``Authorization`` are all caught.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tether.core import nesting

REDACTED = "[redacted]"
# "token" but not "tokens": usage counts (input_tokens) are not secrets.
SECRET_KEY = re.compile(r"pass(word|wd)?|token(?!s)|secret|api[_-]?key|authorization|credential|cookie", re.I)
# A bearer token or an OpenAI-style key inside free text.
SECRET_TEXT = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{8,}")


_SECRET_KEYS: dict[str, bool] = {}  # a key's verdict, once: events and arguments repeat the same few keys


def secret_key(key: str) -> bool:
    """Whether a mapping key names a credential (``api_key``, ``Authorization``, ...)."""
    found = _SECRET_KEYS.get(key)
    if found is None:
        found = bool(SECRET_KEY.search(key))
        if len(_SECRET_KEYS) < 4096:  # keys chosen by models are not all kept
            _SECRET_KEYS[key] = found
    return found


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret-looking entry replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and secret_key(k) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_arguments(arguments: str) -> str:
    """A call's raw JSON arguments with secret-looking entries replaced (as ``redact`` does); text that is not a
    JSON object (nor one nested past ``MAX_DEPTH``, which no reader walks) goes through ``redact_text``."""
    try:
        parsed = nesting.loads(arguments, nesting.MAX_DEPTH)
    except ValueError:  # not JSON, too deep, or not text (nesting.REFUSED are ValueErrors too)
        return redact_text(arguments)
    if not isinstance(parsed, dict):
        return redact_text(arguments)
    cleaned = redact(parsed)
    return arguments if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


def redact_text(text: str) -> str:
    """``text`` with anything that looks like an API key or a bearer token replaced by ``REDACTED``."""
    if "sk-" not in text and "Bearer" not in text:  # the common case, without running the pattern
        return text
    return SECRET_TEXT.sub(lambda m: (m.group(1) or "") + REDACTED, text)
