"""Commands of the ticket-support service: serve it, seed its database, index its knowledge base."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import click

from tether.cli.common import fail
from tether.core.errors import TetherError


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--base-url", help="The model's OpenAI-compatible endpoint [env: OPENAI_BASE_URL].")
@click.option("--model", help="The model's name [env: OPENAI_MODEL].")
@click.option("--tickets-db", type=click.Path(dir_okay=False, path_type=Path), help="[env: TETHER_TICKETS_DB]")
@click.option("--run-db", type=click.Path(dir_okay=False, path_type=Path), help="[env: TETHER_RUN_DB]")
@click.option("--kb-index", type=click.Path(dir_okay=False, path_type=Path), help="[env: TETHER_KB_INDEX]")
@click.option("--seed", is_flag=True, help="Write the demo users and tickets first.")
def serve(
    host: str,
    port: int,
    base_url: str | None,
    model: str | None,
    tickets_db: Path | None,
    run_db: Path | None,
    kb_index: Path | None,
    seed: bool,
) -> None:
    """Serve the ticket-support API and web page (FastAPI + uvicorn).

    Runs start with the embedded SQLite run store and no other service. Set
    TETHER_JWT_SECRET (32+ characters) so sign-ins survive a restart.

    \b
    Example:
      tether tickets seed --db tickets.db && tether kb index examples/kb --index kb.npz
      tether serve --tickets-db tickets.db --kb-index kb.npz --base-url http://127.0.0.1:8080/v1 --model m
    """
    try:
        import uvicorn

        from tether.server.app import create_app
        from tether.server.settings import Settings
        from tether.tickets.db import TicketsDB
        from tether.tickets.db import seed as seed_tickets
    except ImportError as exc:
        fail(f"the service needs the server extra: pip install 'tether[server]' ({exc.name} is missing)")
    try:
        settings = Settings.from_env(base_url=base_url, model=model)
        settings = replace(
            settings,
            tickets_db=tickets_db or settings.tickets_db,
            run_db=run_db or settings.run_db,
            kb_index=kb_index or settings.kb_index,
        )
        if seed:
            with TicketsDB(settings.tickets_db) as db:
                seed_tickets(db)
        app = create_app(settings)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    uvicorn.run(app, host=host, port=port, log_level=os.environ.get("TETHER_LOG_LEVEL", "info"))


@click.group()
def tickets() -> None:
    """The ticket-support service's database."""


@tickets.command("seed")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=Path("tickets.db"), show_default=True)
def seed_command(db: Path) -> None:
    """Create the tickets database with demo users (alice, bob, carol, dave; password <name>-pass)."""
    from tether.tickets.db import TicketsDB, seed

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
