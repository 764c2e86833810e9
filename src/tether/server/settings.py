"""The service's configuration: one small value object with named defaults.

Everything the HTTP service needs to start is here, and nothing else: the
tickets database, the run store, an optional knowledge-base index, the JWT
secret and how to make a model. ``Settings.from_env`` reads the environment
the way the CLI does (``OPENAI_*`` for the model, ``TETHER_*`` for the rest).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.core.budget import Budget
from tether.models.base import Model

DEFAULT_TOKEN_TTL = 3600.0  # seconds an access token is valid
DEFAULT_MAX_CONCURRENT_RUNS = 256  # runs driven at once; later ones wait their turn
DEFAULT_MAX_BODY_BYTES = 1_000_000
MIN_SECRET_LENGTH = 32  # HS256 wants a key at least as long as its 256-bit output
DEFAULT_TICKETS_DB = Path("tickets.db")
DEFAULT_RUN_DB = Path("tether-runs.db")
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


@dataclass(frozen=True, slots=True)
class Settings:
    """How the service runs. Only ``model_factory`` has no useful default outside production.

    Example::

        settings = Settings(tickets_db=Path("tickets.db"), run_db=Path("runs.db"),
                            jwt_secret=os.environ["TETHER_JWT_SECRET"])
        app = create_app(settings)
    """

    tickets_db: Path = DEFAULT_TICKETS_DB
    run_db: Path = DEFAULT_RUN_DB
    kb_index: Path | None = None
    # None: a random secret per process (tokens stop working at a restart; the log says so).
    jwt_secret: str | None = None
    model_factory: Callable[[], Model] = field(default_factory=openai_model_factory)
    token_ttl: float = DEFAULT_TOKEN_TTL
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    system: str | None = DEFAULT_SYSTEM
    budget: Budget | None = None
    # Keep user and model text in the stored audit events (DESIGN.md §7: off unless asked).
    log_content: bool = False
    static_dir: Path = STATIC_DIR

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None) -> Settings:
        """``TETHER_TICKETS_DB``, ``TETHER_RUN_DB``, ``TETHER_KB_INDEX``, ``TETHER_JWT_SECRET``,
        ``TETHER_TOKEN_TTL``, ``TETHER_LOG_CONTENT``; the model from ``OPENAI_*``."""
        env = os.environ
        kb = env.get("TETHER_KB_INDEX")
        return cls(
            tickets_db=Path(env.get("TETHER_TICKETS_DB") or DEFAULT_TICKETS_DB),
            run_db=Path(env.get("TETHER_RUN_DB") or DEFAULT_RUN_DB),
            kb_index=Path(kb) if kb else None,
            jwt_secret=env.get("TETHER_JWT_SECRET") or None,
            model_factory=openai_model_factory(base_url, model),
            token_ttl=float(env.get("TETHER_TOKEN_TTL") or DEFAULT_TOKEN_TTL),
            log_content=env.get("TETHER_LOG_CONTENT", "").lower() in ("1", "true", "yes"),
        )
