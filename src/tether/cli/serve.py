"""Commands of the ticket-support service: serve it, seed its database, index its knowledge base."""

from __future__ import annotations

from pathlib import Path

import click

from tether.cli.common import fail, seconds
from tether.core.errors import TetherError


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
        from tether.server.launch import serve as serve_tickets
    except ImportError as exc:
        fail(f"the service needs the server extra: pip install 'tether[server]' ({exc.name} is missing)")
    try:
        serve_tickets(
            host=host,
            port=port,
            base_url=base_url,
            model=model,
            tickets_db=tickets_db,
            run_db=run_db,
            kb_index=kb_index,
            seed=seed,
            workers=workers,
            lease_seconds=lease_seconds,
        )
    except TetherError as exc:
        fail(str(exc), exc.exit_code)


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
