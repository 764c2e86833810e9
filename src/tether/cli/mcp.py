"""``tether mcp ...``: tether toolsets served to MCP clients (``tether run --mcp`` is in ``tether.cli.common``)."""

from __future__ import annotations

import os

import click

from tether.cli.common import EXIT_INTERNAL, elicitation_option, fail, principal_checked
from tether.core.errors import ConfigurationError, TetherError
from tether.tools.context import Principal


@click.group()
def mcp() -> None:
    """Model Context Protocol: offer tether toolsets to MCP clients."""


@mcp.command()
@click.option(
    "--tools",
    "toolsets",
    multiple=True,
    required=True,
    metavar="NAME_OR_MODULE",
    help="A toolset: calc, files, clock, or an importable module (repeatable).",
)
@click.option(
    "--files-root",
    type=click.Path(file_okay=False),
    help="Root for the files toolset [env: TETHER_FILES_ROOT].",
)
@click.option(
    "--principal",
    "principal_id",
    default="local",
    show_default=True,
    metavar="ID",
    callback=principal_checked,
    help="Who the calls run for (a tool's context.principal.id).",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    metavar="SCOPE",
    help="A scope the principal holds (repeatable); a tool that declares scopes is listed only when the "
    "principal holds them all. Default: none. '*' holds every scope.",
)
@elicitation_option(
    "How long the client's user has to answer when asked to approve a call; unanswered, the call is denied"
)
def serve(
    toolsets: tuple[str, ...],
    files_root: str | None,
    principal_id: str,
    scopes: tuple[str, ...],
    elicitation_seconds: float | None,
) -> None:
    """Serve toolsets as an MCP server over stdin/stdout.

    Each call is validated strictly by tether before the tool runs; a refused
    call is an isError result starting with its error code. The server acts
    for one principal (--principal, --scope): by default `local` holding no
    scope, so only tools that declare no scopes are listed. A tool that needs
    approval is listed only to a client that supports MCP elicitation, whose
    user is then asked to approve each such call with its exact arguments
    (declined, or not answered within --elicitation-seconds: denied); other
    clients do not see it.

    \b
    Examples (an MCP client's server command):
      tether mcp serve --tools calc
      tether mcp serve --tools my_tools --principal alice --scope tickets:write
    """
    try:
        import anyio

        from tether.mcp.server import DEFAULT_ELICITATION_SECONDS, serve_stdio
        from tether.toolsets import load_toolset
    except ImportError:
        fail("tether mcp serve needs the mcp extra: pip install 'tether[mcp]'", ConfigurationError.exit_code)
    if not principal_id.strip():
        fail("--principal must not be empty")
    principal = Principal(principal_id, scopes=frozenset(scopes))
    try:
        root = files_root or os.environ.get("TETHER_FILES_ROOT")
        tools = [t for name in toolsets for t in load_toolset(name, files_root=root)]
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    from tether.mcp.stdio import MessageTooLarge

    try:
        within = DEFAULT_ELICITATION_SECONDS if elicitation_seconds is None else elicitation_seconds
        anyio.run(lambda: serve_stdio(tools, principal=principal, elicitation_seconds=within))
    except MessageTooLarge as exc:
        fail(f"tether mcp serve: {exc}", EXIT_INTERNAL)
