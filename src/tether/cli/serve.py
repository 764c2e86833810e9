"""``tether serve``: any Agent (``tether serve agent.py:agent``), or the ticket-support demo; its database and KB."""

from __future__ import annotations

from pathlib import Path

import click

from tether.cli.common import fail, seconds
from tether.core.errors import TetherError

AGENT_ONLY = ("target", "auth", "a2a", "mcp")  # the parameters for a served agent; the rest are the ticket demo's too


@click.command()
@click.argument("target", required=False, metavar="[PATH_OR_MODULE:AGENT]")
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
@click.option(
    "--auth",
    metavar="SPEC",
    help="With an agent: who the callers are (API keys, JWTs; `none` only on loopback) [default: none].",
)
@click.option(
    "--a2a", is_flag=True, help="With an agent: serve it over A2A too (/a2a; its card at /.well-known/agent-card.json)."
)
@click.option("--mcp", is_flag=True, help="With an agent: serve it as one MCP tool over streamable HTTP too (/mcp).")
def serve(
    target: str | None,
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
    auth: str | None,
    a2a: bool,
    mcp: bool,
) -> None:
    """Serve an Agent over HTTP, or (without a target) the ticket-support demo (FastAPI + uvicorn).

    With PATH_OR_MODULE:AGENT (file.py:name or package.module:name, as
    uvicorn takes apps; the name is an Agent or a function returning one)
    the agent's runs, conversations and approvals are served as an HTTP
    API (OpenAPI at /openapi.json): each caller sees only its own, a call
    that needs approval waits in the run store for a caller with the
    approver role. Runs are durable as below. With --a2a the agent is an A2A
    agent too (needs tether[a2a]), with --mcp an MCP tool (needs tether[mcp]),
    both behind the same --auth.

    Without a target: the ticket-support API and web page.

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
      tether serve agent.py:agent
      tether serve agent.py:agent --auth keys --a2a --mcp
      tether serve myapp.agents:support --db postgresql://tether@db/tether --workers 4 --auth SPEC
      tether tickets seed --db tickets.db && tether kb index examples/kb --index kb.npz
      tether serve --tickets-db tickets.db --kb-index kb.npz --base-url http://127.0.0.1:8080/v1 --model m
      tether serve --db postgresql://tether@db/tether --workers 4 --tickets-db tickets.db ...
    """
    if target is not None:
        demo = {"--base-url": base_url, "--model": model, "--tickets-db": tickets_db, "--kb-index": kb_index,
                "--seed": seed}  # fmt: skip
        for option, value in demo.items():
            if value:
                raise click.UsageError(f"{option} is for the ticket demo (tether serve without a target), not an agent")
        _serve_agent(target, host, port, run_db, workers, auth or "none", lease_seconds, a2a=a2a, mcp=mcp)
        return
    for option, value in {"--auth": auth, "--a2a": a2a, "--mcp": mcp}.items():
        if value:
            raise click.UsageError(f"{option} is for a served agent (tether serve PATH_OR_MODULE:AGENT)")
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


def _serve_agent(
    target: str,
    host: str,
    port: int,
    run_db: str | None,
    workers: int,
    auth: str,
    lease_seconds: float | None,
    *,
    a2a: bool,
    mcp: bool,
) -> None:
    try:
        from tether.serve.launch import serve as serve_agent
    except ImportError as exc:
        fail(f"serving an agent needs the server extra: pip install 'tether[server]' ({exc.name} is missing)")
    try:
        serve_agent(target, host=host, port=port, store=run_db, workers=workers, auth=auth,
                    lease_seconds=lease_seconds, a2a=a2a, mcp=mcp)  # fmt: skip
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
