"""What the CLI's commands share: exit codes, errors, common options, the store, and what a run is built from.

A run's setup (model, endpoint, provider, fallback models, toolsets, MCP servers, system message and model
settings) is a plain dict, stored with the run: ``agent_of`` builds the same agent from it for ``tether run``,
``tether chat`` and ``tether resume``. The commands import from here, never from ``tether.cli.main``, which
only assembles them.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from tether.cli.render import visible
from tether.core.budget import Budget
from tether.core.errors import ApprovalMismatch, ConfigurationError, RunNotFound
from tether.core.machine import Status
from tether.core.settings import ModelSettings
from tether.drivers.local.runner import Agent, approval_reason
from tether.store import open_store as open_run_store

if TYPE_CHECKING:
    from tether.store.base import RunStore
    from tether.tools.context import Principal

# Imported inside the functions that use them, so that `tether --help` and the commands that need none of
# them do not load them: tether.models (aiohttp, about 100 ms; llama_cpp for the embedded model),
# tether.toolsets (pydantic, about 50 ms) and tether.mcp (the MCP client).

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
# The run is not waiting for what the command does: no such pending call, other arguments, or already ended.
EXIT_NOT_WAITING = ApprovalMismatch.exit_code


# The ``code`` of a failure's JSON object (``--json``), by exit status.
ERROR_CODES: dict[int, str] = {
    EXIT_INTERNAL: "internal_error",
    2: "usage_error",
    EXIT_CONFIGURATION: "configuration_error",
    4: "model_error",
    5: "lease_held",
    6: "tampered",
    EXIT_NOT_WAITING: "not_waiting",
    **{code: status.value for status, code in EXIT_CODES.items()},
}


def report_failure(message: str, code: int, *, as_json: bool = False) -> None:
    """Say why the command fails: with ``--json`` (or ``as_json``) one JSON object on stdout, else a line on stderr.

    The object is ``{"error": {"code": ..., "message": ..., "exit": N}}``, and the command exits N.
    """
    context = click.get_current_context(silent=True)
    if as_json or (context is not None and context.params.get("as_json")):
        error = {"code": ERROR_CODES.get(code, "error"), "message": message, "exit": code}
        click.echo(json.dumps({"error": error}, ensure_ascii=False))
    else:
        say(f"error: {message}")


def say(line: str) -> None:
    """A line on standard error, shown not obeyed (``visible``): it may quote words tether did not write (a
    model's call id or reason, a module's exception, a server's message)."""
    click.echo(visible(line), err=True)


def fail(message: str, code: int = EXIT_CONFIGURATION) -> NoReturn:
    report_failure(message, code)
    sys.exit(code)


def open_store(
    db: str | None, log_content: bool = False, *, lease_seconds: float | None = None, existing: bool = False
) -> RunStore:
    """The run store ``--db`` (else ``$TETHER_DB``) names: a ``postgresql://`` url or a SQLite file.

    ``existing``: for a command on runs already made, a SQLite file named that is not there is an error (a
    mistyped path), not a new empty store.
    """
    leases = {} if lease_seconds is None else {"lease_seconds": lease_seconds}
    return open_run_store(db, log_content=log_content, existing=existing, **leases)


def seconds(at_most: float | None = None) -> Callable[[click.Context, click.Parameter, float | None], float | None]:
    """An option's check (``type=float, callback=seconds()``): a number of seconds, finite and above 0, and at
    most ``at_most``; anything else is a usage error (exit 2)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is None:
            return None
        if not (math.isfinite(value) and value > 0):
            raise click.BadParameter(f"{value:g} is not a number of seconds above 0", ctx, param)
        if at_most is not None and value > at_most:
            raise click.BadParameter(f"{value:g} is more than {at_most:g} seconds", ctx, param)
        return value

    return check


def principal_checked(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--principal``'s check: an id as API keys and tokens must have it (1 to 200 printable characters), so
    that no run is made for an id that no key could name and no terminal shows as it is."""
    from tether.store.keys import principal_id

    if value is None:
        return None
    try:
        return principal_id(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


db_option = click.option(
    "--db",
    metavar="FILE|URL",
    help="Run store: a SQLite file or a postgresql:// url [env: TETHER_DB; default ~/.local/share/tether/tether.db].",
)
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print one JSON object; a failure too: {"error": {"code", "message", "exit"}} on stdout.',
)
api_key_option = click.option("--api-key", help="API key [env: OPENAI_API_KEY].")
PROTOCOLS = ("openai", "responses", "anthropic")
protocol_option = click.option(
    "--protocol",
    type=click.Choice(PROTOCOLS),
    envvar="TETHER_PROTOCOL",
    help="Wire protocol: openai (chat completions), responses (OpenAI's Responses API, POST /responses) or "
    "anthropic (the Messages API) [env: TETHER_PROTOCOL; default: the provider profile's, else openai].",
)


def elicitation_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--elicitation-seconds``: how long an MCP client's user has to answer a question asking for approval;
    ``what`` says it for the command. The default is ``tether.mcp.server.DEFAULT_ELICITATION_SECONDS``, which
    the CLI cannot import without the mcp extra."""
    return click.option(
        "--elicitation-seconds",
        envvar="TETHER_ELICITATION_SECONDS",
        type=float,
        callback=seconds(),
        metavar="SECONDS",
        help=f"{what} [env: TETHER_ELICITATION_SECONDS; default: 300].",
    )


def env_prefix(provider: str | None, protocol: str | None) -> str:
    """Where the model, endpoint and key variables come from: ``ANTHROPIC`` for the Messages API, else ``OPENAI``."""
    messages_api = protocol == "anthropic" if protocol else provider == "anthropic"
    return "ANTHROPIC" if messages_api else "OPENAI"


# Shared by `tether run` (--mcp, --mcp-url): the MCP servers whose tools join the run's toolsets.
mcp_options: list[Callable[[Any], Any]] = [
    click.option(
        "--mcp",
        "mcp_commands",
        multiple=True,
        metavar='"COMMAND ARGS"',
        help="Start an MCP server (stdio) and offer its tools (repeatable). Needs tether[mcp].",
    ),
    click.option(
        "--mcp-url",
        "mcp_urls",
        multiple=True,
        metavar="URL",
        help="Offer the tools of the MCP server at URL (streamable HTTP; repeatable).",
    ),
    click.option(
        "--mcp-read-only",
        "mcp_read_only",
        multiple=True,
        metavar="TOOL",
        help="Treat this MCP tool as read-only (repeatable). A server's readOnlyHint is never trusted: "
        "without this every MCP tool is side-effecting.",
    ),
]


def with_mcp_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(mcp_options):
        command = option(command)
    return command


# What `-o KEY=VALUE` may set, and how its value is read; `stop` may be given several times.
SETTING_TYPES: dict[str, type] = {
    "temperature": float,
    "max_tokens": int,
    "top_p": float,
    "seed": int,
    "stop": str,
    "parallel_tool_calls": bool,
}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _setting(key: str, text: str) -> Any:
    kind = SETTING_TYPES[key]
    if kind is bool:
        if text.lower() not in _TRUE + _FALSE:
            raise ValueError("expected true or false")
        return text.lower() in _TRUE
    if kind is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("expected a finite number")
        return value
    return kind(text)


def model_settings_option(ctx: click.Context, param: click.Parameter, given: tuple[str, ...]) -> ModelSettings | None:
    """``-o KEY=VALUE`` (repeatable) as ``ModelSettings``; an unknown key or a bad value is a usage error (exit 2)."""
    if not given:
        return None
    values: dict[str, Any] = {}
    for item in given:
        key, equals, text = item.partition("=")
        key = key.strip()
        if not equals:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE, e.g. -o temperature=0.2", ctx, param)
        if key not in SETTING_TYPES:
            raise click.BadParameter(
                f"unknown model setting {key!r}: the settings are {', '.join(SETTING_TYPES)}", ctx, param
            )
        try:
            value = _setting(key, text.strip())
        except ValueError as exc:
            kind = SETTING_TYPES[key].__name__
            raise click.BadParameter(f"{key}={text!r} is not a valid {kind}: {exc}", ctx, param) from None
        if key == "stop":
            values["stop"] = [*values.get("stop", []), value]
        else:
            values[key] = value
    try:
        return ModelSettings(**values)
    except ConfigurationError as exc:  # a value of the right type outside its range
        raise click.BadParameter(str(exc), ctx, param) from None


# Shared by `tether run`, `tether chat` and `tether eval` (-s, -o): the system message and model settings.
settings_options: list[Callable[[Any], Any]] = [
    click.option("-s", "--system", metavar="TEXT", help="The system message, instead of the agent's."),
    click.option(
        "-o",
        "--option",
        "model_settings",
        multiple=True,
        metavar="KEY=VALUE",
        callback=model_settings_option,
        help="A model setting (repeatable): temperature, max_tokens, top_p, seed, stop (repeat for several), "
        "parallel_tool_calls (true/false); e.g. -o temperature=0.2 -o seed=7. A setting the protocol has no "
        "field for (seed on the Messages API) is refused.",
    ),
]


def with_settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(settings_options):
        command = option(command)
    return command


def settings_of(setup: dict[str, Any]) -> ModelSettings | None:
    """The model settings a setup names (``-o``), or None."""
    stored = setup.get("settings")
    return ModelSettings.from_dict(stored) if stored else None


def mcp_tools(setup: dict[str, Any]) -> list[Any]:
    """Connect to the MCP servers a setup names; their tools, untrusted and side-effecting unless configured."""
    commands, urls = setup.get("mcp") or [], setup.get("mcp_urls") or []
    if not commands and not urls:
        if setup.get("mcp_read_only"):  # a forgotten --mcp would leave the tools it meant unchecked, silently
            raise ConfigurationError("--mcp-read-only names MCP tools, but no --mcp or --mcp-url gives a server")
        return []
    from tether.mcp import MCPToolset

    read_only = set(setup.get("mcp_read_only") or [])
    toolsets: list[Any] = []
    try:
        for command in commands:
            toolsets.append(MCPToolset.stdio(command, read_only=read_only.__contains__))
        for url in urls:
            toolsets.append(MCPToolset.http(url, read_only=read_only.__contains__))
        listed = {t.name for toolset in toolsets for t in toolset}
        unknown = sorted(read_only - listed)
        if unknown:
            raise ConfigurationError(f"--mcp-read-only names tools no MCP server lists: {', '.join(unknown)}")
    except BaseException:
        for toolset in toolsets:
            toolset.close()
        raise
    return [t for toolset in toolsets for t in toolset]


def load_tools(names: tuple[str, ...], files_root: str | None) -> list[Any]:
    """The tools of the toolsets ``names`` (registered names or importable modules), in order."""
    from tether.toolsets import load_toolset

    tools: list[Any] = []
    for name in names:
        tools.extend(load_toolset(name, files_root=files_root))
    return tools


def _no_endpoint() -> ConfigurationError:
    """Nothing names a model or an endpoint, and the embedded model cannot stand in."""
    local = os.environ.get("TETHER_LOCAL", "")
    if local.lower() in ("off", "0", "no", "false"):  # the values tether.models.local obeys
        hint = f"; the embedded model is turned off (TETHER_LOCAL={local})"
    else:
        hint = ", or pip install 'tether[local]' for an embedded model"
    return ConfigurationError(
        "no model endpoint configured: set OPENAI_BASE_URL and OPENAI_MODEL for an OpenAI-compatible "
        "server, or OPENAI_API_KEY and OPENAI_MODEL for api.openai.com (or pass --base-url/--model)" + hint
    )


def _endpoint(setup: dict[str, Any], model: str | None, api_key: str | None) -> tuple[str, str | None, str | None]:
    """The model name, base URL and key of an OpenAI-compatible endpoint that something named, all of it set."""
    base_url = setup.get("base_url")  # the setup holds it as the run began (--base-url or OPENAI_BASE_URL)
    if not base_url and not api_key:
        if model:
            named = f"the model {model!r} (--model or OPENAI_MODEL)"
        elif setup.get("provider"):
            named = f"--provider {setup['provider']}"
        else:
            named = f"--protocol {setup.get('protocol')}"
        raise ConfigurationError(
            f"{named} is named but no endpoint is: set OPENAI_BASE_URL (or --base-url) for an OpenAI-compatible "
            "server, or OPENAI_API_KEY (or --api-key) for api.openai.com; the embedded model answers only "
            "when no model, endpoint, key, provider or protocol is named"
        )
    if not model:
        raise ConfigurationError("no model named: set OPENAI_MODEL or pass --model")
    return model, base_url, api_key


def model_of(setup: dict[str, Any], api_key: str | None) -> Any:
    """The model a setup names: an HTTP endpoint, or the embedded local model when nothing names one.

    Anything that names a model or an endpoint (--model, --base-url, --api-key, --provider, --protocol, or
    OPENAI_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY) rules the embedded model out: an endpoint that is
    incomplete is a configuration error saying what to set, never a silent switch to another model.
    """
    protocol = protocol_of(setup)
    if protocol == "anthropic":
        from tether.models.anthropic import AnthropicModel

        return AnthropicModel(
            setup.get("model"),
            base_url=setup.get("base_url"),
            api_key=api_key,
            stream=setup.get("stream", False),
            output_mode=provider_of(setup).output_mode,
        )
    from tether.models.local import default_model_path, local_available

    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    model = setup.get("model") or os.environ.get("OPENAI_MODEL")
    named = model or setup.get("base_url") or api_key or setup.get("provider") not in (None, "local")
    named = named or setup.get("protocol") is not None
    if setup.get("local_model") or not named:
        if not setup.get("local_model") and not local_available():
            raise _no_endpoint()
        from tether.models.local import LocalModel

        path = setup.get("local_model") or str(default_model_path())
        setup["local_model"] = path
        setup["provider"] = setup.get("provider") or "local"
        click.echo(
            f"using the local model {Path(path).stem} (nothing names a model or an endpoint); "
            "a model this small gives weak answers: set OPENAI_BASE_URL and OPENAI_MODEL for a real one",
            err=True,
        )
        return LocalModel(path, output_mode=provider_of(setup).output_mode)
    from tether.models.openai_chat import OpenAIChatModel

    name, url, key = _endpoint(setup, model, api_key)
    profile = provider_of(setup)
    stream = setup.get("stream", False)
    if protocol == "responses":
        from tether.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(
            name,
            base_url=url,
            api_key=key,
            stream=stream,
            output_mode=profile.output_mode,
            strict_tools=profile.strict_tools,
        )
    return OpenAIChatModel(
        name,
        base_url=url,
        api_key=key,
        stream=stream,
        compat=profile.wire,
        output_mode=profile.output_mode,
        strict_tools=profile.strict_tools,
    )


def provider_of(setup: dict[str, Any]) -> Any:
    """The provider profile a setup names (strict defaults when it names none; ``--protocol anthropic`` alone
    names the ``anthropic`` profile)."""
    from tether.models.providers import Provider, provider

    name = setup.get("provider") or ("anthropic" if setup.get("protocol") == "anthropic" else None)
    return provider(name) if name else Provider("default")


def protocol_of(setup: dict[str, Any]) -> str:
    """The wire protocol a setup names (``--protocol``), else its provider profile's.

    OpenAI's two protocols share a profile's settings, so ``--protocol responses`` goes with any profile of
    protocol ``openai``; a profile of the Messages API and an OpenAI protocol (or the other way round) do not mix.
    """
    profile = provider_of(setup)
    protocol = setup.get("protocol") or profile.protocol
    if protocol != profile.protocol and "anthropic" in (protocol, profile.protocol):
        raise ConfigurationError(
            f"--protocol {protocol} does not go with --provider {profile.name}, whose protocol is "
            f"{profile.protocol}: leave one of them out"
        )
    return str(protocol)


def agent_of(
    setup: dict[str, Any], api_key: str | None, store: RunStore | None, principal: Principal, budget: Budget
) -> Agent:
    """The Agent a setup describes; the same setup rebuilds it on resume."""
    protocol_of(setup)  # first: an unknown provider (or one the protocol contradicts) before anything is built
    tools = load_tools(tuple(setup["toolsets"]), setup.get("files_root")) + mcp_tools(setup)
    if store is None and (why := approval_reason(tools)):
        raise ConfigurationError(f"{why}: a run that waits for approval is kept in the run store; drop --no-log")
    model = model_of(setup, api_key)  # the embedded model brings the local profile with it
    if setup.get("fallback_models"):
        model = _fallback_chain(model, setup, api_key)
    return Agent(
        model,
        tools,
        budget=budget,
        compat=provider_of(setup).compat,
        store=store,
        setup=setup,
        principal=principal,
        system=setup.get("system"),
        model_settings=settings_of(setup),
    )


def _fallback_chain(primary: Any, setup: dict[str, Any], api_key: str | None) -> Any:
    """``primary``, then the setup's fallback models (``--fallback-model``) on the same protocol and key, at
    ``--fallback-base-url`` or the primary's endpoint."""
    from tether.models.fallback import FallbackModel

    if setup.get("local_model"):
        raise ConfigurationError(
            "--fallback-model needs an endpoint (--base-url or OPENAI_BASE_URL), not the local model"
        )
    url = setup.get("fallback_base_url") or setup.get("base_url")
    others = [model_of({**setup, "model": name, "base_url": url}, api_key) for name in setup["fallback_models"]]
    return FallbackModel(primary, *others)


def given_base_url(flag: str | None, variable: str | None, option: str = "--base-url") -> str | None:
    """``option``'s value, else ``$variable``: checked before anything is recorded, naming where it came from."""
    from tether.models.http import checked_base_url

    value = flag or (os.environ.get(variable) if variable else None)
    if value:
        checked_base_url(value, option if flag else str(variable))
    return value


# What a conversation keeps from its first turn, with the option that would name something else.
PINNED = {
    "model": "--model",
    "base_url": "--base-url",
    "provider": "--provider",
    "protocol": "--protocol",
    "toolsets": "--tools",
    "mcp": "--mcp",
    "mcp_urls": "--mcp-url",
    "local_model": "--local-model",
    "files_root": "--files-root",
    "fallback_models": "--fallback-model",
    "fallback_base_url": "--fallback-base-url",
    "system": "--system",
}


def conversation_setup(
    store: RunStore, conversation_id: str, setup: dict[str, Any], given: set[str], principal: Principal
) -> dict[str, Any]:
    """The setup a conversation goes on with: its first turn's, as ``resume`` uses a run's own.

    ``given`` names the ``setup`` keys the user set by option (``PINNED``): one that names something else
    than the conversation runs with (another model, endpoint, provider, toolset) is a configuration error,
    never a silent switch. A conversation with no turn yet takes ``setup`` as it is. Another principal's
    conversation is not there (``RunNotFound``, as for a missing id): nothing of it is read for them.
    """
    stored = store.load_conversation(conversation_id)
    if stored.principal.id != principal.id:
        raise RunNotFound(f"no conversation {conversation_id} in {store.path}")
    turns = stored.turns
    if not turns:
        return setup
    recorded = dict(store.load(turns[0][0]).setup)
    for key in sorted(given & PINNED.keys()):
        if setup.get(key) != recorded.get(key):
            flag = PINNED[key]
            raise ConfigurationError(
                f"conversation {conversation_id} runs with {flag} {_shown(recorded.get(key))}, not "
                f"{_shown(setup.get(key))}: leave {flag} out to go on with it, or start a new conversation"
            )
    recorded["stream"] = setup.get("stream", False)  # how the turn is shown, not what runs it
    if setup.get("settings"):  # this turn's -o, over the conversation's own
        recorded["settings"] = {**(recorded.get("settings") or {}), **setup["settings"]}
    return recorded


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(value) or "(none)"
    return "(none)" if value is None else str(value)
