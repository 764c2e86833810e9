"""Starting the service: its settings from options over the environment, then uvicorn, in one process or several.

``python -m tickets_app`` (``main`` here) starts it with ``serve``, and reports a ``TetherError`` with the
error's exit code. Nothing here imports tether's CLI.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import uvicorn

from tether.core.errors import ConfigurationError, TetherError
from tether.serve.service import open_run_store
from tickets_app.app import create_app
from tickets_app.db import TicketsDB
from tickets_app.seed_data import seed as seed_tickets
from tickets_app.settings import Settings, run_store

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def settings_from(
    *,
    base_url: str | None = None,
    model: str | None = None,
    tickets_db: Path | None = None,
    run_db: str | None = None,
    kb_index: Path | None = None,
    lease_seconds: float | None = None,
) -> Settings:
    """``Settings.from_env``, with what the options name over it."""
    settings = Settings.from_env(base_url=base_url, model=model)
    return replace(
        settings,
        tickets_db=tickets_db or settings.tickets_db,
        run_db=run_store(run_db) if run_db else settings.run_db,
        kb_index=kb_index or settings.kb_index,
        lease_seconds=lease_seconds or settings.lease_seconds,
    )


def serve(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    base_url: str | None = None,
    model: str | None = None,
    tickets_db: Path | None = None,
    run_db: str | None = None,
    kb_index: Path | None = None,
    seed: bool = False,
    workers: int = 1,
    lease_seconds: float | None = None,
) -> None:
    """Serve until stopped; a configuration error is raised before anything is written or listens.

    More than one worker process needs a run store they can share (PostgreSQL); each worker builds the
    app from the environment (``main_app``), so what the options say is put there first.
    """
    log_level = os.environ.get("TETHER_LOG_LEVEL", "info")
    settings = settings_from(
        base_url=base_url,
        model=model,
        tickets_db=tickets_db,
        run_db=run_db,
        kb_index=kb_index,
        lease_seconds=lease_seconds,
    )
    if workers > 1 and not settings.shared_store:
        raise ConfigurationError(
            f"--workers {workers} needs a run store several processes can share: "
            f"--db postgresql://... (or TETHER_RUN_DB); the SQLite file {settings.run_db} serves one process"
        )
    if seed:
        with TicketsDB(settings.tickets_db) as db:
            seed_tickets(db)
    if workers == 1:
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level)
        return
    open_run_store(settings).close()  # migrated once, and a wrong url said here rather than N times
    _export(settings, base_url, model)
    uvicorn.run("tickets_app.app:main_app", factory=True, workers=workers, host=host, port=port, log_level=log_level)


def _export(settings: Settings, base_url: str | None, model: str | None) -> None:
    """Put the settings the options gave into the environment the worker processes inherit."""
    env = os.environ
    env["TETHER_TICKETS_DB"] = str(settings.tickets_db)
    env["TETHER_RUN_DB"] = str(settings.run_db)
    env["TETHER_LEASE_SECONDS"] = repr(settings.lease_seconds)
    if settings.kb_index is not None:
        env["TETHER_KB_INDEX"] = str(settings.kb_index)
    if base_url:
        env["OPENAI_BASE_URL"] = base_url
    if model:
        env["OPENAI_MODEL"] = model
    if not settings.jwt_secret:
        print(
            "warning: TETHER_JWT_SECRET is not set: the workers share a random secret made now; "
            "tokens stop working when the service restarts",
            file=sys.stderr,
            flush=True,
        )
        env["TETHER_JWT_SECRET"] = secrets.token_urlsafe(48)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{value:g} is not a number of seconds above 0")
    return value


def _workers(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def parser() -> argparse.ArgumentParser:
    """The options of ``python -m tickets_app``."""
    options = argparse.ArgumentParser(
        prog="python -m tickets_app",
        description="Serve the ticket-support API and web page.",
        epilog="python -m tickets_app seed --db FILE writes the demo users and tickets; "
        "python -m tickets_app index FOLDER --index FILE indexes the knowledge base (--help on each).",
    )
    options.add_argument("--host", default=DEFAULT_HOST, help="default: %(default)s")
    options.add_argument("--port", type=int, default=DEFAULT_PORT, help="default: %(default)s")
    options.add_argument("--base-url", help="The model's OpenAI-compatible endpoint [env: OPENAI_BASE_URL].")
    options.add_argument("--model", help="The model's name [env: OPENAI_MODEL].")
    options.add_argument("--tickets-db", type=Path, metavar="FILE", help="[env: TETHER_TICKETS_DB]")
    options.add_argument(
        "--db",
        "--run-db",
        dest="run_db",
        metavar="FILE|URL",
        help="The run store: a SQLite file or a postgresql:// url [env: TETHER_RUN_DB, else TETHER_DB].",
    )
    options.add_argument("--kb-index", type=Path, metavar="FILE", help="[env: TETHER_KB_INDEX]")
    options.add_argument("--seed", action="store_true", help="Write the demo users and tickets first.")
    options.add_argument(
        "--workers", type=_workers, default=1, help="Processes serving the port; more than one needs PostgreSQL."
    )
    options.add_argument(
        "--lease-seconds",
        type=_seconds,
        metavar="SECONDS",
        help="How long a live process that stops renewing its lease on a run keeps it [env: TETHER_LEASE_SECONDS].",
    )
    return options


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tickets_app [options]`` serves; ``... seed [--db FILE]`` and ``... index FOLDER [--index FILE]``
    write the demo data and the KB index. A ``TetherError`` exits with its code and message, never a traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["seed"]:
            _seed(args[1:])
        elif args[:1] == ["index"]:
            _index(args[1:])
        else:
            serve(**vars(parser().parse_args(args)))
    except TetherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def _seed(argv: Sequence[str]) -> None:
    options = argparse.ArgumentParser(
        prog="python -m tickets_app seed",
        description="Create the tickets database with demo users (alice, bob, carol, dave; password <name>-pass).",
    )
    options.add_argument("--db", type=Path, default=Path("tickets.db"), metavar="FILE", help="default: %(default)s")
    db = options.parse_args(argv).db
    with TicketsDB(db) as tickets:
        seed_tickets(tickets)
    print(f"seeded {db}: users alice, bob (customers), carol (agent), dave (admin)")


def _index(argv: Sequence[str]) -> None:
    options = argparse.ArgumentParser(
        prog="python -m tickets_app index",
        description="Index a folder of Markdown documents for search_kb (BM25 + sentence embeddings; the kb extra).",
    )
    options.add_argument("folder", type=Path)
    options.add_argument("--index", type=Path, default=Path("kb.npz"), metavar="FILE", help="default: %(default)s")
    args = options.parse_args(argv)
    from tickets_app.kb import index_folder  # torch and numpy load only to index

    stats = index_folder(args.folder, args.index)
    print(f"indexed {stats.documents} document(s), {stats.chunks} chunk(s) into {stats.index_path}")
