"""``tether run`` and ``tether resume``: drive a run in this process, print it, exit with its status's code.

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

from tether.cli.common import (
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_NOT_WAITING,
    agent_of,
    api_key_option,
    conversation_setup,
    db_option,
    env_prefix,
    fail,
    given_base_url,
    json_option,
    open_store,
    principal_checked,
    protocol_option,
    say,
    with_mcp_options,
    with_settings_options,
)
from tether.cli.render import Renderer
from tether.cli.temporal import run_on_temporal, task_queue_option, temporal_option
from tether.core.budget import DEFAULT_MAX_STEPS, Budget
from tether.core.errors import ConfigurationError, TetherError
from tether.core.machine import Status
from tether.core.redact import redact
from tether.core.settings import ModelSettings
from tether.tools import Principal


def _drive(agent: Any, start: Any, as_json: bool, stream: bool) -> NoReturn:
    """Run a driver to its end or pause, print it, and exit with the status's code."""
    renderer = None if as_json else Renderer(click.echo, stream=stream)

    async def go() -> Any:
        try:
            return await start(renderer).run()
        finally:
            await agent.aclose()

    try:
        result = asyncio.run(go())
    except KeyboardInterrupt:
        fail("interrupted", EXIT_CODES[Status.CANCELLED])
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        click.echo(json.dumps(_json_result(result), ensure_ascii=False))
    else:
        assert renderer is not None
        renderer.finish(result)
    # The calls of the child runs it waits with (sub-agents) are decided through it, like its own.
    of_children = [(f" in child run {c['run_id']}", c["id"], c["tool"]) for c in result.child_pending]
    if result.status is Status.AWAITING_APPROVAL:
        for call in result.state.undecided():
            why = f" needs approval: {call.approval_reason};" if call.approval_reason else ""
            say(
                f"paused: call {call.call_id} {call.tool}{why} approve with `tether approve {result.run_id} "
                f"{call.call_id}` or deny with `tether deny {result.run_id} {call.call_id}`"
            )
        for where, call_id, tool in of_children:
            say(
                f"paused: call {call_id} {tool}{where} needs approval; approve with `tether approve {result.run_id} "
                f"{call_id}` or deny with `tether deny {result.run_id} {call_id}`"
            )
    elif result.status is Status.AWAITING_RECONCILIATION:
        unknown = [("", call_id) for call_id in result.state.unknown] + [(w, c) for w, c, _ in of_children]
        for where, call_id in unknown:
            say(
                f"paused: the outcome of call {call_id}{where} is unknown; record it with `tether reconcile "
                f"{result.run_id} {call_id} --executed RESULT_JSON | --not-executed`"
            )
    elif result.status is not Status.COMPLETED:
        say(f"error: run {result.run_id} ended {result.status.value}: {result.reason}")
    sys.exit(EXIT_CODES.get(result.status, EXIT_INTERNAL))


def _json_result(result: Any) -> dict[str, Any]:
    """``tether run --json``: the run's report, redacted, each pending call with the commands that decide it."""
    data: dict[str, Any] = redact(result.to_dict())
    for call in data["pending"]:
        where = f"{result.run_id} {call['id']}"
        if result.status is Status.AWAITING_APPROVAL:
            call.update(approve=f"tether approve {where}", deny=f"tether deny {where}")
        else:
            call.update(
                executed=f"tether reconcile {where} --executed RESULT_JSON",
                not_executed=f"tether reconcile {where} --not-executed",
            )
    return data


@click.command()
@click.argument("prompt")
@click.option(
    "--tools",
    "toolsets",
    multiple=True,
    metavar="NAME_OR_MODULE",
    help="A toolset: calc, files, clock, or an importable module (repeatable).",
)
@with_mcp_options
@click.option("--model", help="Model name [env: OPENAI_MODEL, or ANTHROPIC_MODEL with --provider anthropic].")
@click.option(
    "--base-url",
    help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1 [env: OPENAI_BASE_URL, "
    "or ANTHROPIC_BASE_URL with --provider anthropic].",
)
@api_key_option
@click.option(
    "--fallback-model",
    "fallback_models",
    multiple=True,
    metavar="NAME",
    help="A model to ask when the one before it is down (connection error, timeout, 429, 5xx); repeatable, "
    "asked in order. Same protocol and key; at --fallback-base-url, else the same endpoint.",
)
@click.option(
    "--fallback-base-url",
    metavar="URL",
    help="The endpoint of the --fallback-model models (default: --base-url's).",
)
@with_settings_options
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
@click.option(
    "--local-model",
    type=click.Path(dir_okay=False, exists=True),
    help="Run this GGUF file in-process instead of an endpoint [env: TETHER_LOCAL_MODEL].",
)
@click.option(
    "--provider",
    envvar="TETHER_PROVIDER",
    metavar="NAME",
    help="A provider profile (tether.models.providers): openai, llama-cpp-python, snowflake, or anthropic "
    "(the Messages API; key from ANTHROPIC_API_KEY) [env: TETHER_PROVIDER].",
)
@protocol_option
@click.option(
    "--max-total-tokens",
    type=click.IntRange(min=1),
    help="Tokens (input and output) allowed in this run; counted locally when the provider reports none.",
)
@click.option(
    "--principal", default="local", show_default=True, help="Who the run acts for.", callback=principal_checked
)
@click.option("--scope", "scopes", multiple=True, help="A scope the principal holds (repeatable; default: all).")
@click.option("--stream", is_flag=True, help="Stream the model's replies.")
@db_option
@click.option("--no-log", is_flag=True, help="Do not record this run in the run store.")
@click.option("--log-content", is_flag=True, help="Keep prompts, replies and results in the audit events.")
@click.option(
    "--continue", "conversation_id", metavar="CONVERSATION", help="Run PROMPT as the next turn of a conversation."
)
@click.option(
    "--engine",
    type=click.Choice(["local", "temporal"]),
    default="local",
    show_default=True,
    help="Drive the run here, or as a Temporal workflow on `tether worker` processes.",
)
@temporal_option
@task_queue_option
@click.option("--no-wait", is_flag=True, help="With --engine temporal: print the run id and return at once.")
@json_option
def run(
    prompt: str,
    toolsets: tuple[str, ...],
    mcp_commands: tuple[str, ...],
    mcp_urls: tuple[str, ...],
    mcp_read_only: tuple[str, ...],
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    fallback_models: tuple[str, ...],
    fallback_base_url: str | None,
    system: str | None,
    model_settings: ModelSettings | None,
    max_steps: int,
    files_root: str | None,
    local_model: str | None,
    provider: str | None,
    protocol: str | None,
    max_total_tokens: int | None,
    principal: str,
    scopes: tuple[str, ...],
    stream: bool,
    db: str | None,
    no_log: bool,
    log_content: bool,
    conversation_id: str | None,
    engine: str,
    temporal_address: str | None,
    task_queue: str,
    no_wait: bool,
    as_json: bool,
) -> None:
    """Run PROMPT as an agent with the given tools (PROMPT `-`: read it from standard input).

    The run is recorded in the run store (unless --no-log), so a paused or
    crashed run can be resumed with `tether resume RUN`.

    With no model, endpoint, key, provider or protocol named (options or
    OPENAI_* variables) the embedded model answers; once any is named, an
    incomplete endpoint is a configuration error. --continue goes on with
    the model and tools the conversation began with; an option naming others
    is refused (-o on such a turn goes over the conversation's own settings).

    -s replaces the agent's system message; -o sets a model setting, sent in
    the protocol's own field (docs/guides/agents.md), and a resumed run is sent
    the same. --fallback-model names models asked in order when the one before
    is down; the chain is recorded, so a resumed run uses it too.

    \b
    Examples:
      tether run "What is 248 times 15?" --tools calc
      tether run "List the files" --tools files --files-root ./docs --json
      tether run "What is 248 times 15?" --tools calc --provider anthropic --model claude-sonnet-4-5
      tether run "Name three colours" -s "Answer in French" -o temperature=0.2 -o seed=7
      tether run "What is 248 times 15?" --tools calc --model gpt-4o --fallback-model gpt-4o-mini
      tether run "What is 2+2?" --tools calc --provider snowflake
      tether run "What is 248 times 15?" --tools calc --protocol responses --model gpt-5-mini
      tether run "Find the notes" --mcp "npx -y @modelcontextprotocol/server-filesystem ." --mcp-read-only search_files
      tether run "And times 2?" --continue CONVERSATION   (see tether chat)
      git log -5 | tether run - --model gpt-4o-mini
      tether run "What is 248 times 15?" --engine temporal --temporal 127.0.0.1:7233 --task-queue tether

    With --engine temporal the tools and the model are the workers' (`tether
    worker`); this process sends the prompt, the principal and the budget.
    Given a run store (--db or TETHER_DB, the workers' one), it records the
    run there first, so `tether runs list` shows it before a worker takes it.

    Exit status: 0 completed, 3 configuration error, 10 max_steps,
    11 budget_exhausted, 12 truncated, 13 content_filtered, 14 protocol_error,
    15 loop_detected, 16 repair_exhausted, 17 model_error, 18 cancelled,
    20 awaiting_approval, 21 awaiting_reconciliation.
    """
    from tether.toolsets import toolset_reference  # the toolsets load pydantic: not for every start

    if prompt == "-":
        try:
            prompt = sys.stdin.buffer.read().decode("utf-8").rstrip()
        except UnicodeDecodeError:
            fail("standard input is not UTF-8 text", 2)
        if not prompt:
            fail("no prompt on standard input (tether run - reads it from there)")
    root = files_root or os.environ.get("TETHER_FILES_ROOT")
    env = env_prefix(provider, protocol)
    try:
        setup = {
            "model": model or os.environ.get(f"{env}_MODEL"),
            "base_url": given_base_url(base_url, f"{env}_BASE_URL"),
            "stream": stream,
            # Stored with the run and read again by `resume`, maybe elsewhere: paths are absolute.
            "toolsets": [toolset_reference(t) for t in toolsets],
            "mcp": list(mcp_commands),
            "mcp_urls": list(mcp_urls),
            "mcp_read_only": list(mcp_read_only),
            "files_root": os.path.abspath(root) if root else None,
            "local_model": os.path.abspath(local_model) if local_model else None,
            "provider": provider,
            "protocol": protocol,
            "fallback_models": list(fallback_models),
            "fallback_base_url": given_base_url(fallback_base_url, None, "--fallback-base-url"),
            "system": system,
            "settings": model_settings.to_dict() if model_settings is not None else None,
        }
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    given = {"model": model, "base_url": base_url, "provider": provider, "protocol": protocol, "toolsets": toolsets}
    given |= {"mcp": mcp_commands, "mcp_urls": mcp_urls, "local_model": local_model, "files_root": files_root}
    given |= {"fallback_models": fallback_models, "fallback_base_url": fallback_base_url, "system": system}
    who = Principal(principal, frozenset(scopes)) if scopes else Principal(principal)
    budget = Budget(max_steps=max_steps, max_total_tokens=max_total_tokens)
    if engine == "temporal":
        if system is not None or model_settings is not None or fallback_models:
            why = "--system, --option and --fallback-model are not sent to Temporal workers, which run their own model"
            fail(f"{why}: leave them out with --engine temporal", 2)
        run_on_temporal(
            prompt,
            address=temporal_address,
            task_queue=task_queue,
            principal=who,
            budget=budget,
            wait=not no_wait,
            as_json=as_json,
            db=None if no_log else db,
            record=not no_log,
            log_content=log_content,
        )
    try:
        if conversation_id and no_log:
            raise ConfigurationError("--continue needs the run store, where the conversation is: drop --no-log")
        store = None if no_log else open_store(db, log_content)
        if conversation_id and store is not None:
            setup = conversation_setup(store, conversation_id, setup, {k for k, v in given.items() if v}, who)
        agent = agent_of(setup, api_key, store, who, budget)
        conversation = agent.conversation(conversation_id) if conversation_id else None
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    if conversation is not None:
        _drive(agent, lambda renderer: conversation.turn(prompt, on_event=renderer), as_json, stream)
    _drive(agent, lambda renderer: agent.driver(prompt, on_event=renderer), as_json, stream)


@click.command()
@click.argument("run_id")
@api_key_option
@db_option
@json_option
def resume(run_id: str, api_key: str | None, db: str | None, as_json: bool) -> None:
    """Carry on a paused or interrupted run from its last checkpoint.

    Side-effecting calls whose outcome is unknown are never run again
    blindly: their tool's reconcile hook decides, or the run waits for
    `tether reconcile`. RUN_ID may be a unique prefix of the run id.

    Exit status: the resumed run's, as for `tether run`; 7 when the run has
    already ended (there is nothing to resume).

    \b
    Example:
      tether resume 3f2a
    """
    try:
        store = open_store(db, existing=True)
        run_id = store.resolve(run_id)
        stored = store.load(run_id)
        if stored.state.status.terminal:
            fail(
                f"run {run_id} already ended {stored.state.status.value}; there is nothing to resume",
                EXIT_NOT_WAITING,
            )
        store.log_content = bool(stored.setup.get("log_content"))  # logged as it began
        agent = agent_of(stored.setup, api_key, store, stored.principal, stored.state.config.budget)
    except TetherError as exc:
        fail(str(exc), exc.exit_code)
    _drive(agent, lambda renderer: agent.resume(run_id, on_event=renderer), as_json, stored.setup.get("stream", False))
