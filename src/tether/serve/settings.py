"""A service's run configuration: small value objects with named defaults.

What the run machinery (``tether.serve.service``) needs, and nothing else:
the run store, how to make a model, the limits that keep one user from
taking the service from everyone else (runs at once, per user, waiting per
user; conversations with no turn yet and event streams open per user; the
request body size), the lease term and the grace a stop gives the tool
calls running. ``Settings.from_env`` reads the environment the way the
CLI does (``OPENAI_*`` for the model, ``TETHER_*`` for the rest). An
application built on it subclasses ``Settings`` with its own fields (the
ticket example does) and extends ``fields_from_env``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tether.core.budget import Budget
from tether.core.errors import ConfigurationError
from tether.models.base import Model
from tether.store.records import DEFAULT_LEASE_SECONDS

DEFAULT_MAX_CONCURRENT_RUNS = 256  # runs driven at once; later ones wait their turn
DEFAULT_MAX_RUNS_PER_USER = 16  # runs of one user driven at once
DEFAULT_MAX_QUEUED_RUNS_PER_USER = 64  # runs of one user waiting for a slot; one more is a 429
DEFAULT_RUNS_RETRY_AFTER = 5  # seconds a user told "too many runs" (or event streams) is asked to wait
DEFAULT_MAX_EMPTY_CONVERSATIONS_PER_USER = 64  # conversations of one user with no turn yet; one more is a 429
DEFAULT_EMPTY_CONVERSATION_SECONDS = 86_400.0  # how long such a conversation counts: a day after it was made
DEFAULT_MAX_EVENT_STREAMS_PER_USER = 32  # event streams one user holds open to a process at once
DEFAULT_APPROVALS_PAGE = 100  # calls an approvals listing gives unless asked for another number
DEFAULT_MAX_BODY_BYTES = 1_000_000
DEFAULT_RUN_DB = Path("tether-runs.db")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DEFAULT_SHUTDOWN_GRACE = 20.0  # under the 30 s a container orchestrator waits before a SIGKILL


def openai_model_factory(base_url: str | None = None, model: str | None = None) -> Callable[[], Model]:
    """Make an ``OpenAIChatModel`` per run from ``OPENAI_*`` (or the given base URL and model name)."""

    def make() -> Model:
        from tether.models.openai_chat import OpenAIChatModel

        return OpenAIChatModel(model, base_url=base_url, stream=True)  # a page shows the answer as it streams

    return make


@dataclass(frozen=True, slots=True)
class Settings:
    """How a service's runs run. Only ``model_factory`` has no useful default outside production.

    Example::

        settings = Settings(run_db="postgresql://tether@db/tether", max_runs_per_user=4)
        store = open_run_store(settings)
        runs = RunService(settings, store, tools)
    """

    # A SQLite file (one process) or a postgresql:// url (any number of processes and hosts).
    run_db: Path | str = DEFAULT_RUN_DB
    model_factory: Callable[[], Model] = field(default_factory=openai_model_factory)
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    max_runs_per_user: int = DEFAULT_MAX_RUNS_PER_USER
    max_queued_runs_per_user: int = DEFAULT_MAX_QUEUED_RUNS_PER_USER
    # Conversations of one user with no turn yet, made in the last ``empty_conversation_seconds``: one more is a
    # 429. A conversation with a turn costs a run, which the limits above hold; an empty one costs only its row.
    max_empty_conversations_per_user: int = DEFAULT_MAX_EMPTY_CONVERSATIONS_PER_USER
    empty_conversation_seconds: float = DEFAULT_EMPTY_CONVERSATION_SECONDS
    # Event streams (server-sent events, A2A streams) one user holds open to this process at once.
    max_event_streams_per_user: int = DEFAULT_MAX_EVENT_STREAMS_PER_USER
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    system: str | None = None
    budget: Budget | None = None
    # Keep user and model text in the stored audit events (DESIGN.md §7: off unless asked).
    log_content: bool = False
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
    def from_env(cls, *, base_url: str | None = None, model: str | None = None) -> Self:
        """The settings ``fields_from_env`` reads; the model from ``OPENAI_*`` (or ``base_url`` and ``model``).

        A limit that is not a positive number is a ``ConfigurationError`` naming the variable.
        """
        return cls(**cls.fields_from_env(os.environ, base_url=base_url, model=model))

    @classmethod
    def fields_from_env(
        cls, env: Mapping[str, str], *, base_url: str | None = None, model: str | None = None
    ) -> dict[str, Any]:
        """``TETHER_RUN_DB`` (else ``TETHER_DB``: a SQLite file or a ``postgresql://`` url),
        ``TETHER_LOG_CONTENT``, the limits ``limits_from_env`` reads, ``TETHER_LEASE_SECONDS``,
        ``TETHER_SHUTDOWN_GRACE``."""
        return {
            "run_db": run_store(env.get("TETHER_RUN_DB") or env.get("TETHER_DB") or None),
            "model_factory": openai_model_factory(base_url, model),
            "log_content": env.get("TETHER_LOG_CONTENT", "").lower() in ("1", "true", "yes"),
            **limits_from_env(env),
            "lease_seconds": seconds(env, "TETHER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
            "shutdown_grace": seconds(env, "TETHER_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE),
        }


def limits_from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``Settings`` limits on runs, conversations and event streams, from ``TETHER_MAX_CONCURRENT_RUNS``,
    ``TETHER_MAX_RUNS_PER_USER``, ``TETHER_MAX_QUEUED_RUNS_PER_USER``, ``TETHER_MAX_EMPTY_CONVERSATIONS_PER_USER``,
    ``TETHER_EMPTY_CONVERSATION_SECONDS`` and ``TETHER_MAX_EVENT_STREAMS_PER_USER``, each else its default.

    ``Settings.from_env`` and ``tether serve`` (``tether.serve.app``) both read them; a value that is not a
    positive number is a ``ConfigurationError`` naming the variable."""
    return {
        "max_concurrent_runs": count(env, "TETHER_MAX_CONCURRENT_RUNS", DEFAULT_MAX_CONCURRENT_RUNS),
        "max_runs_per_user": count(env, "TETHER_MAX_RUNS_PER_USER", DEFAULT_MAX_RUNS_PER_USER),
        "max_queued_runs_per_user": count(env, "TETHER_MAX_QUEUED_RUNS_PER_USER", DEFAULT_MAX_QUEUED_RUNS_PER_USER),
        "max_empty_conversations_per_user": count(
            env, "TETHER_MAX_EMPTY_CONVERSATIONS_PER_USER", DEFAULT_MAX_EMPTY_CONVERSATIONS_PER_USER
        ),
        "empty_conversation_seconds": seconds(
            env, "TETHER_EMPTY_CONVERSATION_SECONDS", DEFAULT_EMPTY_CONVERSATION_SECONDS
        ),
        "max_event_streams_per_user": count(
            env, "TETHER_MAX_EVENT_STREAMS_PER_USER", DEFAULT_MAX_EVENT_STREAMS_PER_USER
        ),
    }


def run_store(target: str | Path | None) -> Path | str:
    """The run store a setting names: a ``postgresql://`` url as it is, anything else a SQLite file."""
    if target is None:
        return DEFAULT_RUN_DB
    if isinstance(target, str) and target.startswith(POSTGRES_SCHEMES):
        return target
    return Path(target)


def count(env: Mapping[str, str], name: str, default: int) -> int:
    """The whole number of at least 1 that variable ``name`` holds, else ``default``; a ``ConfigurationError``."""
    text = env.get(name)
    if not text:
        return default
    digits = text.strip()
    try:  # ASCII digits only: str.isdigit takes a superscript two, which int() refuses
        value = int(digits) if digits.isascii() and digits.isdigit() else 0
    except ValueError:  # more digits than int() reads
        value = 0
    if value < 1:
        shown = text if len(text) <= 40 else f"{text[:40]}..."
        raise ConfigurationError(f"{name} must be a whole number of at least 1, got {shown!r}")
    return value


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """The number of seconds above 0 that variable ``name`` holds, else ``default``; a ``ConfigurationError``."""
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
