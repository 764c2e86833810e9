"""The ticket service's configuration: the run settings (``tether.serve.settings``) and its own.

Its own: the tickets database, an optional knowledge-base index, the JWT
secret and token lifetime, the sign-in limits that keep one client from
taking the service from everyone else (``SignInLimits``), the page's folder
and the assistant's instructions. ``Settings.from_env`` reads the
environment the way the CLI does (``OPENAI_*`` for the model, ``TETHER_*``
for the rest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.serve import settings as run_settings
from tether.serve.settings import (
    DEFAULT_APPROVALS_PAGE,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_QUEUED_RUNS_PER_USER,
    DEFAULT_MAX_RUNS_PER_USER,
    DEFAULT_RUN_DB,
    DEFAULT_RUNS_RETRY_AFTER,
    DEFAULT_SHUTDOWN_GRACE,
    POSTGRES_SCHEMES,
    openai_model_factory,
    run_store,
)

__all__ = [
    "DEFAULT_APPROVALS_PAGE",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONCURRENT_RUNS",
    "DEFAULT_MAX_QUEUED_RUNS_PER_USER",
    "DEFAULT_MAX_RUNS_PER_USER",
    "DEFAULT_RUNS_RETRY_AFTER",
    "DEFAULT_RUN_DB",
    "DEFAULT_SHUTDOWN_GRACE",
    "POSTGRES_SCHEMES",
    "Settings",
    "SignInLimits",
    "openai_model_factory",
    "run_store",
]

DEFAULT_TOKEN_TTL = 3600.0  # seconds an access token is valid
MIN_SECRET_LENGTH = 32  # HS256 wants a key at least as long as its 256-bit output
DEFAULT_TICKETS_DB = Path("tickets.db")
STATIC_DIR = Path(__file__).resolve().parent / "static"

DEFAULT_SYSTEM = (
    "You are the support assistant of a ticket desk. Answer from what the tools return: "
    "look tickets up with get_ticket or list_tickets and the knowledge base with search_kb "
    "before you state a fact about them. If a tool finds nothing, say so. Closing a ticket "
    "needs a support agent's approval; tell the user when one is pending."
)


@dataclass(frozen=True, slots=True)
class SignInLimits:
    """How many wrong passwords an account and a client may try, and where passwords are hashed.

    Failures are counted per account name (existing or not, so a lock-out
    tells nothing about who has an account) and per client address. At its
    limit a key is locked out for ``lockout`` seconds, doubled with every
    further failure up to ``max_lockout``; a sign-in then is answered 429
    with ``Retry-After`` without looking at the password. A success clears
    the account's count, not the client's; counts older than ``window`` are
    forgotten. ``client_in_flight`` sign-ins of one client are checked at a
    time, the rest answered 429 at once; ``max_pending`` sign-ins are
    checked or waiting for a hash service-wide, the rest answered 503. Hashes
    run on ``workers`` threads of their own, never on those that run the tools.
    """

    account_failures: int = 5
    client_failures: int = 20
    lockout: float = 1.0
    max_lockout: float = 900.0
    window: float = 900.0
    client_in_flight: int = 4
    max_pending: int = 16
    workers: int = 1


@dataclass(frozen=True, slots=True)
class Settings(run_settings.Settings):
    """How the ticket service runs: the run settings and the service's own.

    Example::

        settings = Settings(tickets_db=Path("tickets.db"), run_db=Path("runs.db"),
                            jwt_secret=os.environ["TETHER_JWT_SECRET"])
        app = create_app(settings)
    """

    system: str | None = DEFAULT_SYSTEM
    tickets_db: Path = DEFAULT_TICKETS_DB
    kb_index: Path | None = None
    # None: a random secret per process (tokens stop working at a restart; the log says so).
    jwt_secret: str | None = None
    token_ttl: float = DEFAULT_TOKEN_TTL
    sign_in: SignInLimits = SignInLimits()
    static_dir: Path = STATIC_DIR

    @classmethod
    def fields_from_env(
        cls, env: Mapping[str, str], *, base_url: str | None = None, model: str | None = None
    ) -> dict[str, Any]:
        """The run settings' variables, and ``TETHER_TICKETS_DB``, ``TETHER_KB_INDEX``, ``TETHER_JWT_SECRET``,
        ``TETHER_TOKEN_TTL``."""
        kb = env.get("TETHER_KB_INDEX")
        return {
            **run_settings.Settings.fields_from_env(env, base_url=base_url, model=model),
            "tickets_db": Path(env.get("TETHER_TICKETS_DB") or DEFAULT_TICKETS_DB),
            "kb_index": Path(kb) if kb else None,
            "jwt_secret": env.get("TETHER_JWT_SECRET") or None,
            "token_ttl": float(env.get("TETHER_TOKEN_TTL") or DEFAULT_TOKEN_TTL),
        }
