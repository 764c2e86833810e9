"""Bearer tokens: HS256 JWTs issued for a checked password, verified on every call.

A token carries who the caller is (``sub`` = user id, ``role``,
``preferred_username``) and is accepted only with our issuer, our audience,
an unexpired ``exp`` and the HS256 algorithm — ``alg: none`` or any other
algorithm is refused before the signature is even looked at. Any refusal is
a 401 problem with ``WWW-Authenticate: Bearer``; the detail names the reason
class, never the token.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import jwt
from fastapi import Depends, Request

from tether.core.errors import ConfigurationError
from tether.serve.problems import Problem
from tickets_app.db import TicketsDB, User
from tickets_app.settings import MIN_SECRET_LENGTH

ALGORITHM = "HS256"
ISSUER = "tether"
AUDIENCE = "tether-api"
ROLES = frozenset({"customer", "agent", "admin"})
APPROVER_ROLES = frozenset({"agent", "admin"})
REQUIRED_CLAIMS = ["sub", "role", "iat", "exp", "iss", "aud", "jti"]

log = logging.getLogger("tickets_app")


def _unauthorized(detail: str, *, invalid: bool = True) -> Problem:
    challenge = 'Bearer error="invalid_token"' if invalid else 'Bearer realm="tether"'
    return Problem(401, detail, headers={"WWW-Authenticate": challenge})


@dataclass(frozen=True, slots=True)
class Authority:
    """Issues and checks the service's access tokens."""

    secret: str
    ttl: float
    clock: Callable[[], float] = time.time

    @classmethod
    def from_secret(cls, secret: str | None, ttl: float) -> Authority:
        if secret is None:
            log.warning(
                "TETHER_JWT_SECRET is not set: tokens are signed with a random secret made for this process "
                "and stop working when it restarts"
            )
            secret = secrets.token_urlsafe(48)
        elif len(secret) < MIN_SECRET_LENGTH:
            raise ConfigurationError(
                f"TETHER_JWT_SECRET must be at least {MIN_SECRET_LENGTH} characters; "
                "make one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"
            )
        return cls(secret, ttl)

    def issue(self, user: User) -> str:
        now = int(self.clock())
        claims: dict[str, Any] = {
            "sub": user.id,
            "role": user.role,
            "preferred_username": user.username,
            "iat": now,
            "exp": now + int(self.ttl),
            "iss": ISSUER,
            "aud": AUDIENCE,
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self.secret, algorithm=ALGORITHM)

    def verify(self, token: str) -> User:
        """The user a token speaks for, or a 401 ``Problem``."""
        try:
            claims = jwt.decode(
                token,
                self.secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise _unauthorized("the access token has expired; sign in again") from None
        except jwt.InvalidTokenError:
            raise _unauthorized("the access token is not valid") from None
        sub, role, name = claims.get("sub"), claims.get("role"), claims.get("preferred_username")
        if not isinstance(sub, str) or not sub or role not in ROLES:
            raise _unauthorized("the access token is not valid")
        return User(id=sub, username=name if isinstance(name, str) else sub, role=role)


def current_user(request: Request) -> User:
    """FastAPI dependency: the caller, from ``Authorization: Bearer <token>``.

    Synchronous, so FastAPI runs it in a worker thread: the tickets database
    lookup never blocks the event loop (``TicketsDB`` locks its connection).
    """
    header = request.headers.get("authorization")
    if not header:
        raise _unauthorized("sign in: this endpoint needs an Authorization: Bearer token", invalid=False)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("the Authorization header must be: Bearer <token>")
    authority: Authority = request.app.state.authority
    claimed = authority.verify(token.strip())
    # The account as it is now: a deleted user's token dies with them, a changed role applies at once.
    tickets: TicketsDB = request.app.state.tickets
    user = tickets.get_user(claimed.id)
    if user is None:
        raise _unauthorized("the access token's account no longer exists")
    return user


def approver(user: Annotated[User, Depends(current_user)]) -> User:
    """FastAPI dependency: the caller, who must be an agent or an admin."""
    if user.role not in APPROVER_ROLES:
        raise Problem(403, "only support agents and admins may do this")
    return user


CurrentUser = Annotated[User, Depends(current_user)]
Approver = Annotated[User, Depends(approver)]
