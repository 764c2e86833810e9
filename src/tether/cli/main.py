"""The ``tether`` command.

Every run's status maps to one exit code (``EXIT_CODES``), so scripts can
tell a completed run from a truncated or refused one without parsing text.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, NoReturn

import click

from tether.core.budget import DEFAULT_MAX_STEPS, Budget
from tether.core.errors import ConfigurationError, TetherError
from tether.core.machine import Status

EXIT_CODES: dict[Status, int] = {
    Status.COMPLETED: 0,
    Status.MAX_STEPS: 10,
    Status.BUDGET_EXHAUSTED: 11,
    Status.TRUNCATED: 12,
    Status.CONTENT_FILTERED: 13,
    Status.PROTOCOL_ERROR: 14,
    Status.LOOP_DETECTED: 15,
    Status.REPAIR_EXHAUSTED: 16,
    Status.MODEL_ERROR: 17,
    Status.CANCELLED: 18,
    Status.AWAITING_APPROVAL: 20,
    Status.AWAITING_RECONCILIATION: 21,
}
EXIT_INTERNAL = 1
EXIT_CONFIGURATION = ConfigurationError.exit_code


def fail(message: str, code: int = EXIT_CONFIGURATION) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.group()
@click.version_option(package_name="tether")
def cli() -> None:
    """tether runs tool-calling agents: the model proposes; the host disposes."""


def _tools(names: tuple[str, ...], files_root: str | None) -> list[Any]:
    from tether.toolsets import load_toolset

    tools: list[Any] = []
    for name in names:
        tools.extend(load_toolset(name, files_root=files_root))
    return tools


def _endpoint(model: str | None, base_url: str | None, api_key: str | None) -> tuple[str, str | None, str | None]:
    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    model = model or os.environ.get("OPENAI_MODEL")
    if not base_url and not api_key:
        raise ConfigurationError(
            "no model endpoint configured: set OPENAI_BASE_URL and OPENAI_MODEL for an OpenAI-compatible "
            "server, or OPENAI_API_KEY and OPENAI_MODEL for api.openai.com (or pass --base-url/--model)"
        )
    if not model:
        raise ConfigurationError("no model named: set OPENAI_MODEL or pass --model")
    return model, base_url, api_key


@cli.command()
@click.argument("prompt")
@click.option(
    "--tools",
    "toolsets",
    multiple=True,
    metavar="NAME_OR_MODULE",
    help="A toolset: calc, files, clock, or an importable module (repeatable).",
)
@click.option("--model", help="Model name [env: OPENAI_MODEL].")
@click.option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 [env: OPENAI_BASE_URL].")
@click.option("--api-key", help="API key [env: OPENAI_API_KEY].")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_STEPS,
    show_default=True,
    help="Model requests allowed in this run.",
)
@click.option(
    "--files-root",
    type=click.Path(file_okay=False),
    help="Root for the files toolset [env: TETHER_FILES_ROOT].",
)
@click.option("--stream", is_flag=True, help="Stream the model's replies.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the readable steps.")
def run(
    prompt: str,
    toolsets: tuple[str, ...],
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    max_steps: int,
    files_root: str | None,
    stream: bool,
    as_json: bool,
) -> None:
    """Run PROMPT as an agent with the given tools.

    \b
    Examples:
      tether run "What is 248 times 15?" --tools calc
      tether run "List the files" --tools files --files-root ./docs --json

    Exit status: 0 completed, 3 configuration error, 10 max_steps,
    11 budget_exhausted, 12 truncated, 13 content_filtered, 14 protocol_error,
    15 loop_detected, 16 repair_exhausted, 17 model_error, 18 cancelled,
    20 awaiting_approval.
    """
    from tether.cli.render import Renderer
    from tether.models.openai_chat import OpenAIChatModel
    from tether.runner import Agent

    try:
        tools = _tools(toolsets, files_root)
        name, url, key = _endpoint(model, base_url, api_key)
        chat = OpenAIChatModel(name, base_url=url, api_key=key, stream=stream)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    agent = Agent(chat, tools, budget=Budget(max_steps=max_steps))
    renderer = None if as_json else Renderer(click.echo, stream=stream)

    async def go() -> Any:
        try:
            return await agent.run(prompt, on_event=renderer)
        finally:
            await agent.aclose()

    try:
        result = asyncio.run(go())
    except KeyboardInterrupt:
        fail("interrupted", EXIT_CODES[Status.CANCELLED])
    if as_json:
        click.echo(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        assert renderer is not None
        renderer.finish(result)
    if result.status is not Status.COMPLETED:
        click.echo(f"error: run {result.run_id} ended {result.status.value}: {result.reason}", err=True)
    sys.exit(EXIT_CODES.get(result.status, EXIT_INTERNAL))


@cli.command()
@click.argument("toolsets", nargs=-1, required=True, metavar="NAME_OR_MODULE...")
@click.option("--files-root", type=click.Path(file_okay=False), help="Root for the files toolset.")
def tools(toolsets: tuple[str, ...], files_root: str | None) -> None:
    """Print the JSON Schemas the model is offered for each tool.

    \b
    Example:
      tether tools calc clock
    """
    try:
        found = _tools(toolsets, files_root or os.environ.get("TETHER_FILES_ROOT") or ".")
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    for t in found:
        kind = "read-only" if t.read_only else "side-effecting"
        click.echo(f"{t.name} ({kind})")
        if t.description:
            click.echo(f"  {t.description.splitlines()[0]}")
        click.echo("  " + json.dumps(t.parameters, indent=2).replace("\n", "\n  "))


@cli.command("self-check")
def self_check() -> None:
    """Run offline scenarios against tether's own fake server and report each."""
    from tether.cli.selfcheck import run_self_check

    ok = asyncio.run(run_self_check(click.echo))
    if not ok:
        fail("self-check failed", EXIT_INTERNAL)
    click.echo("self-check passed")


def main() -> None:
    try:
        cli(standalone_mode=True)
    except TetherError as exc:  # anything a command did not map itself
        fail(str(exc), exc.exit_code)
