"""Keep secrets out of logs, events and printed output.

Any mapping key that looks like a credential has its value replaced, at any
depth. Matching is on the key name, case-insensitive, so ``api_key``,
``X-Api-Key``, ``refreshToken``, ``private_key`` and ``Authorization`` are
all caught. In text, credentials of a known shape are replaced
(``SECRET_TEXT``): a key with no telling shape is caught only by its key.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tether.core import nesting

REDACTED = "[redacted]"
# "token" but not "tokens": usage counts (input_tokens) are not secrets; tokens to access or refresh with are.
SECRET_KEY = re.compile(
    r"pass(word|wd)?|token(?!s)|(access|refresh|auth|bearer)[_-]?tokens|secret|api[_-]?key"
    r"|private[_-]?key|authorization|credential|cookie",
    re.I,
)
# Credentials in free text, each shaped so that prose does not match: a bearer token, the credentials of an
# Authorization header (any scheme or case), an OpenAI or Anthropic key (sk-), a tether API key (tk_ and 43
# characters), an AWS access key id, a GitHub token, a JWT (two base64 JSON objects, "eyJ"), a PEM private key.
SECRET_TEXT = re.compile(
    r"(Bearer\s+|(?i:authorization)[\"']?\s*[:=]\s*[\"']?(?i:basic|bearer|token|digest)\s+)[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-[A-Za-z0-9_-]{8,}"
    r"|\btk_[A-Za-z0-9_-]{40,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bghp_[A-Za-z0-9]{36,}|\bgithub_pat_[A-Za-z0-9_]{40,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
    r"|-----BEGIN[A-Z ]* PRIVATE KEY-----.*?(?:-----END[A-Z ]* PRIVATE KEY-----|\Z)"
    # A URL's query parameter that carries a credential (an OAuth token, an API key, a signed URL's signature).
    r"|([?&;](?:access_token|refresh_token|id_token|token|api_key|apikey|key|secret|client_secret|password"
    r"|sig|signature)=)[^&#\s\"'<>]{4,}",
    re.S,
)
# Text holding none of these cannot match SECRET_TEXT: the common case, told without running it.
_MARKERS = (
    *("sk-", "Bearer", "uthorization", "UTHORIZATION", "tk_", "AKIA", "ghp_", "github_pat_", "eyJ", "PRIVATE KEY"),
    *("token=", "key=", "secret=", "password=", "sig=", "signature="),
)


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
    if not any(marker in text for marker in _MARKERS):
        return text
    return SECRET_TEXT.sub(lambda m: (m.group(1) or m.group(2) or "") + REDACTED, text)
