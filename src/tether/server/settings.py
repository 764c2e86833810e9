"""The service's configuration: small value objects with named defaults.

Everything the HTTP service needs to start is here, and nothing else: the
tickets database, the run store, an optional knowledge-base index, the JWT
secret, how to make a model, and the limits that keep one user or one
client from taking the service from everyone else (``SignInLimits``, the
per-user run limits). ``Settings.from_env`` reads the environment the way
the CLI does (``OPENAI_*`` for the model, ``TETHER_*`` for the rest).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tether.core.budget import Budget
from tether.core.errors import ConfigurationError
from tether.models.base import Model
from tether.store.records import DEFAULT_LEASE_SECONDS

DEFAULT_TOKEN_TTL = 3600.0  # seconds an access token is valid
DEFAULT_MAX_CONCURRENT_RUNS = 256  # runs driven at once; later ones wait their turn
DEFAULT_MAX_RUNS_PER_USER = 16  # runs of one user driven at once
DEFAULT_MAX_QUEUED_RUNS_PER_USER = 64  # runs of one user waiting for a slot; one more is a 429
DEFAULT_RUNS_RETRY_AFTER = 5  # seconds a user told "too many runs" is asked to wait
DEFAULT_APPROVALS_PAGE = 100  # calls GET /api/approvals lists unless asked for another number
DEFAULT_MAX_BODY_BYTES = 1_000_000
MIN_SECRET_LENGTH = 32  # HS256 wants a key at least as long as its 256-bit output
DEFAULT_TICKETS_DB = Path("tickets.db")
DEFAULT_RUN_DB = Path("tether-runs.db")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
STATIC_DIR = Path(__file__).resolve().parent / "static"

DEFAULT_SYSTEM = (
    "You are the support assistant of a ticket desk. Answer from what the tools return: "
    "look tickets up with get_ticket or list_tickets and the knowledge base with search_kb "
    "before you state a fact about them. If a tool finds nothing, say so. Closing a ticket "
    "needs a support agent's approval; tell the user when one is pending."
)


def openai_model_factory(base_url: str | None = None, model: str | None = None) -> Callable[[], Model]:
    """Make an ``OpenAIChatModel`` per run from ``OPENAI_*`` (or the given base URL and model name)."""

    def make() -> Model:
        from tether.models.openai_chat import OpenAIChatModel

        return OpenAIChatModel(model, base_url=base_url, stream=True)  # the page shows the answer as it streams

    return make


DEFAULT_SHUTDOWN_GRACE = 20.0  # under the 30 s a container orchestrator waits before a SIGKILL


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
class Settings:
    """How the service runs. Only ``model_factory`` has no useful default outside production.

    Example::

        settings = Settings(tickets_db=Path("tickets.db"), run_db=Path("runs.db"),
                            jwt_secret=os.environ["TETHER_JWT_SECRET"])
        app = create_app(settings)
    """

    tickets_db: Path = DEFAULT_TICKETS_DB
    # A SQLite file (one process) or a postgresql:// url (any number of processes and hosts).
    run_db: Path | str = DEFAULT_RUN_DB
    kb_index: Path | None = None
    # None: a random secret per process (tokens stop working at a restart; the log says so).
    jwt_secret: str | None = None
    model_factory: Callable[[], Model] = field(default_factory=openai_model_factory)
    token_ttl: float = DEFAULT_TOKEN_TTL
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    max_runs_per_user: int = DEFAULT_MAX_RUNS_PER_USER
    max_queued_runs_per_user: int = DEFAULT_MAX_QUEUED_RUNS_PER_USER
    sign_in: SignInLimits = SignInLimits()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    system: str | None = DEFAULT_SYSTEM
    budget: Budget | None = None
    # Keep user and model text in the stored audit events (DESIGN.md §7: off unless asked).
    log_content: bool = False
    static_dir: Path = STATIC_DIR
    # How long a run stays with a live process that stops renewing its lease before another takes it
    # (a process that dies lets go of its runs at once: the platform's lock on each is released).
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # On SIGTERM: how long the tool calls running may take to finish before the runs are handed on anyway.
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE

    @property
    def shared_store(self) -> bool:
        """Whether the run store is PostgreSQL, which several processes may share."""
        return isinstance(self.run_db, str) and self.run_db.startswith(POSTGRES_SCHEMES)

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None) -> Settings:
        """``TETHER_TICKETS_DB``, ``TETHER_RUN_DB`` (else ``TETHER_DB``: a SQLite file or a
        ``postgresql://`` url), ``TETHER_KB_INDEX``, ``TETHER_JWT_SECRET``, ``TETHER_TOKEN_TTL``,
        ``TETHER_LOG_CONTENT``, ``TETHER_MAX_CONCURRENT_RUNS``, ``TETHER_MAX_RUNS_PER_USER``,
        ``TETHER_MAX_QUEUED_RUNS_PER_USER``, ``TETHER_LEASE_SECONDS``, ``TETHER_SHUTDOWN_GRACE``; the model
        from ``OPENAI_*``.

        A limit that is not a positive number is a ``ConfigurationError`` naming the variable.
        """
        env = os.environ
        kb = env.get("TETHER_KB_INDEX")
        return cls(
            tickets_db=Path(env.get("TETHER_TICKETS_DB") or DEFAULT_TICKETS_DB),
            run_db=run_store(env.get("TETHER_RUN_DB") or env.get("TETHER_DB") or None),
            kb_index=Path(kb) if kb else None,
            jwt_secret=env.get("TETHER_JWT_SECRET") or None,
            model_factory=openai_model_factory(base_url, model),
            token_ttl=float(env.get("TETHER_TOKEN_TTL") or DEFAULT_TOKEN_TTL),
            log_content=env.get("TETHER_LOG_CONTENT", "").lower() in ("1", "true", "yes"),
            max_concurrent_runs=_count(env, "TETHER_MAX_CONCURRENT_RUNS", DEFAULT_MAX_CONCURRENT_RUNS),
            max_runs_per_user=_count(env, "TETHER_MAX_RUNS_PER_USER", DEFAULT_MAX_RUNS_PER_USER),
            max_queued_runs_per_user=_count(env, "TETHER_MAX_QUEUED_RUNS_PER_USER", DEFAULT_MAX_QUEUED_RUNS_PER_USER),
            lease_seconds=_seconds(env, "TETHER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
            shutdown_grace=_seconds(env, "TETHER_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE),
        )


def run_store(target: str | Path | None) -> Path | str:
    """The run store a setting names: a ``postgresql://`` url as it is, anything else a SQLite file."""
    if target is None:
        return DEFAULT_RUN_DB
    if isinstance(target, str) and target.startswith(POSTGRES_SCHEMES):
        return target
    return Path(target)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if not text:
        return default
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigurationError(f"{name} must be a whole number of at least 1, got {text!r}")
    return int(text)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ConfigurationError(f"{name} must be a number of seconds above 0, got {text!r}")
    return value
