"""Commands of the ticket-support service: serve it, seed its database, index its knowledge base."""

from __future__ import annotations

import os
import secrets
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tether.cli.common import fail, seconds
from tether.core.errors import TetherError

if TYPE_CHECKING:
    from tether.server.settings import Settings


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--base-url", help="The model's OpenAI-compatible endpoint [env: OPENAI_BASE_URL].")
@click.option("--model", help="The model's name [env: OPENAI_MODEL].")
@click.option("--tickets-db", type=click.Path(dir_okay=False, path_type=Path), help="[env: TETHER_TICKETS_DB]")
@click.option(
    "--db",
    "--run-db",
    "run_db",
    metavar="FILE|URL",
    help="The run store: a SQLite file (one process) or a postgresql:// url (any number of processes) "
    "[env: TETHER_RUN_DB, else TETHER_DB; default tether-runs.db].",
)
@click.option("--kb-index", type=click.Path(dir_okay=False, path_type=Path), help="[env: TETHER_KB_INDEX]")
@click.option("--seed", is_flag=True, help="Write the demo users and tickets first.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes serving the port; more than one needs a postgresql:// run store.",
)
@click.option(
    "--lease-seconds",
    type=float,
    callback=seconds(),
    metavar="SECONDS",
    help="How long a live process that stops renewing its lease on a run keeps it (a process that dies lets go"
    " at once) [env: TETHER_LEASE_SECONDS; default: 30].",
)
def serve(
    host: str,
    port: int,
    base_url: str | None,
    model: str | None,
    tickets_db: Path | None,
    run_db: str | None,
    kb_index: Path | None,
    seed: bool,
    workers: int,
    lease_seconds: float | None,
) -> None:
    """Serve the ticket-support API and web page (FastAPI + uvicorn).

    Runs start with the embedded SQLite run store and no other service. Set
    TETHER_JWT_SECRET (32+ characters) so sign-ins survive a restart and
    work on every process. With a postgresql:// run store any number of
    processes (--workers N, or several hosts) share the runs: each run is
    driven by one of them, and the runs of a process that dies are taken
    over by another at once (its locks go with it); a process that is
    alive but stops renewing loses them when its lease (--lease-seconds,
    default 30) expires. On SIGTERM the runs in progress are handed on,
    not cancelled (TETHER_SHUTDOWN_GRACE, default 20 s, for the tool calls
    running to finish).

    \b
    Example:
      tether tickets seed --db tickets.db && tether kb index examples/kb --index kb.npz
      tether serve --tickets-db tickets.db --kb-index kb.npz --base-url http://127.0.0.1:8080/v1 --model m
      tether serve --db postgresql://tether@db/tether --workers 4 --tickets-db tickets.db ...
    """
    try:
        import uvicorn

        from tether.server.app import create_app
        from tether.server.runs import open_run_store
        from tether.server.settings import Settings, run_store
        from tether.tickets.db import TicketsDB
        from tether.tickets.seed_data import seed as seed_tickets
    except ImportError as exc:
        fail(f"the service needs the server extra: pip install 'tether[server]' ({exc.name} is missing)")
    log_level = os.environ.get("TETHER_LOG_LEVEL", "info")
    try:
        settings = Settings.from_env(base_url=base_url, model=model)
        settings = replace(
            settings,
            tickets_db=tickets_db or settings.tickets_db,
            run_db=run_store(run_db) if run_db else settings.run_db,
            kb_index=kb_index or settings.kb_index,
            lease_seconds=lease_seconds or settings.lease_seconds,
        )
        if workers > 1 and not settings.shared_store:
            fail(
                f"--workers {workers} needs a run store several processes can share: "
                f"--db postgresql://... (or TETHER_RUN_DB); the SQLite file {settings.run_db} serves one process"
            )
        if seed:
            with TicketsDB(settings.tickets_db) as db:
                seed_tickets(db)
        if workers == 1:
            app = create_app(settings)
        else:
            open_run_store(settings).close()  # migrated once, and a wrong url said here rather than N times
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level=log_level)
        return
    # Each worker process builds the app from the environment (main_app): hand it what the options say.
    _export(settings, base_url, model)
    uvicorn.run("tether.server.app:main_app", factory=True, workers=workers, host=host, port=port, log_level=log_level)


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
        click.echo(
            "warning: TETHER_JWT_SECRET is not set: the workers share a random secret made now; "
            "tokens stop working when the service restarts",
            err=True,
        )
        env["TETHER_JWT_SECRET"] = secrets.token_urlsafe(48)


@click.group()
def tickets() -> None:
    """The ticket-support service's database."""


@tickets.command("seed")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=Path("tickets.db"), show_default=True)
def seed_command(db: Path) -> None:
    """Create the tickets database with demo users (alice, bob, carol, dave; password <name>-pass)."""
    from tether.tickets.db import TicketsDB
    from tether.tickets.seed_data import seed

    try:
        with TicketsDB(db) as tickets_db:
            seed(tickets_db)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    click.echo(f"seeded {db}: users alice, bob (customers), carol (agent), dave (admin)")


@click.group()
def kb() -> None:
    """The knowledge base the agent searches."""


@kb.command("index")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--index", "index_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("kb.npz"), show_default=True
)
def index_command(folder: Path, index_path: Path) -> None:
    """Index a folder of Markdown documents for search_kb (BM25 + sentence embeddings)."""
    from tether.tickets.kb import index_folder

    try:
        stats = index_folder(folder, index_path)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    click.echo(f"indexed {stats.documents} document(s), {stats.chunks} chunk(s) into {stats.index_path}")
