"""Start Temporal runs and decide their waiting calls, from any process that can reach the server.

    client = await connect("127.0.0.1:7233")
    handle = await start_run(client, "What is 248 times 15?", task_queue="tether")
    await decide(client, handle.id, "call_1", approved=True)
    result = await handle.result()

With ``store``, ``start_run`` records the run in the run store before the
workflow starts, so ``tether runs list`` shows it (ready) even before a
worker takes it; the workers must share that store.

Decisions are workflow updates: the workflow's validator refuses a call id
that is not waiting or a fingerprint for other arguments before anything
enters the run's history, and the refusal arrives here as ``NotWaiting``.

A query is answered by a worker: while none can (the one that held the run
died, or none polls the task queue), ``status`` and ``pending`` ask again
with backoff for up to ``patience`` seconds before the ``RPCError``
reaches the caller (``transient`` tells such an error from the others).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode

from tether.core.budget import RunConfig
from tether.core.errors import ConfigurationError, KeyRefused, NotWaiting
from tether.core.events import RUN_FINISHED, RUN_STARTED
from tether.core.history import untrusted_results
from tether.core.machine import Accepted, Cancel, Rejected, Run, RunState
from tether.core.messages import Message, ToolCall
from tether.drivers.common import prompt_messages
from tether.drivers.ids import new_id
from tether.drivers.temporal.activities import principal_to_dict
from tether.drivers.temporal.codec import data_converter
from tether.drivers.temporal.workflow import (
    ENGINE,
    PAYLOAD_LIMIT_BYTES,
    WORKFLOW_NAME,
    Decision,
    Reconciliation,
    payload_size,
)
from tether.tools.context import LOCAL_PRINCIPAL, Principal

if TYPE_CHECKING:
    from tether.store.base import RunStore

# One query waits this long for its answer: a worker that died holding the run never answers it.
QUERY_TIMEOUT = timedelta(seconds=5)
QUERY_PATIENCE = 60.0  # seconds ``status`` and ``pending`` ask again before they give up
# No worker answers for now (it died, is busy, or the server is restarting); asked again, it may.
_PASSING = frozenset(
    {
        RPCStatusCode.CANCELLED,  # the query's own timeout ("Timeout expired")
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.FAILED_PRECONDITION,  # "no poller seen for task queue recently, worker may be down"
    }
)


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """The SDK runtime of the clients ``connect`` makes, and of their workers: its core's log lines (a payload's
    size warning) go to Python's ``logging``, so to standard error, not to standard output as they do by default,
    where `tether run --json` writes its answer and ``--no-wait`` the run id."""
    global _runtime
    if _runtime is None:
        forwarding = LogForwardingConfig(logging.getLogger("temporalio.core"))
        logs = LoggingConfig(filter=LoggingConfig.default.filter, forwarding=forwarding)
        _runtime = Runtime(telemetry=TelemetryConfig(logging=logs))
    return _runtime


# The core hands its log lines to Python from its own thread, in batches at most this far apart (the SDK's
# bridge: ``FORWARD_LOG_MAX_FREQ_MS``).
_FORWARDED_EVERY = 0.010


def settle_logs() -> None:
    """Let the core hand over the log lines it holds before the process exits without teardown.

    A process that leaves with ``os._exit`` right after a request (`tether run --no-wait`) lost the
    request's warning (a payload's size) whenever the core's thread had not been scheduled since: on a
    busy machine, more often than not. A few batch periods with the interpreter's lock released let it.
    """
    if _runtime is not None:
        time.sleep(5 * _FORWARDED_EVERY)


def transient(error: RPCError) -> bool:
    """Whether asking again may succeed: no worker could answer yet (not: no such run, a bad request)."""
    return error.status in _PASSING


async def connect(address: str, namespace: str = "default") -> Client:
    """A Temporal client for the server at ``address`` (``host:port``); ``ConfigurationError`` for an address
    that is none (``a:b:c``, a port past 65535) or a malformed ``TETHER_TEMPORAL_KEY``.

    Every tether process that talks to Temporal connects here: with
    ``TETHER_TEMPORAL_KEY`` set, its payloads, and those of the workers made
    from it, are encrypted (``tether.drivers.temporal.codec``).
    """
    converter = data_converter()  # before connecting: a malformed key is said, whatever the server
    try:
        return await Client.connect(address, namespace=namespace, runtime=runtime(), data_converter=converter)
    except ValueError as exc:
        what = f"--temporal {address!r} is not a Temporal server's address (HOST:PORT)"
        raise ConfigurationError(f"{what}: {exc}") from None


class _NoTools:
    """The catalog of a run recorded before any worker has it: nothing is judged here."""

    def check(self, call: ToolCall) -> Accepted | Rejected:  # pragma: no cover - no reply reaches it
        raise AssertionError(f"call {call.id} judged outside a worker")


def record_start(store: RunStore, run: Run, principal: Principal, task_queue: str) -> dict[str, int]:
    """Record a run about to start in ``store``, as the workflow would at its first save: the run, its prompt
    and its ``run_started`` event. What the store holds now, for the workflow to go on from."""
    state = run.state
    prompt = "\n".join(m.content or "" for m in state.messages if m.role == "user")
    store.create_run(state, principal, {"engine": ENGINE, "task_queue": task_queue})
    store.checkpoint(
        state, [(RUN_STARTED, {"principal": principal.id, "prompt": prompt}, 0, time.time())], release=True
    )
    return {"events": 1, "messages": len(state.messages)}


def _record_not_started(store: RunStore, run: Run, error: BaseException) -> None:
    """The server refused the start of a run already recorded: the run ends cancelled, saying why."""
    reason = f"the Temporal server did not start the run: {error}"
    now = time.time()
    run.send(Cancel(now, reason=reason))
    state: RunState = run.state
    event = (RUN_FINISHED, {"status": state.status.value, "output": None, "reason": reason}, 0, now)
    store.acquire(state.run_id)
    store.checkpoint(state, [event], release=True)


async def start_run(
    client: Client,
    prompt: str | Sequence[Message],
    *,
    task_queue: str,
    run_id: str | None = None,
    principal: Principal = LOCAL_PRINCIPAL,
    config: RunConfig | None = None,
    system: str | None = None,
    heartbeat_seconds: float | None = None,
    store: RunStore | None = None,
) -> WorkflowHandle[Any, dict[str, Any]]:
    """Start a run as a workflow whose id is the run id; its result is the run's summary.

    With ``store`` (the workers' run store) the run is recorded there first,
    ready; the workflow goes on from that record instead of creating it.
    A start larger than a Temporal payload carries (a prompt of megabytes) is a
    ``ConfigurationError``, raised before anything is recorded or started.
    """
    messages = prompt_messages(prompt)
    if system is not None and not (messages and messages[0].role == "system"):
        messages.insert(0, Message("system", system))
    run_id = run_id or new_id()
    config = config or RunConfig()
    start: dict[str, Any] = {
        "messages": [m.to_dict() for m in messages],
        "config": config.to_dict(),
        "principal": principal_to_dict(principal),
        "heartbeat_seconds": heartbeat_seconds,
    }
    size = payload_size(start)
    if size > PAYLOAD_LIMIT_BYTES:  # refused by the server ("Blob data size exceeds limit"): said first, nothing kept
        raise ConfigurationError(
            f"the run's start (its prompt and settings) is {size} bytes as a Temporal payload, more than one"
            f" carries ({PAYLOAD_LIMIT_BYTES} bytes): a Temporal run cannot start from a prompt that long"
        )
    run = Run.new(run_id, messages, _NoTools(), config, untrusted=untrusted_results(messages))  # as the workflow's
    if store is not None:
        start["stored"] = record_start(store, run, principal, task_queue)
    try:
        return await client.start_workflow(WORKFLOW_NAME, start, id=run_id, task_queue=task_queue, result_type=dict)
    except Exception as exc:
        if store is not None:
            _record_not_started(store, run, exc)
        raise


async def _query(client: Client, run_id: str, name: str, result_type: type, patience: float) -> Any:
    """The answer to a query; asked again, with backoff, while a ``transient`` error lasts (``patience`` s)."""
    handle = client.get_workflow_handle(run_id)
    deadline = time.monotonic() + patience
    delay = 0.1
    while True:
        try:
            return await handle.query(name, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
        except RPCError as exc:
            if not transient(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(2 * delay, 2.0)


async def pending(client: Client, run_id: str, *, patience: float = QUERY_PATIENCE) -> list[dict[str, Any]]:
    """The run's calls waiting for a person (``waiting_for``: approval or reconciliation)."""
    calls: list[dict[str, Any]] = await _query(client, run_id, "pending", list, patience)
    return calls


async def status(client: Client, run_id: str, *, patience: float = QUERY_PATIENCE) -> dict[str, Any]:
    """The run's ``status``, its ``phase`` (``waiting`` for a person, ``reconciling``: its reconcile hooks are
    deciding, ``running`` or ``finished``), steps, output and reason."""
    found: dict[str, Any] = await _query(client, run_id, "status", dict, patience)
    return found


async def refused_by_workers(client: Client, run_id: str) -> str | None:
    """Why the run's workers cannot take it, when its last workflow task failed on a payload they could not
    decrypt (``KeyRefused``, readable in the history whatever the key); None for any other reason or none.

    Read when a run's status goes unanswered: the query fails as the task does, saying less.
    """
    from temporalio.api.enums.v1 import EventType

    last = None
    try:
        async for event in client.get_workflow_handle(run_id).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                last = event.workflow_task_failed_event_attributes.failure
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                last = None
    except RPCError:
        return None  # the history cannot be read either: nothing more to say than the query's error
    if last is None or last.application_failure_info.type != KeyRefused.__name__:
        return None
    return str(last.message)


async def _update(client: Client, run_id: str, name: str, payload: Any) -> str:
    try:
        result: str = await client.get_workflow_handle(run_id).execute_update(name, payload, result_type=str)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
        raise NotWaiting(f"run {run_id}: {message}") from exc
    return result


async def decide(
    client: Client,
    run_id: str,
    call_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    fingerprint: str | None = None,
    by: str = "cli",
) -> str:
    """Approve or deny a waiting call; the run's status after it.

    Without ``fingerprint`` the one of the call as it waits now is used
    (read with a query); with it, a decision for other arguments is refused.
    ``by`` names who decided in the audit log.
    """
    if fingerprint is None:
        found = next((c for c in await pending(client, run_id) if c["call_id"] == call_id), None)
        if found is None:
            raise NotWaiting(f"run {run_id}: call {call_id} is not waiting for approval")
        fingerprint = found["fingerprint"] or ""
    return await _update(client, run_id, "decide", Decision(call_id, fingerprint, approved, reason, by))


async def reconcile(
    client: Client, run_id: str, call_id: str, *, executed: bool, result: str | None = None, by: str = "cli"
) -> str:
    """Say what became of a call whose outcome is unknown (``result``: JSON text); the run's status after it.
    ``by`` names who said so in the audit log."""
    return await _update(client, run_id, "reconcile", Reconciliation(call_id, executed, result, by))
