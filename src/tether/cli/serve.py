"""``tether serve``: any Agent over HTTP (``tether serve agent.py:agent``)."""

from __future__ import annotations

import click

from tether.cli.common import elicitation_option, fail, seconds
from tether.cli.temporal import task_queue_option, temporal_option
from tether.core.errors import TetherError

# Where the ticket-support demo went: an application built on tether.serve, outside the library.
TICKETS_EXAMPLE = "examples/tickets/README.md"


@click.command()
@click.argument("target", required=False, metavar="PATH_OR_MODULE:AGENT")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--db",
    "--run-db",
    "run_db",
    metavar="FILE|URL",
    help="The run store: a SQLite file (one process) or a postgresql:// url (any number of processes) "
    "[env: TETHER_DB].",
)
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
    help="Who the callers are (API keys, JWTs; `none` only on loopback) [default: none].",
)
@click.option(
    "--a2a", is_flag=True, help="With an agent: serve it over A2A too (/a2a; its card at /.well-known/agent-card.json)."
)
@click.option("--mcp", is_flag=True, help="With an agent: serve it as one MCP tool over streamable HTTP too (/mcp).")
@elicitation_option(
    "With --mcp: how long an approver's MCP client has to answer when asked to approve a call; unanswered, the"
    " run waits for a decision over HTTP (POST /runs/RUN_ID/approvals/CALL_ID)"
)
@click.option(
    "--engine",
    type=click.Choice(["local", "temporal"]),
    default="local",
    show_default=True,
    help="Drive the runs here, or as Temporal workflows on `tether worker` processes (their model and tools).",
)
@temporal_option
@task_queue_option
def serve(
    target: str | None,
    host: str,
    port: int,
    run_db: str | None,
    workers: int,
    lease_seconds: float | None,
    auth: str | None,
    a2a: bool,
    mcp: bool,
    elicitation_seconds: float | None,
    engine: str,
    temporal_address: str | None,
    task_queue: str,
) -> None:
    """Serve an Agent over HTTP (FastAPI + uvicorn).

    PATH_OR_MODULE:AGENT is file.py:name or package.module:name, as
    uvicorn takes apps; the name is an Agent or a function returning one.
    The agent's runs, conversations and approvals are served as an HTTP
    API (OpenAPI at /openapi.json): each caller sees only its own, a call
    that needs approval waits in the run store for a caller with the
    approver role. With --a2a the agent is an A2A agent too (needs
    tether[a2a]), with --mcp an MCP tool (needs tether[mcp]), both behind
    the same --auth.

    Runs start with the embedded SQLite run store and no other service.
    With a postgresql:// run store any number of processes (--workers N,
    or several hosts) share the runs: each run is driven by one of them,
    and the runs of a process that dies are taken over by another at once
    (its locks go with it); a process that is alive but stops renewing
    loses them when its lease (--lease-seconds, default 30) expires. On
    SIGTERM the runs in progress are handed on, not cancelled
    (TETHER_SHUTDOWN_GRACE, default 20 s, for the tool calls running to
    finish).

    With --engine temporal each run is a Temporal workflow driven by the
    `tether worker` processes polling --task-queue, with their model and
    tools (as for `tether run --engine temporal`); they must share the run
    store with this service. Decisions and cancels go to the workflow.
    What a workflow cannot carry (sub-agent tools, handoffs, an output
    type, ...) is refused at start-up; conversations answer 501 (and
    --a2a, whose messages are conversation turns, is refused).

    The ticket-support demo is an application built on this, outside the
    library: see examples/tickets/README.md.

    \b
    Example:
      tether serve agent.py:agent
      tether serve agent.py:agent --auth keys --a2a --mcp
      tether serve myapp.agents:support --db postgresql://tether@db/tether --workers 4 --auth SPEC
      tether serve agent.py:agent --engine temporal --temporal 127.0.0.1:7233 --db runs.db
    """
    if target is None:
        raise click.UsageError(
            "name the agent to serve: tether serve PATH_OR_MODULE:AGENT (e.g. agent.py:agent); "
            f"the ticket-support demo is an example now: see {TICKETS_EXAMPLE}"
        )
    _serve_agent(target, host, port, run_db, workers, auth or "none", lease_seconds, a2a=a2a, mcp=mcp,
                 elicitation_seconds=elicitation_seconds, engine=engine, temporal=temporal_address,
                 task_queue=task_queue)  # fmt: skip


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
    elicitation_seconds: float | None,
    engine: str,
    temporal: str | None,
    task_queue: str,
) -> None:
    try:
        from tether.serve.launch import serve as serve_agent
    except ImportError as exc:
        fail(f"serving an agent needs the server extra: pip install 'tether[server]' ({exc.name} is missing)")
    try:
        serve_agent(target, host=host, port=port, store=run_db, workers=workers, auth=auth,
                    lease_seconds=lease_seconds, a2a=a2a, mcp=mcp, elicitation_seconds=elicitation_seconds,
                    engine=engine, temporal=temporal, task_queue=task_queue)  # fmt: skip
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
