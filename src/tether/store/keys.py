"""API keys: what a key row holds, how a presented key is found, and what vouches for the row.

Pure functions over stored values (no SQL), used by the SQL store's
``create_api_key``, ``api_key_principal``, ``list_api_keys`` and
``revoke_api_key``:

- A key is ``tk_`` and 32 random bytes (``secrets.token_urlsafe``), shown
  once when it is made. The store keeps only its SHA-256 (``key_hash``).
- A key row is sealed (``key_seal``, as a run's row is, ``audit.seal``):
  with ``$TETHER_AUDIT_KEY`` an HMAC, so a row edited in the database (its
  roles widened, its revocation undone, a row added) is refused by a
  process holding the audit key, not honoured.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tether.core.errors import ConfigurationError
from tether.store.audit import seal, seal_problem
from tether.tools.context import Principal

KEY_PREFIX = "tk_"
KEY_BYTES = 32
KEY_ID_BYTES = 8
MAX_NAME_CHARS = 200  # a principal id, a role or a scope
# The columns of a key's row its seal covers: all but the id (sealed on its own) and the seal.
KEY_SEALED = ("hash", "principal", "roles", "scopes", "created_at", "revoked_at")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored API key as ``tether keys list`` shows it: never the key, never its hash.

    ``problem`` says why its row is not honoured (edited outside tether, or
    sealed with another audit key); None when its seal holds.
    """

    key_id: str
    principal: str
    roles: tuple[str, ...]
    scopes: tuple[str, ...]
    created_at: float
    revoked_at: float | None
    problem: str | None = None


def new_key() -> tuple[str, str]:
    """A new key id and key (the secret, shown once)."""
    return secrets.token_hex(KEY_ID_BYTES), KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def key_hash(key: str) -> str:
    """What the store keeps of a key: its SHA-256, hex.

    A plain hash suffices, unlike for passwords: the key is 256 random bits,
    so no dictionary or brute force reaches it and a slow, salted hash
    (argon2) would buy nothing but a slower lookup on every request.
    """
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def names(values: Iterable[str], what: str) -> list[str]:
    """Roles or scopes, checked (each a word: no spaces, no control characters), sorted and without repeats."""
    found = sorted(set(values))
    for value in found:
        if not value or len(value) > MAX_NAME_CHARS or any(c.isspace() or not c.isprintable() for c in value):
            raise ConfigurationError(
                f"{what} {value!r} is not usable: a {what} is 1 to {MAX_NAME_CHARS} printable characters, no spaces"
            )
    return found


def principal_id(value: str) -> str:
    """A key's principal id, checked: 1 to ``MAX_NAME_CHARS`` printable characters, no space at either end.

    Spaces at the ends are refused rather than stripped: ``" alice"`` would be
    a principal of its own that every list shows as ``alice``.
    """
    if not value.strip() or value != value.strip() or len(value) > MAX_NAME_CHARS or not value.isprintable():
        raise ConfigurationError(
            f"principal {value!r} is not usable: a principal id is 1 to {MAX_NAME_CHARS} printable characters,"
            " with no space at either end"
        )
    return value


def key_seal(audit_key: str | None, key_id: str, row: Sequence[object]) -> str:
    """The seal of a key's row; ``row`` holds the ``KEY_SEALED`` values."""
    return seal(audit_key, f"api_key:{key_id}", row)


def key_seal_problem(audit_key: str | None, key_id: str, row: Sequence[object], stored: str | None) -> str | None:
    """What is wrong with a key row's seal under ``audit_key``, or None."""
    return seal_problem(
        audit_key, f"api_key:{key_id}", row, stored, what=f"API key {key_id}", covers="principal, roles or scopes"
    )


def api_key(key_id: str, row: Sequence[object], problem: str | None) -> ApiKey:
    """The listed key of a row (``KEY_SEALED`` values); a row whose roles or scopes cannot be read says so."""
    _, principal, roles, scopes, created_at, revoked_at = row
    try:
        role_names, scope_names = _words(roles), _words(scopes)
    except ValueError:
        role_names, scope_names = (), ()
        problem = problem or f"API key {key_id}: its roles or scopes are not readable"
    return ApiKey(
        key_id,
        str(principal),
        role_names,
        scope_names,
        float(created_at),  # type: ignore[arg-type]
        None if revoked_at is None else float(revoked_at),  # type: ignore[arg-type]
        problem,
    )


def key_principal(found: ApiKey) -> Principal | None:
    """Who a key acts for, or None when it is revoked or its row is not honoured."""
    if found.revoked_at is not None or found.problem is not None:
        return None
    return Principal(found.principal, frozenset(found.scopes), frozenset(found.roles))


def words_text(values: Sequence[str]) -> str:
    """Roles or scopes as stored: a JSON array, sorted."""
    return json.dumps(sorted(values), ensure_ascii=False)


def _words(text: object) -> tuple[str, ...]:
    value = json.loads(text) if isinstance(text, str) else None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("not a list of strings")
    return tuple(value)
