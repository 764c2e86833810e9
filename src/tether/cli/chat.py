"""``tether chat``: a conversation at the terminal, one turn per line.

Tool calls are shown as they happen; a call that needs approval is asked
about inline (y/N). Ctrl-D at the prompt ends the session (exit 0); the
conversation is recorded in the run store, so ``tether chat --continue ID``
or ``tether run PROMPT --continue ID`` goes on with it later.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import click

from tether.cli.common import (
    agent_of,
    api_key_option,
    conversation_setup,
    db_option,
    env_prefix,
    fail,
    given_base_url,
    open_store,
    principal_checked,
    protocol_option,
    say,
    with_settings_options,
)
from tether.cli.render import Renderer, visible
from tether.core.budget import DEFAULT_MAX_STEPS, Budget
from tether.core.errors import TetherError
from tether.core.nesting import utf8
from tether.core.settings import ModelSettings
from tether.drivers.local.runner import Decision
from tether.store import default_path
from tether.tools import Principal

HISTORY_FILE = "chat_history"


def _readline(store_path: Path | str) -> None:
    """Line editing and a history kept beside the run store (a SQLite file's; else the default's), when readline
    is there."""
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        return
    history = (store_path if isinstance(store_path, Path) else default_path()).parent / HISTORY_FILE
    with contextlib.suppress(OSError):
        readline.read_history_file(history)
    atexit.register(_save_history, readline, history)


def _save_history(readline: Any, history: Path) -> None:
    with contextlib.suppress(OSError):
        readline.write_history_file(history)


@click.command()
@click.option("--tools", "toolsets", multiple=True, metavar="NAME_OR_MODULE", help="A toolset (repeatable).")
@click.option("--model", help="Model name [env: OPENAI_MODEL, or ANTHROPIC_MODEL with --protocol anthropic].")
@click.option("--base-url", help="OpenAI-compatible endpoint [env: OPENAI_BASE_URL, or ANTHROPIC_BASE_URL].")
@api_key_option
@protocol_option
@with_settings_options
@click.option("--max-steps", type=click.IntRange(min=1), default=DEFAULT_MAX_STEPS, show_default=True)
@click.option("--files-root", type=click.Path(file_okay=False), help="Root for the files toolset.")
@click.option(
    "--principal", default="local", show_default=True, help="Who the conversation acts for.", callback=principal_checked
)
@click.option(
    "--continue",
    "conversation_id",
    metavar="CONVERSATION",
    help="Go on with a stored conversation, on the model and tools it began with.",
)
@db_option
def chat(
    toolsets: tuple[str, ...],
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    protocol: str | None,
    system: str | None,
    model_settings: ModelSettings | None,
    max_steps: int,
    files_root: str | None,
    principal: str,
    conversation_id: str | None,
    db: str | None,
) -> None:
    """Talk with an agent, turn by turn; approve its calls inline.

    -s and -o hold for the whole session; with --continue, -o goes over the
    conversation's own settings and -s must be the conversation's.

    \b
    Examples:
      tether chat --tools calc
      tether chat --tools calc --protocol responses --model gpt-5-mini
      tether chat --tools calc -s "Answer briefly" -o temperature=0.2
      tether chat --continue 3f2a...
    """
    from tether.toolsets import toolset_reference  # the toolsets load pydantic: not for every start

    root = files_root or os.environ.get("TETHER_FILES_ROOT")
    options = {"model": model, "base_url": base_url, "protocol": protocol, "toolsets": toolsets}
    options |= {"files_root": files_root, "system": system}
    env = env_prefix(None, protocol)
    try:
        setup = {
            "model": model or os.environ.get(f"{env}_MODEL"),
            "base_url": given_base_url(base_url, f"{env}_BASE_URL"),
            "protocol": protocol,
            "stream": False,
            "toolsets": [toolset_reference(t) for t in toolsets],
            "files_root": os.path.abspath(root) if root else None,
            "local_model": None,
            "system": system,
            "settings": model_settings.to_dict() if model_settings is not None else None,
        }
        store = open_store(db)
        if conversation_id:
            setup = conversation_setup(
                store, conversation_id, setup, {k for k, v in options.items() if v}, Principal(principal)
            )
        agent = agent_of(setup, api_key, store, Principal(principal), Budget(max_steps=max_steps))
        conversation = agent.conversation(conversation_id)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    _readline(store.path)
    agent.approver = _ask
    click.echo(f"conversation {conversation.id} (Ctrl-D to leave)")
    asyncio.run(_session(agent, conversation))


async def _ask(call: Any) -> Any:
    # JSON escapes C0 controls but not DEL or C1 (U+009B is a CSI): shown, so the person approves what is there.
    arguments = visible(json.dumps(call.arguments, ensure_ascii=False))
    try:
        answer = await asyncio.to_thread(input, f"  approve {call.tool}({arguments})? [y/N] ")
    except EOFError:
        return Decision(False, "no answer")
    approved = answer.strip().lower() in ("y", "yes")
    return Decision(approved, None if approved else "denied at the terminal")


async def _session(agent: Any, conversation: Any) -> None:
    renderer = Renderer(click.echo)
    try:
        while True:
            try:
                line = await asyncio.to_thread(input, "you> ")
            except EOFError:
                click.echo("")
                return
            if not line.strip():
                continue
            if not utf8(line):  # bytes that were not UTF-8 come in as lone surrogates
                click.echo("error: that line is not UTF-8 text; nothing was sent", err=True)
                continue
            try:
                result = await conversation.send(line, on_event=renderer)
            except TetherError as exc:
                say(f"error: {exc}")
                continue
            if result.output is not None:
                click.echo(visible(f"agent> {result.output}"))
            else:
                click.echo(visible(f"(turn ended {result.status.value}: {result.reason})"))
    finally:
        await agent.aclose()
