"""The built-in authenticators: API keys from the run store, JWT bearer tokens, and none (loopback only).

Each is an ``Authenticator`` (``tether.serve.identity``): it turns a request
into the ``Principal`` the caller acts as, or refuses it with a 401 problem
(``WWW-Authenticate: Bearer``) whose detail says why in a fixed sentence —
never the credential, which nothing here logs.

``tether serve --auth SPEC`` picks one with ``authenticator_from(SPEC, store)``:

    none                            every caller is ``local``, with the approver role; only on a loopback address
    keys                            API keys made with ``tether keys create`` (Authorization: Bearer, or X-API-Key)
    jwt:secret-env=VAR[,OPTIONS]    JWTs signed with HS256/384/512 under the secret in $VAR (32 bytes at least)
    jwt:jwks=PATH[,OPTIONS]         JWTs signed with a public key of the JWKS file PATH (RS*, PS*, ES*, EdDSA)

    OPTIONS: issuer=ISS, audience=AUD (then required in every token), leeway=SECONDS (clock skew allowed)

A JWT acts for its ``sub``; its roles are the ``roles`` claim (a list of
strings) and the ``role`` claim (a string), its scopes the ``scope`` claim
(space-separated); each role and scope is 1 to ``MAX_NAME_CHARS`` printable
characters, as an API key's. It must carry ``exp``: a bearer token that never expires
can never be taken back (use an API key, which can be revoked). A key in a
JWKS file is used only with the algorithms of its type, chosen by its
``kty``/``crv`` or its ``alg``, and picked by the token's ``kid``: a token
signed with HS256 using the public key as the secret is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from starlette.requests import Request

from tether.core.errors import ConfigurationError
from tether.serve.identity import APPROVER_ROLE
from tether.serve.problems import Problem
from tether.store.base import RunStore
from tether.store.keys import MAX_NAME_CHARS, principal_id
from tether.tools.context import ALL_SCOPES, Principal

__all__ = [
    "AUTH_SPECS",
    "MIN_SECRET_BYTES",
    "ApiKeyAuth",
    "JWTAuth",
    "NoAuth",
    "authenticator_from",
    "check_no_auth_bind",
]

MIN_SECRET_BYTES = 32  # HS256's key is as strong as its secret: RFC 7518 asks for at least the hash's size
HMAC_ALGORITHMS = {"HS256": 32, "HS384": 48, "HS512": 64}  # each with the bytes its secret needs at least
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512", "secp256k1": "ES256K"}
OKP_CURVES = ("Ed25519", "Ed448")
MAX_CLAIM_ITEMS = 100  # roles in a token
AUTH_SPECS = "none | keys | jwt:secret-env=VAR[,issuer=ISS][,audience=AUD][,leeway=S] | jwt:jwks=PATH[,...]"
LOOPBACK_NAMES = frozenset({"localhost"})


def _refused(detail: str, *, invalid: bool = True) -> Problem:
    challenge = 'Bearer error="invalid_token"' if invalid else 'Bearer realm="tether"'
    return Problem(401, detail, headers={"WWW-Authenticate": challenge})


def _bearer(request: Request, needs: str) -> str:
    """The token of ``Authorization: Bearer TOKEN``, or a 401 problem saying what the endpoint ``needs``."""
    header = request.headers.get("authorization")
    if header is None:
        raise _refused(f"this endpoint needs {needs}", invalid=False)
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        raise _refused("the Authorization header must be: Bearer <token>")
    return token


# --- API keys --------------------------------------------------------------------------------------


class ApiKeyAuth:
    """Callers present an API key made with ``tether keys create``: ``Authorization: Bearer tk_...`` or
    ``X-API-Key: tk_...``. Looked up in the run store on every request, so a revoked key stops at once."""

    def __init__(self, store: RunStore) -> None:
        self.store = store

    async def authenticate(self, request: Request) -> Principal:
        """The principal whose API key the request carries; a 401 problem when it has none or an unknown one."""
        if "authorization" in request.headers or "x-api-key" not in request.headers:
            key = _bearer(request, "an API key: Authorization: Bearer tk_... (or X-API-Key: tk_...)")
        else:
            key = request.headers["x-api-key"].strip()
        if self.store.remote:  # a database on the network: wait for it off the event loop
            principal = await asyncio.to_thread(self.store.api_key_principal, key)
        else:
            principal = self.store.api_key_principal(key)
        if principal is None:
            raise _refused("the API key is not valid (unknown or revoked)")
        return principal


# --- JWT bearer tokens ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    """A verification key and the algorithms a token may use with it."""

    key: Any
    algorithms: tuple[str, ...]


class JWTAuth:
    """Callers present a JWT: ``Authorization: Bearer <token>``, checked against a secret or a JWKS file.

    Give exactly one of ``secret`` (HMAC, at least ``MIN_SECRET_BYTES``) and
    ``jwks_file`` (public keys, read once here: restart to take new keys).
    With ``issuer`` or ``audience``, a token must carry that ``iss`` or
    ``aud``; ``leeway`` seconds of clock skew are forgiven on ``exp`` and ``nbf``.
    """

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        jwks_file: str | os.PathLike[str] | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        leeway: float = 0,
    ) -> None:
        if (secret is None) == (jwks_file is None):
            raise ConfigurationError("JWT authentication needs a secret or a JWKS file (one of them)")
        if not (math.isfinite(leeway) and leeway >= 0):
            raise ConfigurationError(f"the JWT leeway must be a number of seconds, 0 or more, not {leeway}")
        self.issuer, self.audience, self.leeway = issuer, audience, leeway
        self._shared: _Key | None = None
        self._keys: dict[str | None, _Key] = {}
        if secret is not None:
            raw = secret.encode() if isinstance(secret, str) else secret
            if len(raw) < MIN_SECRET_BYTES:
                raise ConfigurationError(
                    f"the JWT secret must be at least {MIN_SECRET_BYTES} bytes, it has {len(raw)}; make one with:"
                    " python -c 'import secrets; print(secrets.token_urlsafe(48))'"
                )
            # HS384 and HS512 only with a secret as long as their hash (RFC 7518, 3.2): a shorter one is no stronger.
            self._shared = _Key(raw, tuple(a for a, size in HMAC_ALGORITHMS.items() if len(raw) >= size))
        else:
            assert jwks_file is not None
            self._keys = _read_jwks(Path(jwks_file))

    async def authenticate(self, request: Request) -> Principal:
        """The principal the request's bearer JWT names, once verified; a 401 problem otherwise."""
        token = _bearer(request, "a bearer token: Authorization: Bearer <JWT>")
        try:
            claims = self._verified(token)
        except jwt.ExpiredSignatureError:
            raise _refused("the bearer token has expired") from None
        except jwt.ImmatureSignatureError:
            raise _refused("the bearer token is not valid yet (nbf)") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _refused(f"the bearer token is not valid: it has no {exc.claim} claim") from None
        except jwt.InvalidAudienceError:
            raise _refused("the bearer token is not valid: it is not for this service (aud)") from None
        except jwt.InvalidIssuerError:
            raise _refused("the bearer token is not valid: another issuer made it (iss)") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            # Anything else a token can hold (a bad signature, an algorithm not allowed, bad encoding) is one
            # answer: which it was helps only someone trying tokens.
            raise _refused("the bearer token is not valid") from None
        return _principal(claims)

    def _verified(self, token: str) -> dict[str, Any]:
        header = jwt.get_unverified_header(token)
        key = self._key_for(header)
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in key.algorithms:
            raise jwt.InvalidAlgorithmError("the algorithm is not allowed")
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=[algorithm],
            issuer=self.issuer,
            audience=self.audience,
            leeway=self.leeway,
            options={"require": ["exp", "sub"]},
        )
        return claims

    def _key_for(self, header: Mapping[str, Any]) -> _Key:
        if self._shared is not None:
            return self._shared
        kid = header.get("kid")
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        found = self._keys.get(kid) if isinstance(kid, str) else None
        if found is None:
            raise jwt.InvalidKeyError("no key with this kid")
        return found


def _principal(claims: Mapping[str, Any]) -> Principal:
    """The principal of verified claims: ``sub``, ``roles``/``role``, ``scope``; anything malformed is a 401."""
    sub, roles, role, scope = claims.get("sub"), claims.get("roles"), claims.get("role"), claims.get("scope")
    found: set[str] = set()
    try:
        if not isinstance(sub, str):
            raise ConfigurationError("not a string")
        principal_id(sub)
    except ConfigurationError:
        raise _refused("the bearer token is not valid: its sub is not a principal id") from None
    if roles is not None:
        if not isinstance(roles, list) or len(roles) > MAX_CLAIM_ITEMS or not all(_word(r) for r in roles):
            raise _refused("the bearer token is not valid: roles must be a list of strings")
        found.update(roles)
    if role is not None:
        if not _word(role):
            raise _refused("the bearer token is not valid: role must be a string")
        found.add(role)
    scopes = scope.split() if isinstance(scope, str) else []
    if scope is not None and (not isinstance(scope, str) or not all(_word(s) for s in scopes)):
        # Each a word as an API key's scope is: a control character or a lone surrogate is no scope a tool names,
        # and no store can write it into the run the caller starts.
        raise _refused("the bearer token is not valid: scope must be a space-separated string of scopes")
    return Principal(sub, frozenset(scopes), frozenset(found))


def _word(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_NAME_CHARS
        and not any(c.isspace() or not c.isprintable() for c in value)
    )


def _read_jwks(path: Path) -> dict[str | None, _Key]:
    """The signing keys of a JWKS file by ``kid``; a file that is unreadable, or holds a key tether will not
    use for verification (symmetric, private, of an unknown type), is a ``ConfigurationError``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"cannot read the JWKS file {path}: {exc}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigurationError(f'the JWKS file {path} must be a JSON object with a non-empty "keys" list')
    keys: dict[str | None, _Key] = {}
    for number, entry in enumerate(entries, start=1):
        where = f"the JWKS file {path}, key {number}"
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where}: not a JSON object")
        if entry.get("use", "sig") != "sig":
            continue  # an encryption key: not for signatures
        kid = entry.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise ConfigurationError(f"{where}: its kid must be a string")
        if kid in keys:
            raise ConfigurationError(f"{where}: two keys have the kid {kid!r}")
        algorithms = _algorithms(entry, where)
        try:
            key = jwt.PyJWK(entry, algorithm=algorithms[0]).key
        except jwt.PyJWTError as exc:
            raise ConfigurationError(f"{where}: not a usable key: {exc}") from None
        keys[kid] = _Key(key, algorithms)
    if not keys:
        raise ConfigurationError(f"the JWKS file {path} has no signing key")
    if None in keys and len(keys) > 1:
        raise ConfigurationError(f"the JWKS file {path}: with several keys, each needs a kid")
    return keys


def _algorithms(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The algorithms a JWK may verify: those of its type (``kty``, ``crv``), narrowed to its ``alg`` if given."""
    kty, crv, alg = entry.get("kty"), entry.get("crv"), entry.get("alg")
    if kty == "oct":
        raise ConfigurationError(f"{where}: a symmetric key (kty oct); for a shared secret use jwt:secret-env=VAR")
    if "d" in entry:
        raise ConfigurationError(f"{where}: holds a private key (d); give only the public key")
    if kty == "RSA":
        allowed: tuple[str, ...] = RSA_ALGORITHMS
    elif kty == "EC" and isinstance(crv, str) and crv in EC_ALGORITHMS:
        allowed = (EC_ALGORITHMS[crv],)
    elif kty == "OKP" and crv in OKP_CURVES:
        allowed = ("EdDSA",)
    else:
        raise ConfigurationError(f"{where}: an unsupported key type (kty {kty!r}, crv {crv!r})")
    if alg is None:
        return allowed
    if alg not in allowed:
        raise ConfigurationError(f"{where}: alg {alg!r} does not fit its key type (one of {', '.join(allowed)})")
    return (alg,)


# --- no authentication -----------------------------------------------------------------------------


class NoAuth:
    """Every caller is one principal (default ``local``, all scopes, the approver role): for a server only
    its own machine can reach (``check_no_auth_bind``)."""

    def __init__(self, principal_id: str = "local", roles: Iterable[str] = (APPROVER_ROLE,)) -> None:
        self.principal = Principal(principal_id, frozenset({ALL_SCOPES}), frozenset(roles))

    async def authenticate(self, request: Request) -> Principal:
        """The one principal, for requests addressed to localhost or 127.0.0.1 only (421 otherwise)."""
        # Binding to loopback keeps other machines out, not other origins: a web page whose DNS name is
        # rebound to 127.0.0.1 reaches this server from the user's browser with its own name in Host.
        if not _loopback(_host_name(request.headers.get("host", ""))):
            raise Problem(
                421, "without authentication this service answers only requests addressed to localhost or 127.0.0.1"
            )
        return self.principal


def check_no_auth_bind(host: str) -> None:
    """Raise ``ConfigurationError`` unless ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``.

    Without authentication anyone who reaches the server acts as its one
    principal and may approve calls: only this machine may reach it.
    """
    if not _loopback(host):
        raise ConfigurationError(
            f"--auth none serves without authentication, so only on a loopback address (127.0.0.1, ::1, localhost),"
            f" not {host or 'every address'}; for {host or 'it'} use --auth keys or --auth jwt:..."
        )


def _host_name(host: str) -> str:
    """A Host header's name without its port: ``[::1]:8000`` is ``[::1]``, ``localhost:8000`` ``localhost``."""
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback(host: str) -> bool:
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # any other name may resolve to anything
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


# --- from the command line --------------------------------------------------------------------------


def authenticator_from(spec: str, store: RunStore, *, host: str | None = None) -> NoAuth | ApiKeyAuth | JWTAuth:
    """The authenticator ``--auth SPEC`` names (see the module's docstring); a bad spec is a ``ConfigurationError``.

    With ``host``, ``none`` is refused unless the server binds a loopback address (``check_no_auth_bind``).
    """
    kind, _, rest = spec.strip().partition(":")
    if kind == "none" and not rest:
        if host is not None:
            check_no_auth_bind(host)
        return NoAuth()
    if kind == "keys" and not rest:
        return ApiKeyAuth(store)
    if kind != "jwt":
        raise ConfigurationError(f"--auth {spec!r} is not one of: {AUTH_SPECS}")
    options = _options(spec, rest)
    secret_env, jwks = options.pop("secret-env", None), options.pop("jwks", None)
    issuer, audience, leeway = options.pop("issuer", None), options.pop("audience", None), options.pop("leeway", "0")
    if options:
        raise ConfigurationError(f"--auth {spec!r}: unknown option {sorted(options)[0]!r} (see: {AUTH_SPECS})")
    try:
        skew = float(leeway)
    except ValueError:
        raise ConfigurationError(f"--auth {spec!r}: leeway must be a number of seconds") from None
    if (secret_env is None) == (jwks is None):
        raise ConfigurationError(f"--auth {spec!r}: give one of secret-env=VAR and jwks=PATH")
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise ConfigurationError(f"--auth {spec!r}: ${secret_env} is not set (it holds the JWT secret)")
        return JWTAuth(secret=secret, issuer=issuer, audience=audience, leeway=skew)
    return JWTAuth(jwks_file=jwks, issuer=issuer, audience=audience, leeway=skew)


def _options(spec: str, text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for part in text.split(","):
        name, equals, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not equals or not name or not value:
            raise ConfigurationError(f"--auth {spec!r}: each option is NAME=VALUE (see: {AUTH_SPECS})")
        if name in options:
            raise ConfigurationError(f"--auth {spec!r}: {name} is given twice")
        options[name] = value
    return options
