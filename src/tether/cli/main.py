"""The ``tether`` command: the group, assembled from the commands' modules.

Each command lives in its own module (``run``, ``chat``, ``runs``, ``eval``,
``serve``, ``temporal``, ``mcp``, ``keys``) and takes what they share from
``tether.cli.common``; none imports this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

import click

from tether.cli.chat import chat
from tether.cli.common import EXIT_INTERNAL, fail, load_tools, report_failure
from tether.cli.eval import eval_command
from tether.cli.keys import keys
from tether.cli.mcp import mcp
from tether.cli.run import resume, run
from tether.cli.runs import approve, deny, reconcile, runs
from tether.cli.serve import serve
from tether.cli.temporal import dev_server, worker
from tether.core.errors import TetherError
from tether.core.nesting import utf8


class _Tether(click.Group):
    """The ``tether`` group: with ``--json``, a bad value, a missing argument or a conflict in a command's words
    is the same ``{"error": ...}`` object on stdout as any other failure (exit 2), not click's usage text.

    An option the command does not know is still click's usage message (docs/guides/cli.md); so is anything
    after ``--``, where ``--json`` is a word, not the option.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tether.words"] = list(args)  # every command's context shares the meta of the root
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption:
            raise
        except click.UsageError as exc:
            if exc.ctx is None or not _asks_json(exc.ctx):
                raise
            report_failure(exc.format_message(), exc.exit_code, as_json=True)
            ctx.exit(exc.exit_code)


def _asks_json(ctx: click.Context) -> bool:
    """Whether the command ``ctx`` is for takes ``--json`` and its words give it before any ``--``."""
    words: list[str] = ctx.meta.get("tether.words", [])
    words = words[: words.index("--")] if "--" in words else words
    return "--json" in words and any(param.name == "as_json" for param in ctx.command.params)


@click.group(cls=_Tether)
@click.version_option(package_name="tether")
def cli() -> None:
    """tether runs tool-calling agents: the model proposes; the host disposes."""


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
        found = load_tools(toolsets, files_root or os.environ.get("TETHER_FILES_ROOT") or ".")
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    for t in found:
        kind = "read-only" if t.read_only else "side-effecting"
        if t.untrusted_output:
            kind += ", untrusted output: taints the run"
        if t.sinks is not None:  # argument provenance: what a tainted run must trace to trusted text
            kind += f", sinks: {', '.join(sorted(t.sinks)) or 'none'}"
        click.echo(f"{t.name} ({kind})")
        if t.description:
            click.echo(f"  {t.description.splitlines()[0]}")
        click.echo("  " + json.dumps(t.parameters, indent=2).replace("\n", "\n  "))


@cli.command("self-check")
def self_check() -> None:
    """Run offline scenarios against tether's own fake server and report each."""
    from tether.cli.selfcheck import run_self_check  # the fake server and the HTTP model: aiohttp

    ok = asyncio.run(run_self_check(click.echo))
    if not ok:
        fail("self-check failed", EXIT_INTERNAL)
    click.echo("self-check passed")


cli.add_command(run)
cli.add_command(resume)
cli.add_command(runs)
cli.add_command(chat)
cli.add_command(serve)
cli.add_command(approve)
cli.add_command(deny)
cli.add_command(reconcile)
cli.add_command(eval_command)
cli.add_command(mcp)
cli.add_command(worker)
cli.add_command(dev_server)
cli.add_command(keys)


def main() -> None:
    for at, word in enumerate(sys.argv[1:], start=1):
        if not utf8(word):  # bytes that were not UTF-8 come in as lone surrogates
            fail(f"argument {at} is not UTF-8 text", 2)
    try:
        try:
            cli(standalone_mode=True)
        except TetherError as exc:  # anything a command did not map itself
            fail(str(exc), exc.exit_code)
    except SystemExit as exc:
        _past_temporal(exc.code)
        raise


def _past_temporal(code: object) -> None:
    """Exit with ``code`` now, when the Temporal SDK was loaded: its Rust threads can outlive the interpreter's
    teardown and abort it (SIGABRT, "PyGILState_Release: thread state ... must be current", temporalio/sdk-python
    issue 300), turning a clean exit 3 into a crash. What ``atexit`` holds runs first; the teardown is skipped."""
    if "temporalio.bridge.temporal_sdk_bridge" not in sys.modules:
        return
    import atexit

    if isinstance(code, str):  # sys.exit("message"), as the interpreter would show it
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else 0 if code is None else 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
