"""The asyncio driver: performs what the run state machine asks for.

It calls the model, runs tools and reports events; it decides nothing. Tool
calls of one step run in call order, except that consecutive read-only calls
run concurrently: a read never moves across a write, and two writes never
overlap. Cancelling a run records ``cancelled`` in the state (every call
still gets its tool message) before the ``CancelledError`` propagates.

    agent = Agent(OpenAIChatModel(), tools=load_toolset("calc"))
    result = await agent.run("What is 248 times 15?")
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from tether.core.budget import DEFAULT_FALLBACK_ANSWER, Budget, Compat, RunConfig, with_estimated_usage
from tether.core.deferred import deferred
from tether.core.envelope import outcome_code
from tether.core.errors import ApprovalMismatch, ConfigurationError, ModelError, TetherError, ToolDefinitionError
from tether.core.events import (
    APPROVAL_DECIDED,
    APPROVAL_REQUESTED,
    CALL_EXECUTED,
    CALL_FINISHED,
    CALL_RECOVERED,
    CALL_REJECTED,
    CALL_STARTED,
    CALL_VALIDATED,
    INTENT_RECORDED,
    MODEL_REPLIED,
    OUTCOME_RECORDED,
    RECONCILED,
    RECONCILIATION_NEEDED,
    RUN_FINISHED,
    RUN_PAUSED,
    RUN_RESUMED,
    RUN_STARTED,
    STEP_STARTED,
    TEXT,
    TOOL_CALL_DELTA,
    TRANSIENT,
    EventHandler,
    RunEvent,
    digest,
    intent_event,
    outcome_event,
    reconciled_event,
    rejected_event,
    validated_event,
)
from tether.core.settings import ModelSettings, merge_settings, stored_settings, with_settings
from tether.drivers.common import json_object, no_longer_allowed, principal_now, prompt_messages
from tether.drivers.ids import new_id
from tether.drivers.local.handoffs import (
    DEFAULT_NAME,
    Floor,
    Handoff,
    checked_graph,
    checked_name,
    graph,
    listed,
    transfers,
)
from tether.drivers.local.hooks import (
    HistoryProcessor,
    Hook,
    InstructionFunction,
    Instructions,
    instructions_of,
    request_messages,
    validate_output,
)
from tether.models.base import Model, ModelRequest
from tether.models.base import output_mode as checked_output_mode
from tether.tools.context import LOCAL_PRINCIPAL, Principal, RunContext, ToolContext
from tether.tools.tool import Executed, NotExecuted, Tool
from tether.tools.toolbox import Toolbox, ToolResult, result_envelope

if TYPE_CHECKING:
    from tether.core import history, machine
    from tether.core import messages as conversing
    from tether.core import report as reporting
    from tether.core.machine import (
        AwaitApproval,
        AwaitReconciliation,
        CallModel,
        ChildRun,
        Command,
        PendingCall,
        Retried,
        Run,
        RunState,
        RunTools,
        Status,
        Validated,
    )
    from tether.core.messages import Message, ModelReply
    from tether.core.report import RunResult, StepReport
    from tether.drivers import tracing
    from tether.drivers.local import subagents
    from tether.drivers.local.conversation import Conversation, ConversationBudget
    from tether.drivers.local.stream import StreamEvent
    from tether.store.base import RunStore
    from tether.tools.output import OutputMode, OutputSpec
else:
    # A run needs the state machine, makes a report and may be traced; building an Agent needs none of them
    # (issue 19: the cost of the import).
    machine = deferred("tether.core.machine")
    reporting = deferred("tether.core.report")
    tracing = deferred("tether.drivers.tracing")
    history = deferred("tether.core.history")
    conversing = deferred("tether.core.messages")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "PROPOSE_ONLY_REASON",
    "SUSPENDED_REASON",
    "Agent",
    "Approver",
    "Decision",
    "DepsFactory",
    "Driver",
    "PrincipalResolver",
    "ToolChoice",
]


@dataclass(frozen=True, slots=True)
class Decision:
    """An approver's decision on a call: run it (``approved``) or refuse it, with a reason the model sees."""

    approved: bool
    reason: str | None = None


_NOTHING_HIDDEN: frozenset[str] = frozenset()
PROPOSE_ONLY_REASON = "propose_only: the calls of the first step were judged and recorded, not executed"
SUSPENDED_REASON = "suspended: the process driving it is stopping; a resume carries it on"
# Deps for a stored run that is resumed: given the run id and its principal (deps are never stored).
DepsFactory = Callable[[str, Principal], Any]
# "auto", "none", "required" or {"type": "function", "function": {"name": ...}}; None leaves it to the provider.
ToolChoice = str | dict[str, Any] | None
# Decides a call that needs approval: a Decision, True (approve) or False (deny), or None to pause the run
# until someone decides (``tether approve``). A plain function or an async one.
Approver = Callable[["PendingCall"], Awaitable[Decision | bool | None] | Decision | bool | None]
# The run's principal as the application knows it now; None when it no longer exists.
PrincipalResolver = Callable[[Principal], Awaitable[Principal | None] | Principal | None]
# True while `tether serve` builds the Agent it serves: the service gives it its run store and decides its
# approvals over HTTP, so an Agent built then needs neither a store nor an approver of its own.
SERVED: ContextVar[bool] = ContextVar("tether_served", default=False)


class Agent:
    """A model, the tools it may call and the limits it runs under."""

    def __init__(
        self,
        model: Model,
        tools: Iterable[Tool] = (),
        *,
        budget: Budget | None = None,
        compat: Compat | None = None,
        fallback_answer: str | None = None,
        principal: Principal = LOCAL_PRINCIPAL,
        system: str | None = None,
        approver: Approver | None = None,
        max_tokens: int | None = None,
        tool_choice: ToolChoice | Callable[[int], ToolChoice] = None,
        store: RunStore | None = None,
        setup: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        propose_only: bool = False,
        resolve_principal: PrincipalResolver | None = None,
        output_type: Any = None,
        output_mode: OutputMode | None = None,
        deps_factory: DepsFactory | None = None,
        strict_tools: bool | None = None,
        instructions: Instructions | None = None,
        history_processors: Sequence[HistoryProcessor] = (),
        name: str = DEFAULT_NAME,
        handoffs: Iterable[Agent | Handoff] = (),
        handoff_description: str | None = None,
        model_settings: ModelSettings | None = None,
        deps_type: Any = None,
    ) -> None:
        """``propose_only=True`` ends every run after its first step's calls are judged.

        Every gate runs on the calls (decoding, tool offered, schema, loop
        guard, budgets), each verdict is reported (``call_validated`` or
        ``call_rejected``), and then the run is cancelled with reason
        ``PROPOSE_ONLY_REASON``: nothing is executed. ``tether eval`` scores
        models this way with tools that have no implementation.

        ``resolve_principal`` is asked before each call runs, so that a
        principal whose roles or scopes changed since the call was proposed
        (while it waited for approval, say) is judged as it is now: a call it
        may no longer make is answered ``forbidden``, one it may make runs
        with the principal as resolved.

        ``approver(call)`` decides each call that needs approval as the run reaches it: a ``Decision``,
        ``True``/``False``, or ``None`` to pause; a plain function runs on the event loop, so one that
        waits for a person should be ``async``. An Agent with a tool that may need approval (``approval=``,
        or an ``untrusted_output`` tool beside a side-effecting one) needs an approver or a ``store`` (the
        run then pauses until approved): without either it is refused here, since a paused run could not go on.

        ``strict_tools``: offer tools in OpenAI's strict mode (``"strict": true``, every property required,
        the optional ones nullable) where their schema allows. ``None`` (the default) does so only when the
        model says its server enforces it (``model.strict_tools``); otherwise each tool goes with its own
        schema. The host validates every call against the tool's own schema either way.

        ``system`` is a system message put first in the run's transcript (stored with it; a run given a
        ``message_history`` keeps the history's own). ``instructions`` (a string, a function of the run's
        ``RunContext``, plain or async, or a list of them; more with ``@agent.instructions``) are evaluated
        before each model request and sent with that request only, never stored: a resumed run computes
        them again. ``history_processors`` rewrite what each request sends (``tether.drivers.local.hooks``).

        ``model_settings`` (``ModelSettings``: temperature, max_tokens, top_p, seed, stop,
        parallel_tool_calls, extra) go with every run's requests, over the model's own settings and under
        a run's (``run(..., model_settings=...)``), field by field. ``max_tokens=`` is a shorthand for
        ``model_settings=ModelSettings(max_tokens=...)``.

        ``deps_type`` is the type of the ``deps`` runs are given (for type checkers, as pydantic-ai's): deps
        of another class are a ``ConfigurationError`` before the run starts.

        ``handoffs`` (Agents, or ``handoff(agent, scopes=..., description=...)``) offer the model a
        ``transfer_to_<name>`` tool per target, which hands the run to that agent (``tether.drivers.local.handoffs``);
        ``name`` is this agent's (``"agent"`` unless given), ``handoff_description`` what a model offered a transfer
        to it reads about it.
        """
        self.name = checked_name(name)
        self.handoff_description = handoff_description
        self._handoffs: tuple[Handoff, ...] = ()
        self._transfers: list[Tool] = []  # the transfer tool of each handoff
        self.propose_only = propose_only
        self.model = model
        self.tools = _checked(model, tools, principal)
        if (found := _subagents()) is not None:
            found.check_tools(self.tools, store)
        if (
            store is None
            and approver is None
            and not propose_only
            and not SERVED.get()
            and (why := approval_reason(self.tools))
        ):
            raise ConfigurationError(
                f"{why}, but the Agent has neither an approver nor a store: pass approver=... (a function "
                "returning Decision, True or False) or store=SQLiteStore(...) so that the run pauses until "
                "someone approves (`tether approve`)"
            )
        self.fallback_answer = fallback_answer  # None: a run that ends repair_exhausted has no output
        self.strict_tools = bool(getattr(model, "strict_tools", False)) if strict_tools is None else strict_tools
        self.toolbox = Toolbox(self.tools, principal, strict=self.strict_tools)
        self.output = _output_spec(model, self.tools, output_type, output_mode, self.strict_tools)
        self.output_mode = output_mode
        self._output_type = output_type
        self._outputs: dict[Any, OutputSpec | None] = {}  # the specs of per-run output types, each built once
        self.deps_factory = deps_factory
        self.deps_type = deps_type
        self._toolboxes: dict[Principal, Toolbox] = {principal: self.toolbox}
        self.store = store
        self.setup = setup or {}
        if max_tokens is not None and model_settings is not None and model_settings.max_tokens is not None:
            raise ConfigurationError("max_tokens is given twice: pass it in model_settings only")
        shorthand = None if max_tokens is None else ModelSettings(max_tokens=max_tokens)
        self.model_settings = checked(model, merge_settings(shorthand, model_settings))
        self.config = RunConfig(budget or Budget(), compat or Compat(), fallback_answer or DEFAULT_FALLBACK_ANSWER)
        self.system = system
        self.approver = approver
        # Whether a sub-agent's own approver decides its calls (``subagents``); a service, whose approvals are
        # all decided by people over HTTP, turns it off for the whole tree.
        self.sub_approvers = True
        self.parent_run: str | None = None  # on a sub-agent's copy bound to a run: the run whose child runs it drives
        self.tool_choice = tool_choice
        self.clock = clock
        self.resolve_principal = resolve_principal
        self._instructions = instructions_of(instructions)
        self.history_processors = tuple(Hook(p, 1, "a history processor") for p in history_processors)
        self.output_validators: list[Hook] = []
        if handoffs:
            self.add_handoffs(*listed(handoffs))

    @property
    def handoffs(self) -> tuple[Handoff, ...]:
        """The transfers this agent offers its model, in the order given."""
        return self._handoffs

    def add_handoffs(self, *targets: Agent | Handoff) -> None:
        """Offer the model a transfer to each of ``targets`` too: for a cycle (A→B→A), ``a.add_handoffs(b)``.

        Checked at once (names, a tool of the same name, the graph it makes); every run checks its graph again.
        """
        found, tools = transfers(self.name, self.tools, (*self._handoffs, *targets))
        checked_graph(self, approval_reason, found)
        self._handoffs, self._transfers = found, tools
        self.toolbox = Toolbox([*self.tools, *tools], self.toolbox.principal, strict=self.strict_tools)
        self._toolboxes = {self.toolbox.principal: self.toolbox}

    def handoff_graph(self) -> dict[str, Agent]:
        """Every agent this one reaches by handoffs, itself first, by name (``result.last_agent`` is one)."""
        return {name: agent for name, agent in graph(self).items() if isinstance(agent, Agent)}

    def instructions(self, function: InstructionFunction) -> InstructionFunction:
        """Add ``function`` (of the run's ``RunContext``, or of nothing) to the Agent's instructions.

        Used as a decorator: ``@agent.instructions``.
        """
        self._instructions = (*self._instructions, *instructions_of(function))
        return function

    def output_validator(self, function: F) -> F:
        """Check each run's final answer with ``function`` before the run takes it: ``@agent.output_validator``.

        ``function(output)`` or ``function(ctx, output)``, plain or async, gets the answer (its typed value
        with an ``output_type``, else its text) and may return a replacement (``None`` keeps it). Raising
        ``tether.Retry("why")`` refuses it: ``why`` goes back to the model as a correction, which counts against
        the repair budget (``Budget.max_repairs``); past it the run ends ``repair_exhausted``.
        """
        self.output_validators.append(Hook(function, 1, "an output validator"))
        return function

    def as_tool(self, name: str | None = None, description: str | None = None) -> subagents.AgentTool:
        """This agent as a tool of another (a sub-agent): each call runs it as a child run of the caller's run.

        The model calls it with ``{"input": "..."}``; the child runs on that input and its answer is the result.
        The child shares its parent run's principal, store, taint, approver (unless it has its own) and budget
        (what is left of it): ``tether.drivers.local.subagents``. ``name`` defaults to ``agent``, ``description``
        to the agent's ``system`` message.
        """
        from tether.drivers.local import subagents  # loaded by the agents that delegate

        return subagents.agent_tool(self, name, description)

    def output_spec(self, output_type: Any) -> OutputSpec | None:
        """The ``OutputSpec`` of a run's ``output_type`` (the Agent's for ``None``), built once per type."""
        if output_type is None or output_type is self._output_type:
            return self.output
        try:
            return self._outputs[output_type]
        except TypeError:  # a JSON Schema dict: not a key
            return _output_spec(self.model, self.tools, output_type, self.output_mode, self.strict_tools)
        except KeyError:
            spec = _output_spec(self.model, self.tools, output_type, self.output_mode, self.strict_tools)
            self._outputs[output_type] = spec
            return spec

    def _check_deps(self, deps: Any) -> None:
        """Refuse ``deps`` that are not an instance of the Agent's ``deps_type`` (when that is a class)."""
        kind = self.deps_type
        if deps is None or kind is None:
            return
        try:
            if isinstance(deps, kind):
                return
        except TypeError:
            return  # a type isinstance cannot check (dict[str, int], a Protocol): for type checkers only
        raise ConfigurationError(f"deps is a {type(deps).__name__}, not the Agent's deps_type {kind.__name__}")

    @property
    def max_tokens(self) -> int | None:
        """The most tokens a reply may have, as the Agent's model settings say (None: the model's own)."""
        return None if self.model_settings is None else self.model_settings.max_tokens

    def driver(
        self,
        prompt: str | Sequence[Message],
        *,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        deps: Any = None,
        principal: Principal | None = None,
        config: RunConfig | None = None,
        turn: tuple[str, int, int] | None = None,
        untrusted: Mapping[str, str] | None = None,
        output_type: Any = None,
        instructions: Instructions | None = None,
        message_history: Sequence[Message] | None = None,
        floor: str | None = None,
        parent: str | None = None,
        model_settings: ModelSettings | None = None,
    ) -> Driver:
        """A driver for a new run. ``config`` overrides the Agent's; ``turn`` marks a conversation's turn,
        ``untrusted`` the results among earlier turns' messages that taint it (``Run.new``), ``parent`` the run
        whose call this run is the child run of (a sub-agent's).

        ``output_type`` and ``instructions`` override the Agent's for this run, ``model_settings`` the Agent's
        settings field by field (stored with the run). ``message_history`` (checked first:
        ``tether.core.history``) goes before the prompt; the Agent's ``system`` is then not added. ``floor``
        names the agent of this one's handoff graph that answers first (a conversation's next turn).
        """
        self._check_deps(deps)
        settings = self.model_settings
        if model_settings is not None:
            settings = checked(self.model, merge_settings(settings, model_settings))
        handoffs = None
        if self._handoffs or floor is not None:
            handoffs = Floor.open(self, floor, output_type, instructions is not None, approval_reason)
        toolbox = self.toolbox_for(principal or self.toolbox.principal)
        output = self.output if output_type is None else self.output_spec(output_type)
        messages = prompt_messages(prompt)
        new_from = 0 if turn is None else turn[2]  # where the run's own messages start: after a history
        if turn is None and not isinstance(prompt, str) and any(m.role == "tool" for m in messages):
            # Tool results in a prompt were written by neither the principal nor this run: they taint as a history's.
            untrusted = {**history.untrusted_results(prompt), **(untrusted or {})}
        if message_history is not None and (given := history.given_history(message_history, messages)):
            messages, new_from = [*given, *messages], len(given)
            untrusted = {**history.untrusted_results(message_history), **(untrusted or {})}
        if self.system is not None and not new_from and not (messages and messages[0].role == "system"):
            messages.insert(0, conversing.Message("system", self.system))
        if output is not None and output.mode == "prompted":
            at = 1 if messages and messages[0].role == "system" else 0
            prompted = conversing.Message("system", output.instructions())
            if prompted not in messages[: at + 1]:  # a conversation's later turn has it already
                messages.insert(new_from if message_history else at, prompted)
        run = machine.Run.new(run_id or new_id(), messages, toolbox, config or self.config, output, untrusted)
        if toolbox.described_by is not None:
            run.read_descriptions(toolbox.described_by)
        if self.store is not None:
            setup = with_settings({**self.setup, "new_from": new_from} if new_from else self.setup, settings)
            self.store.create_run(run.state, toolbox.principal, setup, turn=turn, parent=parent)
        driver = Driver(self, run, toolbox, on_event, deps, settings)
        driver.output, driver.prompt_from = output, new_from
        if instructions is not None:
            driver.instructions = instructions_of(instructions)
        if handoffs is not None:
            handoffs.seat(driver)
        return driver

    def conversation(
        self,
        conversation_id: str | None = None,
        *,
        principal: Principal | None = None,
        budget: ConversationBudget | None = None,
    ) -> Conversation:
        """A new conversation, or (with a store) the stored one named ``conversation_id`` to go on with."""
        from tether.drivers.local.conversation import open_conversation  # loaded by the agents that converse

        return open_conversation(self, conversation_id, principal, budget)

    def toolbox_for(self, principal: Principal) -> Toolbox:
        """The tools ``principal`` may use (one Toolbox per principal, built once)."""
        toolbox = self._toolboxes.get(principal)
        if toolbox is None:
            tools = [*self.tools, *self._transfers]
            toolbox = self._toolboxes[principal] = Toolbox(tools, principal, strict=self.strict_tools)
        return toolbox

    def resume(
        self,
        run_id: str,
        *,
        on_event: EventHandler | None = None,
        deps: Any = None,
        output_type: Any = None,
        instructions: Instructions | None = None,
    ) -> Driver:
        """A driver for a stored run, under the principal it was started for.

        Deps are never stored: pass ``deps=``, or give the Agent a
        ``deps_factory(run_id, principal)`` that rebuilds them. Nor are a run's
        ``output_type`` and ``instructions``: the Agent's apply unless given
        here again; instructions are computed afresh for each request.
        """
        if self.store is None:
            raise ValueError("resuming needs an Agent with a store")
        self.store.acquire(run_id, to_drive=True)
        handoffs = None
        try:
            stored = self.store.load(run_id)
            from tether.drivers.local.durable import ended_parent  # loaded by the agents that resume

            if (why := ended_parent(self.store, stored)) is not None:
                raise ApprovalMismatch(f"{why}: it does not go on alone")
            if stored.parent_id is not None and stored.parent_id != self.parent_run:
                # Alone, it would lose what its parent knows: who wrote its prompt (the parent's model), the text
                # its sink values may come from, the budget left. The parent's resume carries it on.
                raise ApprovalMismatch(
                    f"run {run_id} is a child run of run {stored.parent_id}: it goes on only with its parent"
                    f" (resume run {stored.parent_id})"
                )
            if self._handoffs or stored.state.agent is not None:  # the floor: found in this agent's graph
                handoffs = Floor.open(self, stored.state.agent, output_type, instructions is not None, approval_reason)
            settings = checked(self.model, stored_settings(stored.setup))  # it goes on with its own settings
            if deps is None and self.deps_factory is not None:
                deps = self.deps_factory(run_id, stored.principal)
            self._check_deps(deps)
        except BaseException:
            self.store.release(run_id)  # refused (tampered with, unreadable, not ours): leave the run as it was
            raise
        toolbox = self.toolbox_for(stored.principal)
        output = self.output_spec(output_type)
        driver = Driver(self, machine.Run(stored.state, toolbox, output), toolbox, on_event, deps, settings)
        driver.output, driver.prompt_from = output, int(stored.setup.get("new_from", 0))
        if instructions is not None:
            driver.instructions = instructions_of(instructions)
        if handoffs is not None:
            handoffs.seat(driver)
        return driver

    async def run(
        self,
        prompt: str | Sequence[Message],
        *,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        deps: Any = None,
        principal: Principal | None = None,
        output_type: Any = None,
        instructions: Instructions | None = None,
        message_history: Sequence[Message] | None = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult:
        """Run to a finish or a pause. ``deps`` reach tools as ``context.deps``; ``principal``, ``output_type`` and
        ``instructions`` override the Agent's, ``model_settings`` the Agent's settings field by field;
        ``message_history`` goes before the prompt (see ``driver``)."""
        return await self.driver(
            prompt,
            run_id=run_id,
            on_event=on_event,
            deps=deps,
            principal=principal,
            output_type=output_type,
            instructions=instructions,
            message_history=message_history,
            model_settings=model_settings,
        ).run()

    def run_sync(
        self,
        prompt: str | Sequence[Message],
        *,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        deps: Any = None,
        principal: Principal | None = None,
        output_type: Any = None,
        instructions: Instructions | None = None,
        message_history: Sequence[Message] | None = None,
        model_settings: ModelSettings | None = None,
    ) -> RunResult:
        """``run`` for a script without an event loop: ``agent.run_sync("...")``.

        Each call runs its own event loop; the model's client for that loop is
        closed when it ends, so calling it again (or ``asyncio.run`` after it)
        is fine.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(
                self.run(
                    prompt,
                    run_id=run_id,
                    on_event=on_event,
                    deps=deps,
                    principal=principal,
                    output_type=output_type,
                    instructions=instructions,
                    message_history=message_history,
                    model_settings=model_settings,
                )
            )
        raise ConfigurationError("run_sync was called inside a running event loop: use `await agent.run(...)` there")

    async def stream(
        self,
        prompt: str | Sequence[Message],
        *,
        run_id: str | None = None,
        deps: Any = None,
        principal: Principal | None = None,
        output_type: Any = None,
        instructions: Instructions | None = None,
        message_history: Sequence[Message] | None = None,
        model_settings: ModelSettings | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run and yield typed events as they happen (``tether.drivers.local.stream``); the last is ``RunFinished``.

        The model's reply is streamed for this run whatever the adapter's
        default. Leaving the loop early cancels the run (recorded as
        ``cancelled``).
        """
        driver = self.driver(
            prompt,
            run_id=run_id,
            deps=deps,
            principal=principal,
            output_type=output_type,
            instructions=instructions,
            message_history=message_history,
            model_settings=model_settings,
        )
        from tether.drivers.local.stream import RunFinished, Translator  # loaded by the agents that stream

        queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
        speaker = driver.floor.name if driver.handoffs is not None else None
        translator = Translator(driver.floor.model.name, driver.arguments, self.clock, queue.put_nowait, speaker)
        driver.on_event = translator.feed
        driver.stream_model = True
        task = asyncio.create_task(driver.run())
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            result = task.result()
            translator.close_step()
            while not queue.empty():
                if (late := queue.get_nowait()) is not None:
                    yield late
            clock = self.clock()
            yield RunFinished(
                at=clock,
                run_id=result.run_id,
                step=result.state.steps,
                model=translator.model,
                agent=translator.agent,
                result=result,
            )
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def aclose(self) -> None:
        """Close the model's client for the running event loop."""
        await self.model.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Driver:
    """Drives one run to a finish or a pause (approval without an approver)."""

    def __init__(
        self,
        agent: Agent,
        run: Run,
        toolbox: Toolbox,
        on_event: EventHandler | None,
        deps: Any = None,
        settings: ModelSettings | None = None,
    ) -> None:
        self.agent = agent
        self.deps = deps  # for tools only: never stored, never sent to the model
        self.settings = settings  # the run's model settings: the agent's and its own, stored with its setup
        self.run_machine = run
        self.state: RunState = run.state  # the machine's, which it never replaces: read on every step
        self.toolbox = toolbox
        self.store = agent.store
        self.on_event = on_event
        self.steps: list[StepReport] = []
        self._step_start = 0  # where the current step's assistant message will land
        self._reported: set[str] = set()  # call ids of the current step with an event
        # The current step's assistant message and its calls' arguments by call id, made once for the step's
        # rejected calls (``_arguments_sent``): looked up call by call, a reply of many refusals was quadratic.
        self._sent: tuple[Message | None, dict[str, str]] = (None, {})
        self._finished: dict[str, str] = {}  # results of the current step's executed calls
        self._untrusted: set[str] = set()  # call ids of the current step whose result taints the run
        self._unsaved: list[RunEvent] = []  # events not yet checkpointed (durable runs)
        self._outcomes: list[tuple[PendingCall, str]] = []  # ledger outcomes for the next checkpoint
        self._cleared: list[str] = []  # call ids found never to have run, for the next checkpoint
        self._lease_timer: asyncio.TimerHandle | None = None
        self._renewal: asyncio.Future[None] | None = None  # a renewal on a thread (a remote store)
        self._traced = False  # spans for this drive (``tracing.active()``, at each ``run``)
        self._quiet = False  # no store and no listener for this drive: its events are not even made
        # This drive began the run, so every ledger row the run has is one it wrote: a call it has not recorded
        # has none (the machine never runs one call id twice), and is not looked up before its intent.
        self._began = False
        self._effect_unsaved = False  # a side effect's outcome is waiting for the next commit
        self._suspending = False  # stop at the next safe point and hand the run on (``suspend``)
        self._task: asyncio.Task[Any] | None = None  # the task driving, while it does
        self._asking_model = False
        self._cancelled_to_suspend = False
        self.stream_model = False  # ask the model to stream (Agent.stream)
        self.on_result: Callable[[RunResult], None] | None = None  # a conversation notes its turn's result
        self.prompt_from = 0  # a conversation's turn: where its own messages start (the prompt event's text)
        self.arguments: dict[str, dict[str, Any] | None] = {}  # call id -> decoded arguments, for listeners
        self.listener_errors = 0
        self.output: OutputSpec | None = agent.output  # this run's output type (``run(..., output_type=)``)
        self.instructions: tuple[str | Hook, ...] = agent._instructions  # this run's (``run(..., instructions=)``)
        self._retried: dict[str, Retried] = {}  # calls of the current step whose tool raised Retry
        self._replaced: Any = None  # the answer as an output validator replaced it
        self.floor = agent  # the agent whose model, tools and instructions the run uses now (handoffs)
        self.handoffs: Floor | None = None  # a run whose agent has handoffs: who has the floor
        # Sub-agent calls (``subagents.delegate``): the agents of the runs above this one, this step's child runs,
        # those waiting for a person (and the calls they wait on), the child being driven now.
        self.lineage: tuple[Any, ...] = ()
        self.children: dict[str, ChildRun] = {}
        self.waiting: dict[str, tuple[str, Status]] = {}
        self.child_pending: list[dict[str, Any]] = []
        self.child: Driver | None = None

    def suspend(self) -> None:
        """Stop driving at the next safe point and leave the run, as it is, to another driver.

        For a process that is stopping (``tether serve`` on SIGTERM): a model
        request in flight is abandoned (it is asked again on resume); a tool
        call in flight finishes, and no other starts. The state is then
        checkpointed and the run released, not ended: ``run()`` returns its
        live status with the reason ``SUSPENDED_REASON``, and a resume, here
        or in another process, carries it on (an effect that had happened is
        recorded, one that had not is run once).
        """
        self._suspending = True
        if self.child is not None:
            self.child.suspend()
        if self._asking_model and self._task is not None and not self._cancelled_to_suspend:
            self._cancelled_to_suspend = True
            self._task.cancel()

    def __await__(self) -> Generator[Any, None, RunResult]:
        """``await agent.resume(run_id)`` drives the run, like ``.run()``."""
        return self.run().__await__()

    def _emit(self, kind: str, **data: Any) -> None:
        if self._quiet:
            return  # no store to log it, no listener to hear it: never made
        event = RunEvent(kind, self.state.run_id, self.state.steps, data, self.agent.clock())
        if self.store is None or (kind in TRANSIENT and not self._unsaved):
            self._deliver(event)
        else:
            self._unsaved.append(event)  # a transient event waits behind stored ones: order is kept

    def _deliver(self, event: RunEvent) -> None:
        """Hand ``event`` to the listener; a listener that raises is reported, never allowed to stop the run."""
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception as exc:
            self.listener_errors += 1
            if self.listener_errors == 1:
                warnings.warn(
                    f"an on_event listener raised {type(exc).__name__}: {exc} (on a {event.kind} event of run "
                    f"{event.run_id}); the run goes on, failures are counted in RunResult.listener_errors",
                    RuntimeWarning,
                    stacklevel=2,
                )

    async def _flush(self, *, release: bool = False, intent: PendingCall | None = None) -> None:
        """Checkpoint the state with the events and ledger writes since the last one, then let listeners hear of them.

        Called before anything the events could lead to (a model request, a
        side-effecting call, a pause, the end): events that happen back to
        back share one transaction, and no listener hears of an event that is
        not stored. A read-only call needs no checkpoint before it: if the
        process dies during it, resume simply runs it again. With ``intent``
        the checkpoint records it in the ledger and is on disk (fsynced)
        before this returns.
        """
        if self.store is None:
            return
        events, self._unsaved = self._unsaved, []
        outcomes, self._outcomes = self._outcomes, []
        cleared, self._cleared = self._cleared, []
        effect, self._effect_unsaved = self._effect_unsaved, False
        try:
            await self._stored(
                self.store.checkpoint,
                self.state,
                [(e.kind, e.data, e.step, e.at) for e in events if e.kind not in TRANSIENT],
                outcomes,
                intents=() if intent is None else [intent],
                cleared=cleared,
                release=release,
                sync=intent is None,
            )
        except BaseException:
            # Not saved: they wait for the next checkpoint (the one saving what can be saved as the run stops),
            # so that no state is ever stored without the events and ledger writes that led to it. The intent
            # this one held was not recorded, and its event does not say it was.
            if intent is not None:
                events = [e for e in events if not (e.kind == INTENT_RECORDED and e.data.get("id") == intent.call_id)]
            self._unsaved, self._outcomes = events + self._unsaved, outcomes + self._outcomes
            self._cleared, self._effect_unsaved = cleared + self._cleared, effect or self._effect_unsaved
            raise
        if intent is not None:
            await self.store.synced()  # one disk sync shared by the runs reaching an intent together
        for event in events:
            self._deliver(event)

    async def _stored(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call: in place for a local file, on a thread for a store across a network (``remote``),
        so that one slow query holds up only its own run, never the event loop."""
        if self.store is not None and self.store.remote:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)

    def _send(self, event: Any) -> Command:
        if self.instructions or self.floor._instructions:
            self._trust_instructions()
        return self.run_machine.send(event)

    def _trust_instructions(self) -> None:
        """Make the run's fixed instructions trusted text for argument provenance (``core.provenance``).

        Only the strings: what a function computes for one request is not
        known when a call is traced again after a resume, so it is no source.
        """
        for found in (*self.instructions, *self.floor._instructions):
            if isinstance(found, str):
                self.run_machine.provenance.host_text(found)

    async def run(self) -> RunResult:
        resumed = self.state.status is not machine.Status.READY
        self._began = not resumed
        # Decided once a drive: with no tracer provider configured, no span, attribute or context is made.
        self._traced = tracing.active()
        return await tracing.traced_run(self.state.run_id, self.agent.model, resumed, self._run, traced=self._traced)

    async def _run(self) -> RunResult:
        self._task = asyncio.current_task()
        self._quiet = self.store is None and self.on_event is None
        if self.store is not None:
            self._renew_lease_later()
        try:
            result = await self._drive()
        except asyncio.CancelledError:
            # Cancelled while suspending (its grace period over): the run is handed on as it is, not ended.
            if not self.state.status.terminal and not self._suspending:
                self._send(machine.Cancel(self.agent.clock(), finished=dict(self._finished)))
                self._sync_last_step()
                self._emit(RUN_FINISHED, status=machine.Status.CANCELLED.value, output=None, reason="cancelled")
            with contextlib.suppress(TetherError):  # the cancellation is the news; a failed save must not hide it
                await self._flush(release=True)
            raise
        except BaseException:
            # Already failing (the store itself, perhaps): save what can be saved, keep the first error.
            with contextlib.suppress(TetherError):
                await self._flush(release=True)
            raise
        finally:
            if self._lease_timer is not None:
                self._lease_timer.cancel()
                self._lease_timer = None
        if self.store is not None:
            await self._flush(release=True)
        if self.on_result is not None:
            self.on_result(result)
        return result

    async def _drive(self) -> RunResult:
        clock = self.agent.clock
        if self.state.status is machine.Status.READY:
            if not self._quiet:
                prompt = "\n".join(m.content or "" for m in self.state.messages[self.prompt_from :] if m.role == "user")
                self._emit(RUN_STARTED, principal=self.toolbox.principal.id, prompt=prompt)
            command = self._send(machine.Begin(clock()))
        else:
            command = await self._resume_command()
        while True:
            if self._suspending and not self.state.status.terminal:
                self._emit(RUN_PAUSED, status=self.state.status.value, reason=SUSPENDED_REASON)
                return self._result(self.state.status, None, SUSPENDED_REASON)
            match command:
                case machine.RunTools() | machine.AwaitApproval() if self.agent.propose_only:
                    command = self._stop_proposed()
                case machine.CallModel():
                    command = await self._call_model(command)
                case machine.RunTools():
                    command = await self._run_tools(command)
                case machine.AwaitApproval():
                    next_command = await self._ask_approver(command)
                    if next_command is None:
                        return self._pause("waiting for approval")
                    command = next_command
                case machine.AwaitChildren():
                    waiting = ", ".join(f"{run} ({status.value})" for run, status in self.waiting.values())
                    return self._pause(f"waiting with its child run {waiting or ', '.join(command.children.values())}")
                case machine.AwaitReconciliation():
                    next_command = await self._reconcile(command)
                    if next_command is None:
                        return self._pause("waiting for reconciliation: the outcome of a call is unknown")
                    command = next_command
                case machine.Finish():
                    self._sync_last_step()
                    for call in self.steps[-1].calls if self.steps else ():
                        if call.id not in self._reported and call.result:
                            self._reject(call.id, call.tool, call.result)
                    self._emit(RUN_FINISHED, status=command.status.value, output=command.output, reason=command.reason)
                    return self._result(command.status, command.output, command.reason)

    def _stop_proposed(self) -> Command:
        """Report each call's verdict, then cancel the run before anything runs (``propose_only``)."""
        for p in self.state.pending:
            self._reported.add(p.call_id)
            if p.execute:
                self._emit(CALL_VALIDATED, id=p.call_id, tool=p.tool, read_only=p.read_only)
            else:
                self._reject(p.call_id, p.tool, p.result or "")
        return self._send(machine.Cancel(self.agent.clock(), reason=PROPOSE_ONLY_REASON))

    def _pause(self, reason: str) -> RunResult:
        self._note_waiting_calls()
        self._emit(RUN_PAUSED, status=self.state.status.value, reason=reason)
        return self._result(self.state.status, None, reason)

    def _note_waiting_calls(self) -> None:
        """The current step's calls as the run pauses: those waiting for a person, those that will run, the refused."""
        if not self.steps:  # resumed while paused
            self.steps.append(reporting.StepReport(self.state.steps))
        if self.state.status is machine.Status.AWAITING_APPROVAL:
            waiting, outcome = {p.call_id for p in self.state.undecided()}, "awaiting_approval"
        else:
            waiting, outcome = set(self.state.unknown), "awaiting_reconciliation"
        reports = []
        for p in self.state.pending:
            report = reporting.CallReport(p.call_id, p.tool, executed=False, arguments=p.arguments)
            if p.call_id in waiting:
                report.outcome = outcome
            elif not p.execute:
                report.result = p.result or ""
                report.outcome = outcome_code(report.result)
            reports.append(report)
        self.steps[-1].calls = reports

    async def _resume_command(self) -> Command:
        """Where a stored run goes on; intents without outcomes become unknown outcomes."""
        self._emit(RUN_RESUMED, status=self.state.status.value)
        if self.state.status is machine.Status.AWAITING_TOOLS and self.store is not None:
            unknown = []
            for call in self.state.pending:
                entry = (
                    await self._stored(self.store.ledger_entry, self.state.run_id, call.call_id)
                    if call.execute
                    else None
                )
                if entry is not None and entry.outcome is None:
                    unknown.append(call.call_id)
            if unknown:
                self._emit(RECONCILIATION_NEEDED, ids=unknown)
                return self._send(machine.OutcomeUnknown(tuple(unknown), self.agent.clock()))
        self._trust_instructions()
        command = self.run_machine.pending_command()
        if isinstance(command, machine.AwaitChildren):  # the child runs it waited with may have been decided: go on
            return self._send(machine.ChildResumed(self.agent.clock()))
        return command

    async def _reconcile(self, command: AwaitReconciliation) -> Command | None:
        """Ask each unknown call's ``reconcile`` hook; None when a person must decide."""
        next_command: Command = command
        for call in command.calls:
            found = self.toolbox.offered.get(call.tool)
            if found is None or found.reconcile is None or call.arguments is None:
                continue
            context: ToolContext[Any] = ToolContext(
                self.state.run_id, call.call_id, self.toolbox.principal, None, self.deps
            )
            try:
                verdict = found.reconcile(context, call.arguments)
                if asyncio.iscoroutine(verdict):
                    verdict = await verdict
            except Exception:
                continue  # a failing hook knows nothing: leave the call to a person
            if isinstance(verdict, Executed):
                next_command = self.settle(
                    call,
                    executed=True,
                    result=result_envelope(verdict.result, found.max_result_chars),
                    by="reconcile hook",
                )
            elif isinstance(verdict, NotExecuted):
                next_command = self.settle(call, executed=False, result=None, by="reconcile hook")
        return None if isinstance(next_command, machine.AwaitReconciliation) else next_command

    def settle(self, call: PendingCall, *, executed: bool, result: str | None, by: str) -> Command:
        """Record what became of a call with an unknown outcome; the ledger write rides on the next checkpoint."""
        command = self._send(machine.Reconciled(call.call_id, executed, self.agent.clock(), result))
        if executed and result is not None:
            self._outcomes.append((call, result))
        elif not executed:
            self._cleared.append(call.call_id)
        self._emit(RECONCILED, **reconciled_event(call, executed, result, by))
        return command

    def _result(self, status: Status, output: str | None, reason: str | None) -> RunResult:
        value: Any = output
        if status is machine.Status.REPAIR_EXHAUSTED and self.agent.fallback_answer is None:
            value = None  # the machine's fallback sentence would read like an answer
        spec = self.output
        if status is machine.Status.COMPLETED and self._replaced is not None:
            value = self._replaced  # an output validator's replacement, as it returned it
        elif spec is not None:  # only a completed run has an answer, and the machine has validated it
            value = spec.decode(output) if status is machine.Status.COMPLETED and output is not None else None
        return reporting.RunResult(
            self.state.run_id,
            status,
            value,
            reason,
            self.steps,
            self.state,
            self.listener_errors,
            self.prompt_from,
            self.floor.name,
            list(self.child_pending),
        )

    async def _call_model(self, command: CallModel) -> Command:
        clock = self.agent.clock
        self.steps.append(reporting.StepReport(command.step))
        self._step_start = len(self.state.messages)
        self._reported = set()
        self._emit(STEP_STARTED)
        on_text = on_tool_delta = None
        if self.on_event is not None:
            on_text = lambda piece: self._emit(TEXT, text=piece)  # noqa: E731
            on_tool_delta = lambda index, ident, name, piece: self._emit(  # noqa: E731
                TOOL_CALL_DELTA, index=index, id=ident, tool=name, arguments=piece
            )
        timeout = None if command.deadline_at is None else max(0.0, command.deadline_at - clock())
        if self.handoffs is not None:
            command = self.handoffs.request(command)
        choice = self.floor.tool_choice
        policy = command.tool_choice if self.toolbox.specs else None  # a choice about no tools means nothing
        specs, response_format = self.toolbox.specs, None
        spec = self.output
        if spec is not None and spec.mode == "tool":
            specs = [*specs, spec.tool_spec()]
        elif spec is not None and spec.mode == "native":
            response_format = spec.response_format()
        messages: Sequence[Message] = command.messages
        hidden = _NOTHING_HIDDEN
        if self.instructions or self.floor.history_processors:
            messages, hidden = await self._request_messages(command)
        settings = self.settings
        if self.floor is not self.agent and self.floor.model_settings is not None:  # a handoff's target
            settings = checked(self.floor.model, merge_settings(settings, self.floor.model_settings))
        request = ModelRequest(
            messages,
            specs,
            max_tokens=None if settings is None else settings.max_tokens,
            timeout=timeout,
            tool_choice=policy or (choice(command.step) if callable(choice) else choice),
            on_text=on_text,
            response_format=response_format,
            stream=True if self.stream_model else None,
            on_tool_delta=on_tool_delta,
            settings=settings,
        )
        if self.store is not None:  # nothing to checkpoint in memory: not even the coroutine is made
            await self._flush()
        self._asking_model = True
        try:
            if self._traced:
                reply = await tracing.traced_chat(self.floor.model, request, self.state.run_id)
            else:
                reply = await self.floor.model.complete(request)
        except asyncio.CancelledError:
            if self._cancelled_to_suspend:
                self._cancelled_to_suspend = False
                task = asyncio.current_task()
                if task is not None and task.uncancel() == 0:  # ``suspend`` alone cancelled it
                    return command  # the request is abandoned; the run still awaits the model
            raise
        except ModelError as exc:
            self._emit(MODEL_REPLIED, error=str(exc), model=self.agent.model.name)
            return self._send(machine.ModelFailed(f"{type(exc).__name__}: {exc}", clock()))
        finally:
            self._asking_model = False
        counts_tokens = self.state.config.budget.counts_tokens
        reply, estimated = with_estimated_usage(reply, request.messages, request.tools, counts_tokens)
        self._note_reply(reply, estimated)
        validated = await self._validated(reply) if self.floor.output_validators else None
        return self._send(
            machine.ModelReplied(reply, clock(), usage_estimated=estimated, hidden=hidden, validated=validated)
        )

    def _context(self, step: int) -> RunContext[Any]:
        return RunContext(self.state.run_id, self.toolbox.principal, step, self.deps)

    async def _request_messages(self, command: CallModel) -> tuple[Sequence[Message], frozenset[str]]:
        """The messages this request sends (history processors, instructions), and the untrusted results left out."""
        context = self._context(command.step)
        processors, instructions = self.floor.history_processors, self.instructions
        return await request_messages(command.messages, processors, instructions, context, self.state.untrusted)

    async def _validated(self, reply: ModelReply) -> Validated | None:
        """The output validators' verdict on the answer ``reply`` would end the run with (``Run.proposed_answer``)."""
        self._replaced = None
        answer = self.run_machine.proposed_answer(reply)
        if answer is None:
            return None
        spec = self.output
        value = spec.decode(answer) if spec is not None else answer
        output, refused = await validate_output(self.floor.output_validators, self._context(self.state.steps), value)
        if refused is not None:
            return machine.Validated(refused=refused)
        if output is value:
            return machine.Validated()
        if spec is None and not isinstance(output, str):
            raise ConfigurationError(
                f"an output validator returned {type(output).__name__} for a run without an output_type: "
                "return the answer's text (a str), or None to keep it"
            )
        self._replaced = output
        return machine.Validated(output=output if spec is None else spec.encode(output))

    def _note_reply(self, reply: ModelReply, usage_estimated: bool) -> None:
        step = self.steps[-1]
        step.finish_reason, step.content, step.usage = reply.finish_reason, reply.content, reply.usage
        speaker = {}
        if self.handoffs is not None:  # who answered, in a run with handoffs
            step.agent = self.floor.name
            speaker = {"agent": step.agent}
        if self._quiet:
            return  # no one to tell: the event is not made
        usage = reporting.usage_dict(reply.usage) | ({"estimated": True} if usage_estimated else {})
        model = reply.answered_by or self.floor.model.name  # a fallback chain says which of it answered
        data = {"skipped": list(reply.skipped)} if reply.skipped else {}
        self._emit(
            MODEL_REPLIED,
            finish_reason=reply.finish_reason,
            content=reply.content,
            tool_calls=len(reply.tool_calls),
            usage=usage,
            **speaker,
            model=model,
            **data,
        )

    async def _run_tools(self, command: RunTools) -> Command:
        if not self.steps:  # resumed mid-step
            self.steps.append(reporting.StepReport(command.step))
            self._step_start = self._assistant_index()
        step = self.steps[-1]
        step.calls = [reporting.CallReport(p.call_id, p.tool, p.execute, arguments=p.arguments) for p in command.calls]
        self.arguments.update((p.call_id, p.arguments) for p in command.calls)
        for p in command.calls:
            if p.execute:
                if not self._quiet:
                    self._emit(CALL_VALIDATED, **validated_event(p, self.state.provenance_of(p.call_id)))
            elif self.state.executed.get(p.call_id, [None, None])[1] == p.result:
                self._done(p, p.result or "", CALL_RECOVERED)  # reconciled as executed, or a reused call id
            else:
                self._reject(p.call_id, p.tool, p.result or "")
        self._finished, self._untrusted, self._retried = {}, set(), {}
        self.children, self.waiting, self.child_pending = {}, {}, []
        for batch in command.batches:
            if self._suspending or self.waiting:
                break  # the calls that ran are recorded; the others run when the run is resumed
            if self._effect_unsaved and batch[0].read_only:
                await self._flush()  # an effect's outcome is not left unsaved while reads take their time
            if len(batch) == 1:
                await self._invoke(batch[0])
            elif any(_is_agent_tool(self.toolbox.all.get(p.tool)) for p in batch):
                for p in batch:  # a child run never runs beside another call: one at a time, in call order
                    if not (self._suspending or self.waiting):
                        await self._invoke(p)
            else:
                await asyncio.gather(*(self._invoke(p) for p in batch))
        if self.waiting:  # a child run waits for a person, and this run with it
            status = next(iter(self.waiting.values()))[1]
            children = {call_id: run for call_id, (run, _) in self.waiting.items()}
            return self._send(machine.ChildPaused(children, status, self.agent.clock()))
        if self._suspending and any(p.call_id not in self._finished for p in command.to_execute):
            return command
        finished = machine.ToolsFinished(
            dict(self._finished),
            self.agent.clock(),
            frozenset(self._untrusted),
            self._retried,
            dict(self.children),
        )
        if self.handoffs is not None:  # a transfer that ran: the next model request is its target's
            self.handoffs.after_tools(self, command, self._finished)
        next_command = self._send(finished)
        self._sync_last_step()
        return next_command

    def _renew_lease_later(self) -> None:
        """Renew the lease every third of its term for as long as this driver drives.

        A lease that is not renewed expires, and then another driver may take
        the run: a long model request or tool call must not look like a dead
        driver. A failed renewal is left to the next checkpoint, which raises
        ``LeaseHeld`` if the run was taken.
        """
        assert self.store is not None
        store = self.store

        def renew() -> None:
            if store.remote:
                self._renewal = asyncio.ensure_future(asyncio.to_thread(_renewed, store, self.state.run_id))
            else:
                _renewed(store, self.state.run_id)
            self._renew_lease_later()

        self._lease_timer = asyncio.get_running_loop().call_later(store.lease_seconds / 3, renew)

    def _reject(self, call_id: str, tool: str, content: str) -> None:
        self._reported.add(call_id)
        if self._quiet and not self._traced:
            return
        arguments = self._arguments_sent(call_id)
        if self._traced:
            tracing.refused_call(call_id, tool, content, self.state.run_id, arguments)
        if not self._quiet:
            self._emit(CALL_REJECTED, **rejected_event(call_id, tool, content, arguments))

    def _arguments_sent(self, call_id: str) -> dict[str, Any] | None:
        """A call's arguments as the model wrote them, when they are a JSON object (only then can keys be redacted)."""
        messages = self.state.messages
        if self._step_start >= len(messages) or messages[self._step_start].role != "assistant":
            return None
        reply, sent = self._sent
        if reply is not messages[self._step_start]:
            reply = messages[self._step_start]
            sent = {call.id: call.arguments for call in reversed(reply.tool_calls)}  # the first of an id wins
            self._sent = reply, sent
        arguments = sent.get(call_id)
        return None if arguments is None else json_object(arguments)

    async def _invoke(self, call: PendingCall) -> str:
        store, run_id = self.store, self.state.run_id
        principal = await principal_now(
            self.agent.resolve_principal, self.toolbox.principal, self.toolbox.all.get(call.tool)
        )
        if principal is None:
            content = no_longer_allowed(call.tool)
            self._finished[call.call_id] = content
            for report in self.steps[-1].calls:
                if report.id == call.call_id:
                    report.executed = False
            self._reject(call.call_id, call.tool, content)
            return content
        if store is not None and not call.read_only:
            entry = None if self._began else await self._stored(store.ledger_entry, run_id, call.call_id)
            if entry is not None and entry.outcome is not None:
                return self._done(call, entry.outcome, CALL_RECOVERED)
            self._emit(INTENT_RECORDED, **intent_event(call, self.state.provenance_of(call.call_id)))
            # One commit with whatever the step has not saved yet, on disk (fsynced) before the effect can happen.
            await self._flush(intent=call)
        if not self._quiet:
            self._emit(CALL_STARTED, id=call.call_id, tool=call.tool, arguments=call.arguments)
        started = time.perf_counter()
        delegating = _is_agent_tool(self.toolbox.all.get(call.tool))
        if delegating:
            from tether.drivers.local import subagents

            executing: Awaitable[ToolResult | None] = subagents.delegate(self, call, principal)
        else:
            executing = self.toolbox.execute(
                call, run_id, self.run_machine.deadline_at, principal=principal, deps=self.deps
            )
        traced = tracing.traced_call(call, run_id, executing) if self._traced else executing
        if store is not None and not call.read_only and not delegating:  # a child run is cancelled with its parent
            outcome, cancelled = await _outliving(traced)
        else:
            outcome, cancelled = await traced, False
        if outcome is None:  # its child run waits for a person, or was suspended: no outcome yet (``_run_tools``)
            return ""
        content = outcome.content
        if outcome.untrusted:
            self._untrusted.add(call.call_id)
        if outcome.retry is not None:  # the machine counts it against the tool's retries
            found = self.toolbox.all.get(call.tool)
            self._retried[call.call_id] = machine.Retried(outcome.retry, found.retries if found is not None else 0)
        if not self._quiet:
            self._emit(
                CALL_FINISHED,
                id=call.call_id,
                tool=call.tool,
                arguments=call.arguments,
                outcome=outcome_code(content),
                duration=time.perf_counter() - started,
            )
        self._done(call, content, CALL_EXECUTED)
        if store is not None:
            # The outcome rides on the next commit: the next call's intent, the checkpoint before the next model
            # request, or the end; before a read-only batch that may take a while, its own (``_run_tools``).
            self._outcomes.append((call, content))
            if not call.read_only:
                self._emit(OUTCOME_RECORDED, id=call.call_id, tool=call.tool, digest=digest(content))
                self._effect_unsaved = True
        if cancelled:  # the run was cancelled while the effect ran: now that its outcome is recorded, it ends
            raise asyncio.CancelledError
        return content

    def _done(self, call: PendingCall, content: str, kind: str) -> str:
        self._reported.add(call.call_id)
        self._finished[call.call_id] = content
        if not self._quiet:  # the outcome's digest is for the audit log and listeners only
            self._emit(kind, **outcome_event(call, content))
        return content

    async def _ask_approver(self, command: AwaitApproval) -> Command | None:
        for call in command.calls:
            self._emit(
                APPROVAL_REQUESTED,
                id=call.call_id,
                tool=call.tool,
                arguments=call.arguments,
                reason=call.approval_reason,
                **_provenance(self.state, call),
            )
        if self.agent.approver is None:
            return None
        await self._flush()  # a person may take a while, and should see what is asked before being asked
        next_command: Command = command
        for call in command.calls:
            decision = await _decision(self.agent.approver, call)
            if decision is None:
                return None
            next_command = self._send(
                machine.ApprovalDecided(
                    call.call_id,
                    call.fingerprint or "",
                    decision.approved,
                    self.agent.clock(),
                    decision.reason,
                )
            )
            self._emit(
                APPROVAL_DECIDED, id=call.call_id, approved=decision.approved, reason=decision.reason, by="approver"
            )
        return next_command

    def _assistant_index(self) -> int:
        messages = self.state.messages
        return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), len(messages))

    def _sync_last_step(self) -> None:
        """Fill the last step's calls from the transcript (outcomes, also of skipped calls)."""
        messages = self.state.messages
        if not self.steps or len(messages) <= self._step_start:
            return
        assistant = messages[self._step_start]
        if assistant.role != "assistant":
            return
        step = self.steps[-1]
        known = {c.id: c for c in step.calls}
        replies = {m.tool_call_id: m.content or "" for m in messages[self._step_start + 1 :]}
        step.calls = [
            known.get(c.id) or reporting.CallReport(c.id, c.name, executed=False, arguments=json_object(c.arguments))
            for c in assistant.tool_calls
        ]
        for report in step.calls:
            if report.id in replies:
                report.result = replies[report.id]
                report.outcome = outcome_code(report.result)


def _subagents() -> Any:
    """``tether.drivers.local.subagents`` once something has loaded it, else None: until then no ``AgentTool``
    exists (making one loads it), so its checks have nothing to find and an agent without one never loads it."""
    return sys.modules.get("tether.drivers.local.subagents")


def _is_agent_tool(found: Tool | None) -> bool:
    """Whether ``found`` is a sub-agent's tool (``subagents.AgentTool``)."""
    module = _subagents()
    return module is not None and isinstance(found, module.AgentTool)


def checked(model: Model, settings: ModelSettings | None) -> ModelSettings | None:
    """``settings``, once ``model`` has said it can send them (its ``check_settings`` raises ``ConfigurationError``)."""
    check = getattr(model, "check_settings", None)
    if check is not None and settings is not None:
        check(settings)
    return settings


def _provenance(state: RunState, call: PendingCall) -> dict[str, Any]:
    """An event's ``provenance`` entry for a traced call (where each sink value was found); none for another."""
    found = state.provenance_of(call.call_id)
    return {} if found is None else {"provenance": found}


def _renewed(store: RunStore, run_id: str) -> None:
    with contextlib.suppress(TetherError):  # not written yet, or taken: the next checkpoint tells
        store.renew(run_id)


def _checked(model: Any, tools: Any, principal: Any) -> list[Tool]:
    """Misuse of ``Agent(...)`` fails here, naming the fix, not later inside a run."""
    if isinstance(model, str):
        raise ConfigurationError(
            f"model must be a Model object, not the string {model!r}: use OpenAIChatModel('gpt-4o-mini') "
            "(any OpenAI-compatible server: base_url=...), LocalModel() or ScriptedModel([...])"
        )
    if not isinstance(model, Model):
        raise ConfigurationError(
            f"model must be a Model (with name, complete and aclose), not {type(model).__name__}: "
            "use OpenAIChatModel(...), LocalModel() or ScriptedModel([...])"
        )
    if isinstance(tools, Tool | str) or not isinstance(tools, Iterable):
        raise ToolDefinitionError("tools must be a list of Tool objects, e.g. [multiply] or load_toolset('calc')")
    checked = list(tools)
    for item in checked:
        if not isinstance(item, Tool):
            name = getattr(item, "__name__", type(item).__name__)
            raise ToolDefinitionError(f"{name} is not a Tool: decorate it with @tool (or @tool(read_only=True))")
    if not isinstance(principal, Principal):
        raise ConfigurationError(f"principal must be a Principal, e.g. Principal({principal!r}), not {principal!r}")
    return checked


def approval_reason(tools: Sequence[Tool]) -> str | None:
    """Why a run with ``tools`` may pause for approval, or None when it never can.

    A tool declared with ``approval`` (a predicate too), or one with ``untrusted_output`` beside a
    side-effecting one (taint), or a sub-agent that may pause (``subagents.pause_reason``). A tool that
    marks one result untrusted at run time (``ToolContext.mark_untrusted``) cannot be seen here.
    """
    why = next((f"tool {t.name!r} needs approval" for t in tools if callable(t.approval) or t.approval), None)
    taints = next((t for t in tools if t.untrusted_output), None)
    acts = next((t for t in tools if not t.read_only), None)
    if why is None and taints is not None and acts is not None:
        why = (
            f"tool {taints.name!r} has untrusted output, so side-effecting calls (of {acts.name!r}) after it "
            "need approval"
        )
    if why is None and (found := _subagents()) is not None:
        why = found.pause_reason(tools, approval_reason)
    return why


async def _outliving(work: Awaitable[T]) -> tuple[T, bool]:
    """``work`` run to its end, and whether the run was cancelled meanwhile.

    For a side effect whose intent is on disk: cancelled half-way, its
    outcome would be one nobody knows, in a run that has ended (a tool on a
    thread goes on anyway, unseen). It finishes, within its own timeout,
    and its outcome is recorded before the cancellation goes on. A second
    cancellation stops waiting, and the outcome stays unknown.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task), False
    except asyncio.CancelledError:
        try:
            return await task, True
        except asyncio.CancelledError:
            task.cancel()
            raise


async def _decision(approver: Approver, call: PendingCall) -> Decision | None:
    """What ``approver`` decided about ``call``, from a plain function or an async one."""
    found = approver(call)
    if inspect.isawaitable(found):
        found = await found
    if found is None or isinstance(found, Decision):
        return found
    if isinstance(found, bool):
        return Decision(found)
    raise ConfigurationError(
        f"the approver returned {type(found).__name__} for call {call.call_id}: return a Decision, True or "
        "False, or None to pause the run"
    )


def _output_spec(
    model: Model, tools: Sequence[Tool], output_type: Any, mode: OutputMode | None, strict_tools: bool
) -> OutputSpec | None:
    """The run's output type, asked for the way the model's provider supports best unless ``mode`` says.

    The final-answer tool is a tool: in strict form only for a server that enforces it (``strict_tools``).
    """
    supported = getattr(model, "output_modes", None)  # adapters say which modes they can send
    if mode is not None and supported is not None:
        mode = checked_output_mode(mode, supported, type(model).__name__)
    if output_type is None:  # an output_mode alone is for the output types given per run
        return None
    from tether.tools.output import OutputSpec  # only an agent with an output type needs it (issue 19: imports)

    mode = mode or getattr(model, "output_mode", None) or "native"
    spec = OutputSpec(output_type, mode=mode, strict=strict_tools or mode != "tool")
    if spec.mode == "tool" and any(t.name == spec.tool_name for t in tools):
        raise ConfigurationError(
            f"a tool is named {spec.tool_name!r}, the name of the final-answer tool; rename the tool"
        )
    return spec
