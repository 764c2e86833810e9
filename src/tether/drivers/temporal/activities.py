"""The I/O of a Temporal run: the model, the tools and their reconcile hooks, as activities.

Activities run on workers, which hold the model credentials, the tools and
the run store. ``call_model`` also judges the reply's calls against the
tools as they are on this worker (strict decoding, tool offered to the
principal, strict schema, approval rule) and returns those verdicts with the
reply: the workflow only replays what was recorded.

The run store holds the run (its row is created by the first save, the run
id being the workflow id): the workflow hands each saving activity only what
happened since the last save (new messages, events, ledger writes) with the
counts the store held before, and ``call_model`` reads the transcript from
the store. So what passes through Temporal per step does not grow with the
run. That transcript is checked (the run's seal, the chain of its messages)
before the model is sent it: a transcript edited in the store fails the
workflow, as the local driver refuses to resume such a run. The saving
itself is the store's ``checkpoint``, as for the local driver; see
``save_run`` for how a retried save is told from a new one.

A tool receives ``idempotency_key = run_id:call_id`` as with the local
driver; the run id is the workflow id, so a retried read-only call carries
the same key as its first attempt.

The worker's ``resolve_principal`` is asked before each call runs, as the
local driver asks: by ``run_tool`` for a read-only call (``AskingToolRequest``),
by ``resolve``, which the workflow runs as a local activity, for a
side-effecting one, before its intent is recorded, and by ``run_tool`` again,
just before its effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tether.core.budget import with_estimated_usage
from tether.core.errors import ConfigurationError, ModelError, TamperedRun
from tether.core.machine import RunState
from tether.core.messages import Message, ToolCall
from tether.drivers.common import principal_now
from tether.drivers.local.subagents import AgentTool
from tether.drivers.temporal.payloads import (
    AskingToolRequest,
    CallModelRequest,
    ChoosingRequest,
    DescribedAnswer,
    ModelOutcome,
    NamedAnswer,
    NamedFailure,
    PrincipalData,
    PrincipalRefused,
    PrincipalResolved,
    ReconcileAnswer,
    ReconciledExecuted,
    ReconciledNotExecuted,
    ReconcileRequest,
    ReplyData,
    Resolution,
    ResolveRequest,
    RetriedResult,
    SaveRequest,
    ToolOutcome,
    ToolRequest,
    ToolResult,
    Unreconciled,
    UnreconciledWithin,
    Verdict,
    verdict_data,
)
from tether.drivers.temporal.workflow import (
    CALL_MODEL,
    DEFAULT_HEARTBEAT_SECONDS,
    RECONCILE,
    RESOLVE,
    RUN_TOOL,
    SAVE,
    fitting,
)
from tether.models.base import Model, ModelRequest
from tether.tools.context import Principal, ToolContext
from tether.tools.tool import DEFAULT_MAX_RESULT_CHARS, Executed, NotExecuted, Tool
from tether.tools.toolbox import Toolbox, result_envelope

if TYPE_CHECKING:
    from tether.drivers.local.runner import PrincipalResolver
    from tether.store.base import RunStore

T = TypeVar("T")


def principal_to_dict(principal: Principal) -> dict[str, Any]:
    return {"id": principal.id, "scopes": sorted(principal.scopes), "roles": sorted(principal.roles)}


def principal_from_data(data: PrincipalData) -> Principal:
    return Principal(data.id, frozenset(data.scopes), frozenset(data.roles))


def principal_data(principal: Principal) -> PrincipalData:
    return PrincipalData(principal.id, tuple(sorted(principal.scopes)), tuple(sorted(principal.roles)))


async def _asked(hook: Callable[..., Any], context: ToolContext, arguments: dict[str, Any]) -> Any:
    """A reconcile hook's verdict; a sync hook in a thread, as a sync tool runs: a slow hook must not stall this
    worker's other runs and queries."""
    if inspect.iscoroutinefunction(hook):
        return await hook(context, arguments)
    verdict = await asyncio.to_thread(hook, context, arguments)
    if asyncio.iscoroutine(verdict):
        verdict = await verdict
    return verdict


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work``, heartbeating meanwhile: if this worker dies, the missed heartbeat lets another retry soon."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return await work
    task = asyncio.ensure_future(work)
    every = max(0.05, timeout.total_seconds() / 3)
    try:
        while not task.done():
            activity.heartbeat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), every)
    finally:
        if not task.done():
            task.cancel()
    return task.result()


class _Tail(Sequence[Message]):
    """A transcript as a checkpoint reads it: its length, and the messages after the first ``start``.

    ``checkpoint`` appends only the messages after those the store holds, so
    the earlier ones need not travel through Temporal; reading one of them is a bug.
    """

    def __init__(self, start: int, new: list[Message]) -> None:
        self.start, self.new = start, new

    def __len__(self) -> int:
        return self.start + len(self.new)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | Sequence[Message]:
        if isinstance(index, slice) or not self.start <= index < len(self):
            raise IndexError(f"message {index} is not in this save (it holds {self.start} to {len(self) - 1})")
        return self.new[index - self.start]


def save_run(store: RunStore, request: SaveRequest) -> None:
    """Write what the workflow hands over since its last save, once, through the store's ``checkpoint``.

    ``request`` holds the run's progress (``RunState.progress``) and config,
    the counts of events and messages the store held before (``events_from``,
    ``messages_from``), the new ``events`` and ``messages``, and the ledger
    writes (``intents``, ``outcomes``, ``cleared``); ``create`` (principal,
    setup) on the run's first save.
    A checkpoint is one transaction, so the store holds either the counts
    before it or the counts after: the first means write it, the second that
    an earlier attempt of this activity did (a retry appends nothing twice).
    Counts in between mean an activity saved the first part of this request
    and then failed (the workflow's log only grows): the rest is written.
    Anything else means the store and the workflow disagree, which no retry
    mends.
    """
    run_id = request.run_id
    new = [Message.from_dict(m) for m in request.messages]
    events = list(request.events)
    intents = list(request.intents)
    state = RunState.from_dict(
        {**request.progress, "run_id": run_id, "config": request.config.to_dict(), "messages": [], "executed": {}}
    )
    before = (request.events_from, request.messages_from)
    after = (before[0] + len(events), before[1] + len(new))
    stored = store.counts(run_id)
    if stored == (0, 0) and request.create is not None:
        store.create_run(state, principal_from_data(request.create.principal), request.create.setup)
    elif stored == (0, 0) and before != (0, 0):
        raise ApplicationError(
            f"run {run_id} is not in this worker's run store ({getattr(store, 'path', store)}): the process that"
            " started it recorded it in another; `tether run --db` and the workers' --db must name the same store",
            type="StoreDiverged",
            non_retryable=True,
        )
    else:
        store.acquire(run_id)  # no other driver (a `tether resume` of this run) writes meanwhile
        stored = store.counts(run_id)
        if stored == after and after != before:
            store.release(run_id)
            return
        if not (before[0] <= stored[0] <= after[0] and before[1] <= stored[1] <= after[1]):
            store.release(run_id)
            raise ApplicationError(
                f"run {run_id}: the store holds {stored[0]} events and {stored[1]} messages, the workflow"
                f" expected {before[0]} and {before[1]} (or {after[0]} and {after[1]})",
                type="StoreDiverged",
                non_retryable=True,
            )
        # An activity that saved and then failed (the model's reply too large, say) left its part stored;
        # the workflow's next save starts where that one did: write only the rest.
        events = events[stored[0] - before[0] :]
        new = new[stored[1] - before[1] :]
        before = stored
        intents = [call for call in intents if store.ledger_entry(run_id, call.call_id) is None]
    state.messages = _Tail(before[1], new)  # type: ignore[assignment]
    store.checkpoint(
        state, events, list(request.outcomes), intents=intents, cleared=list(request.cleared), release=True
    )


def refuse_agent_tools(tools: Iterable[Tool]) -> None:
    """Refuse a sub-agent tool (``Agent.as_tool``): a Temporal run cannot drive a child run with its guarantees.

    Its child would run inside one activity, outside the workflow's history, so a worker dying in it would
    lose the child's progress and the parent's budget could not bound it; rather than run it without them,
    a worker is not made with one.
    """
    for found in tools:
        if isinstance(found, AgentTool):
            raise ConfigurationError(
                f"tool {found.name!r} runs a sub-agent (Agent.as_tool), which the Temporal driver does not run: "
                "run that agent with the local driver (Agent.run, tether run without --engine temporal), or give "
                "the worker the child agent's tools instead"
            )


class Activities:
    """The activities a worker offers for one model and one set of tools."""

    def __init__(
        self,
        model: Model,
        tools: Iterable[Tool],
        store: RunStore,
        *,
        max_tokens: int | None = None,
        resolve_principal: PrincipalResolver | None = None,
    ) -> None:
        """``resolve_principal`` is asked before each call runs (``run_tool``, ``resolve``), as an ``Agent``'s is."""
        self.model = model
        self.store = store  # a SQLiteStore or PostgresStore, shared by the activities of this worker
        self.tools = list(tools)
        self.max_tokens = max_tokens
        self.resolve_principal = resolve_principal
        Toolbox(self.tools)  # two tools of one name are refused now, not in the first run
        refuse_agent_tools(self.tools)
        self._toolboxes: dict[PrincipalData, Toolbox] = {}

    def toolbox(self, principal: PrincipalData) -> Toolbox:
        """The tools ``principal`` may use, built once per principal: its id, scopes and roles (tools read roles)."""
        found = self._toolboxes.get(principal)
        if found is None:
            found = self._toolboxes[principal] = Toolbox(self.tools, principal_from_data(principal))
        return found

    def all(self) -> Sequence[Callable[..., Any]]:
        return [self.save, self.call_model, self.resolve, self.run_tool, self.reconcile]

    @activity.defn(name=SAVE)
    async def save(self, request: SaveRequest) -> None:
        """Checkpoint the run in the store: before an effect, at a pause, at the end."""
        save_run(self.store, request)

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, request: ChoosingRequest | CallModelRequest) -> ModelOutcome:
        """Save what happened since the last save, then one model request on the stored transcript,
        and the verdict on each call of the reply."""
        toolbox = self.toolbox(request.principal)
        saved = request.save
        save_run(self.store, saved)
        try:
            # Checked: the model is sent the stored transcript, which someone who can edit the store could rewrite.
            messages = self.store.messages(saved.run_id)
        except TamperedRun as exc:
            raise ApplicationError(str(exc), type="TamperedRun", non_retryable=True) from None
        if len(messages) != saved.messages_from + len(saved.messages):
            raise ApplicationError(
                f"run {saved.run_id}: the store holds {len(messages)} messages, the workflow"
                f" {saved.messages_from + len(saved.messages)}",
                type="StoreDiverged",
                non_retryable=True,
            )
        timeout = None
        if request.deadline_at is not None:
            info = activity.info()
            timeout = max(0.0, request.deadline_at - info.current_attempt_scheduled_time.timestamp())
        choice = request.tool_choice if isinstance(request, ChoosingRequest) and toolbox.specs else None
        model_request = ModelRequest(
            messages, toolbox.specs, max_tokens=self.max_tokens, timeout=timeout, tool_choice=choice
        )
        try:
            reply = await _heartbeating(self.model.complete(model_request))
        except ModelError as exc:
            return NamedFailure(f"{type(exc).__name__}: {exc}", self.model.name)
        reply, estimated = with_estimated_usage(reply, messages, toolbox.specs, request.counts_tokens)
        verdicts: list[Verdict | None] = []
        for wire in reply.tool_calls:
            if not (isinstance(wire.name, str) and isinstance(wire.arguments, str)):
                verdicts.append(None)  # the machine refuses the reply before judging any call
                continue
            call = ToolCall(wire.id if isinstance(wire.id, str) else "", wire.name, wire.arguments)
            found = toolbox.offered.get(wire.name)
            timeout_s = found.timeout if found is not None else None
            verdicts.append(verdict_data(toolbox.check(call), wire.name, wire.arguments, timeout_s))
        answered_by = reply.answered_by or self.model.name
        fields = (ReplyData.of(reply), estimated, tuple(verdicts), answered_by)
        answer = NamedAnswer(*fields)
        if toolbox.described_by is not None:  # the model read others' words in the tools' descriptions
            answer = DescribedAnswer(*fields, toolbox.described_by)
        return fitting(answer, "the model's reply")  # too large: not asked again, the workflow fails

    @activity.defn(name=RESOLVE)
    async def resolve(self, request: ResolveRequest) -> Resolution:
        """Whether the run's principal may still call the tool, and as whom: asked of ``resolve_principal`` now,
        before the call runs (``principal_now``). Without a resolver, the run's principal as it is."""
        found = await self._principal_now(request.principal, request.tool)
        return PrincipalRefused() if found is None else PrincipalResolved(principal_data(found))

    async def _principal_now(self, principal: PrincipalData, tool: str) -> Principal | None:
        """Who a call of ``tool`` runs for, as ``resolve_principal`` has ``principal`` now; None if it may not."""
        toolbox = self.toolbox(principal)
        return await principal_now(self.resolve_principal, toolbox.principal, toolbox.all.get(tool))

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: ToolRequest) -> ToolOutcome:
        """Run one accepted call; a side-effecting one heartbeats while it runs.

        ``resolve_principal`` is asked first, for an ``AskingToolRequest`` (a
        read) and for a side effect: ``resolve`` answered before its intent
        was saved, and a save that waited or a worker that died since can make
        that answer old, so it is asked again just before the effect (the
        workflow clears the intent of a call refused here). The call runs with
        the tools offered to the run's principal, as locally.
        """
        toolbox = self.toolbox(request.principal)
        call = request.call
        runs_for = None
        if isinstance(request, AskingToolRequest) or not call.read_only:
            runs_for = await _heartbeating(self._principal_now(request.principal, call.tool))
            if runs_for is None:
                return PrincipalRefused()
        executing = toolbox.execute(call, request.run_id, request.deadline_at, principal=runs_for)
        work = asyncio.ensure_future(executing)
        every = max(0.05, (request.heartbeat_seconds or DEFAULT_HEARTBEAT_SECONDS) / 3)
        try:
            while not work.done():
                activity.heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(work), every)
        finally:
            if not work.done():
                work.cancel()
        outcome = work.result()
        answer: ToolOutcome = ToolResult(outcome.content, outcome.untrusted)
        if outcome.retry is not None:  # the workflow's machine counts it against the tool's retries, as locally
            found = toolbox.offered.get(call.tool)
            answer = RetriedResult(outcome.content, outcome.untrusted, outcome.retry, found.retries if found else 0)
        return fitting(answer, f"the result of call {call.call_id} ({call.tool})")  # not run again for nothing

    @activity.defn(name=RECONCILE)
    async def reconcile(self, request: ReconcileRequest) -> ReconcileAnswer:
        """Ask the tool's ``reconcile`` hook what became of a call; ``Unreconciled`` when it cannot tell."""
        toolbox = self.toolbox(request.principal)
        call = request.call
        found = toolbox.offered.get(call.tool)
        if found is None:
            return Unreconciled()
        # A person is asked when the hook cannot tell: the tool's own bound on a result is what theirs is cut to.
        unknown = (
            Unreconciled()
            if found.max_result_chars == DEFAULT_MAX_RESULT_CHARS
            else UnreconciledWithin(found.max_result_chars)
        )
        if found.reconcile is None or call.arguments is None:
            return unknown
        context = ToolContext(request.run_id, call.call_id, toolbox.principal, None)
        hook, arguments = found.reconcile, call.arguments
        try:  # heartbeating: if this worker dies while the hook decides, another asks it again soon
            verdict = await _heartbeating(_asked(hook, context, arguments))
        except Exception:
            return unknown  # a failing hook knows nothing: leave the call to a person
        if isinstance(verdict, Executed):
            result = result_envelope(verdict.result, found.max_result_chars)
            return fitting(ReconciledExecuted(result), f"the reconciled result of {call.call_id}")
        if isinstance(verdict, NotExecuted):
            return ReconciledNotExecuted()
        return unknown
