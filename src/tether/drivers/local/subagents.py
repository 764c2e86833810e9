"""Sub-agents: an Agent offered to another as a tool (``agent.as_tool()``), each call of it a child run.

The model calls the tool with ``{"input": "..."}``, validated strictly like
any call; the child agent runs on that input as its prompt, and its answer
is the call's result, bounded like any tool result (``max_result_chars``).
The child run is a run of its own, with every gate of the parent's:

- **One tree.** Its id is derived from the parent run's id and the call's
  (``child_run_id``), so a parent that is resumed finds the child again
  and carries it on instead of starting a second one. The store records
  the parent in the child's sealed row and the parent's audit log names the
  child (``child_run`` event): ``verify`` of either sees the tree changed.
- **One budget.** The child runs with what remains of the parent's budget
  in every dimension (model requests, tool calls, tokens, the deadline),
  tightened by the child agent's own; what it spent counts in the parent's
  totals once, with the step that ran it (``ToolsFinished.children``). The
  delegating call is one of the parent's tool calls. A child stopped by the
  budget stops the parent with the same status.
- **One principal, one store, one taint.** The child acts for the parent
  run's principal (its tools filtered for it), records in the parent's
  store (durable when the parent is, its side effects in its own ledger),
  starts tainted when the parent is, and a child that read untrusted text
  returns an untrusted answer, which taints the parent.
- **One approver.** The child's calls that need approval are asked of the
  child agent's approver, else the parent's; without one the child pauses,
  and the parent pauses with it (``ChildPaused``), listing the child's calls
  as its own pending ones (each naming the child run). A decision made
  through the parent is recorded on the child (``durable.decide``); resuming
  the parent resumes the child.

The delegating call is read-only for the parent's ledger (it changes nothing
by itself: running it again finds the child, whose ledger holds its side
effects), but it never runs beside another call: a batch holding one runs in
call order. The parent's reply is checkpointed before the child starts.

Misuse is refused with a ``ConfigurationError``: a child agent with a store
other than the parent's, a tree nested deeper than ``MAX_DEPTH``, and an
agent that would run inside its own run (recursion).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tether.core import envelope
from tether.core.budget import Budget, RunConfig
from tether.core.envelope import ErrorCode
from tether.core.errors import ConfigurationError, RunNotFound, ToolDefinitionError
from tether.core.events import CHILD_RUN
from tether.core.machine import ChildRun, PendingCall, Run, RunState, Status
from tether.core.report import RunResult
from tether.tools.context import Principal
from tether.tools.tool import Tool, ToolError, tool_from_schema
from tether.tools.toolbox import Toolbox, ToolResult, result_envelope

if TYPE_CHECKING:
    from tether.core.events import EventHandler
    from tether.store.base import RunStore
    from tether.store.records import StoredRun

__all__ = ["MAX_DEPTH", "AgentTool", "child_run_id", "delegate"]

T = TypeVar("T")
N = TypeVar("N", int, float)
# How deep a tree of agents may go: a run, its child, the child's child... at most this many levels below the top.
MAX_DEPTH = 4
DEFAULT_NAME = "agent"
DEFAULT_DESCRIPTION = "Ask another agent: give it the whole task as input; its answer is the result."
_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The task or question for the agent, in full."}},
    "required": ["input"],
    "additionalProperties": False,
}
_WAITING = (Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION)
_BUDGET_STOPS = (Status.BUDGET_EXHAUSTED, Status.MAX_STEPS)


@dataclass(frozen=True, slots=True)
class AgentTool(Tool):
    """A tool that runs an agent (``Agent.as_tool``): its call's ``input`` is the child run's prompt, its result
    the child's answer. Only an Agent's run can drive it; anywhere else a call of it fails (``tool_failed``)."""

    agent: Any = field(default=None, repr=False, compare=False)  # the child Agent (typed loosely: no import cycle)


class _Driving(Protocol):
    """What a sub-agent call needs of the driver of the run making it (``tether.drivers.local.runner.Driver``)."""

    agent: Any
    store: RunStore | None
    deps: Any
    on_event: EventHandler | None
    run_machine: Run
    toolbox: Toolbox
    stream_model: bool
    lineage: tuple[Any, ...]  # the agents of the runs above this one, the top one first
    children: dict[str, ChildRun]  # call id -> the child run it ran, in this step
    waiting: dict[str, tuple[str, Status]]  # call id -> the child run that waits for a person, and how
    child_pending: list[dict[str, Any]]  # the calls those children wait on
    child: Any  # the driver of the child run in progress (``suspend`` reaches it)

    @property
    def state(self) -> RunState: ...

    def _emit(self, kind: str, **data: Any) -> None: ...

    async def _flush(self, *, release: bool = False, intent: PendingCall | None = None) -> None: ...

    async def _stored(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


async def _outside(**_: Any) -> Any:
    raise ToolError("this tool runs an agent, which only an Agent's run can drive")


def agent_tool(agent: Any, name: str | None = None, description: str | None = None) -> AgentTool:
    """``agent.as_tool(name, description)``: the tool, named ``agent`` and described by the agent's system
    message (or a generic sentence) unless told."""
    if description is not None and not isinstance(description, str):
        raise ToolDefinitionError(f"as_tool: description must be a str, not {type(description).__name__}")
    if name is not None and not isinstance(name, str):
        raise ToolDefinitionError(f"as_tool: name must be a str, not {type(name).__name__}")
    text = description if description is not None else (agent.system or DEFAULT_DESCRIPTION)
    # No timeout of its own: the child is bounded by the budget it runs with, the parent's deadline included.
    made = tool_from_schema(name or DEFAULT_NAME, _PARAMETERS, _outside, text, read_only=True, timeout=None)
    return AgentTool(**{f.name: getattr(made, f.name) for f in fields(Tool) if f.init}, agent=agent)


def child_run_id(parent_run_id: str, call_id: str) -> str:
    """The id of the child run a call of a run drives: the same for the same call, so a resume finds it."""
    return hashlib.sha256(json.dumps(["child run", parent_run_id, call_id]).encode()).hexdigest()[:32]


# --- checks when an Agent is made -------------------------------------------------------------


def check_tools(tools: Sequence[Tool], store: RunStore | None) -> None:
    """Refuse sub-agent tools this Agent cannot run: a child with a store of its own, a tree nested too deep."""
    for found in tools:
        if not isinstance(found, AgentTool):
            continue
        child_store = found.agent.store
        if child_store is not None and child_store is not store:
            where = "no store" if store is None else f"the store at {store.path}"
            raise ConfigurationError(
                f"sub-agent tool {found.name!r} runs an agent with the store at {child_store.path}, but this Agent "
                f"has {where}: a child run is recorded in its parent's store; give the child agent the same store, "
                "or none (it then records in its parent's)"
            )
        if 1 + _depth(found.agent, [found.agent]) > MAX_DEPTH:
            raise ConfigurationError(
                f"sub-agent tool {found.name!r} nests agents more than {MAX_DEPTH} levels deep; "
                "flatten the tree of agents"
            )


def _depth(agent: Any, path: list[Any]) -> int:
    """How many levels of sub-agents lie below ``agent`` (0: none); a cycle is a recursion."""
    deepest = 0
    for found in agent.tools:
        if isinstance(found, AgentTool):
            if any(found.agent is above for above in path):
                raise ConfigurationError(_recursion(found.name))
            if len(path) > MAX_DEPTH:
                return len(path)
            deepest = max(deepest, 1 + _depth(found.agent, [*path, found.agent]))
    return deepest


def pause_reason(tools: Sequence[Tool], why: Callable[[Sequence[Tool]], str | None]) -> str | None:
    """Why a run with ``tools`` may pause for approval because of its sub-agents, or None.

    ``why`` is the single-agent rule (``runner.approval_reason``). A child
    with no approver of its own pauses when its own tools may need approval;
    a child whose tools act starts tainted after a tool that taints (the
    parent's own, or another child's answer); and a child whose tools taint
    makes the parent's side effects after its answer need approval.
    """
    agents = [t for t in tools if isinstance(t, AgentTool)]
    if not agents:
        return None
    taints = next((t.name for t in tools if t.untrusted_output), None) or next(
        (t.name for t in agents if _reaches(t.agent, lambda u: u.untrusted_output)), None
    )
    for found in agents:
        child = found.agent
        if child.approver is None and (reason := why(child.tools)):  # its own sub-agents included
            return f"sub-agent tool {found.name!r} may pause: {reason}"
        if child.approver is None and taints is not None and _reaches(child, lambda u: not u.read_only):
            return (
                f"tool {taints!r} may taint the run, and the sub-agent of tool {found.name!r} then starts tainted, "
                "so its side-effecting calls need approval"
            )
    acts = next((t.name for t in tools if not t.read_only), None)
    if taints is not None and acts is not None:
        return f"tool {taints!r} may taint the run, so side-effecting calls (of {acts!r}) after it need approval"
    return None


def _reaches(agent: Any, test: Callable[[Tool], bool], depth: int = 0) -> bool:
    """Whether ``agent`` or an agent below it has a tool passing ``test``."""
    if depth > MAX_DEPTH:
        return False
    return any(_reaches(t.agent, test, depth + 1) if isinstance(t, AgentTool) else test(t) for t in agent.tools)


def _recursion(name: str) -> str:
    return (
        f"sub-agent tool {name!r} runs an agent that is already running above it in this tree: "
        "an agent may not delegate to itself, nor to an agent that delegated to it"
    )


# --- a call of a sub-agent tool -----------------------------------------------------------------


async def delegate(parent: _Driving, call: PendingCall, principal: Principal) -> ToolResult | None:
    """Drive the child run of ``call``: the call's result, or None when the child did not finish.

    None: the child waits for a person (``parent.waiting`` says which, and
    ``parent.child_pending`` its calls), or stopped because the parent is
    suspending. Raises ``ConfigurationError`` for a tree that cannot run.
    """
    found = parent.toolbox.all[call.tool]
    assert isinstance(found, AgentTool) and call.arguments is not None
    agent = found.agent
    lineage = (*parent.lineage, _original(parent.agent))
    if any(agent is above for above in lineage):
        raise ConfigurationError(_recursion(found.name))
    if len(lineage) > MAX_DEPTH:
        raise ConfigurationError(f"sub-agent tool {found.name!r} would nest runs more than {MAX_DEPTH} levels deep")
    store = parent.store
    if agent.store is not None and agent.store is not store:
        raise ConfigurationError(
            f"sub-agent tool {found.name!r} runs an agent with a store other than its parent run's; "
            "give the child agent the parent's store, or none"
        )
    run_id = child_run_id(parent.state.run_id, call.call_id)
    view = _bound(agent, parent)
    stored: StoredRun | None = None
    if store is not None:
        try:
            stored = await parent._stored(store.load, run_id)
        except RunNotFound:
            stored = None
    if stored is not None and stored.state.status.terminal:  # found again on a resume: its answer stands
        parent._emit(CHILD_RUN, id=call.call_id, tool=call.tool, run=run_id)
        return _ended(parent, found, call.call_id, stored.state)
    deps = parent.deps if agent.deps_factory is None else None
    if stored is not None:
        driver = await parent._stored(view.resume, run_id, on_event=parent.on_event, deps=deps)
    else:
        config = _remaining(parent, agent.config, run_id)
        if isinstance(config, ChildRun):  # nothing left to run it with
            parent.children[call.call_id] = config
            code = ErrorCode.BUDGET_EXHAUSTED
            return ToolResult(envelope.error(code, f"the agent was not run: {config.reason}", retryable=False), False)
        if deps is None and agent.deps_factory is not None:
            deps = agent.deps_factory(run_id, principal)
        driver = view.driver(
            str(call.arguments["input"]),
            run_id=run_id,
            on_event=parent.on_event,
            deps=deps,
            principal=principal,
            config=config,
            parent=parent.state.run_id,
        )
        if parent.state.tainted:
            driver.run_machine.start_untrusted(f"{parent.state.tainted_by or 'a tool'} (in its parent run)")
        if store is not None:  # the child's row exists before the parent's log names it (``_tree_problems``)
            await parent._stored(store.checkpoint, driver.state)
    driver.lineage = lineage
    driver.stream_model = parent.stream_model
    # The child's sink values are traced through its parent's transcript too; its prompt is the parent model's.
    driver.run_machine.provenance.inherit(
        parent.run_machine.provenance, parent.state.messages, parent.state.untrusted, parent.state.vouched
    )
    parent._emit(CHILD_RUN, id=call.call_id, tool=call.tool, run=run_id)
    await parent._flush()  # the call, and the child it drives, are on record before the child acts
    parent.child = driver
    try:
        result: RunResult = await driver.run()
    finally:
        parent.child = None
    if result.status in _WAITING:
        parent.waiting[call.call_id] = (run_id, result.status)
        parent.child_pending += [{**p, "run_id": p.get("run_id", run_id)} for p in result.pending()]
        return None
    if not result.status.terminal:  # suspended with its parent: a resume carries both on
        return None
    return _ended(parent, found, call.call_id, result.state)


def _ended(parent: _Driving, found: AgentTool, call_id: str, state: RunState) -> ToolResult:
    """The call's result from its child run's end; what the child spent goes to the step's results."""
    usage, steps = state.usage, state.steps + state.child_steps
    child = ChildRun(state.run_id, state.status, state.reason, steps, state.tool_calls, usage, state.usage_estimated)
    parent.children[call_id] = child
    if state.status is Status.COMPLETED:
        answer: Any = state.output or ""
        if found.agent.output is not None:  # a typed answer reaches the parent's model as JSON, not as a string of it
            answer = json.loads(answer)
        content = result_envelope(answer, found.max_result_chars)
    else:
        code = ErrorCode.BUDGET_EXHAUSTED if state.status in _BUDGET_STOPS else ErrorCode.TOOL_FAILED
        why = f"the agent's run {state.run_id} ended {state.status.value}: {state.reason}"
        content = envelope.error(code, why, retryable=False)
    return ToolResult(content, state.tainted)


def _remaining(parent: _Driving, own: RunConfig, run_id: str) -> RunConfig | ChildRun:
    """The child's configuration: its own, with each limit cut to what the parent's budget has left.

    What the step's earlier children spent is counted, and the step's calls
    (the delegating one too) are reserved: they count once the step ends.
    A ``ChildRun`` instead when nothing is left to start one with.
    """
    s, b = parent.state, parent.state.config.budget
    spent = list(parent.children.values())
    steps = b.max_steps - s.steps - s.child_steps - sum(c.steps for c in spent)
    if steps < 1:
        return ChildRun(run_id, Status.MAX_STEPS, f"not started: max_steps {b.max_steps} reached")
    calls = None
    if b.max_tool_calls is not None:
        calls = b.max_tool_calls - s.tool_calls - sum(p.execute for p in s.pending) - sum(c.tool_calls for c in spent)
    tokens: dict[str, int | None] = {}
    for kind, limit, used in (
        ("input", b.max_input_tokens, s.usage.input_tokens + sum(c.usage.input_tokens for c in spent)),
        ("output", b.max_output_tokens, s.usage.output_tokens + sum(c.usage.output_tokens for c in spent)),
        ("total", b.max_total_tokens, s.usage.total_tokens + sum(c.usage.total_tokens for c in spent)),
    ):
        tokens[kind] = None if limit is None else limit - used
        if limit is not None and limit - used <= 0:
            return ChildRun(run_id, Status.BUDGET_EXHAUSTED, f"not started: {kind} token budget of {limit} used")
    seconds = None
    deadline = parent.run_machine.deadline_at
    if deadline is not None:
        seconds = deadline - parent.agent.clock()
        if seconds <= 0:
            return ChildRun(run_id, Status.BUDGET_EXHAUSTED, f"not started: deadline of {b.deadline_seconds}s passed")
    mine = own.budget
    budget: Budget = replace(
        mine,
        max_steps=min(mine.max_steps, steps),
        max_tool_calls=_least(mine.max_tool_calls, calls),
        max_input_tokens=_least(mine.max_input_tokens, tokens["input"]),
        max_output_tokens=_least(mine.max_output_tokens, tokens["output"]),
        max_total_tokens=_least(mine.max_total_tokens, tokens["total"]),
        deadline_seconds=_least(mine.deadline_seconds, seconds),
    )
    return replace(own, budget=budget)


def _least(a: N | None, b: N | None) -> N | None:
    """The tighter of two limits, ``None`` being none."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _bound(agent: Any, parent: _Driving) -> Any:
    """The child agent as it runs under this parent: the parent's store, and its approver and principal
    resolver where the child has none of its own (its approver never, under a parent whose agent turns
    ``sub_approvers`` off). A shallow copy: the child agent itself is unchanged."""
    view = copy.copy(agent)
    view.store = parent.store
    view.parent_run = parent.state.run_id  # the one run whose child runs this copy may resume
    view.sub_approvers = parent.agent.sub_approvers
    if agent.approver is None or not parent.agent.sub_approvers:
        view.approver = parent.agent.approver
    if agent.resolve_principal is None:
        view.resolve_principal = parent.agent.resolve_principal
    view.view_of = agent
    return view


def _original(agent: Any) -> Any:
    """The agent a bound copy (``_bound``) was made from; the agent itself otherwise."""
    return getattr(agent, "view_of", agent)
