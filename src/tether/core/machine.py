"""The run state machine: the only place where a run's state changes.

Rules of this file:

- It is sans-IO. It never reads the clock, the network, the disk or an event
  loop; time arrives inside events. A test imports it in a clean interpreter
  and asserts that asyncio, aiohttp, httpx, sqlite3 and socket stay
  unimported, and searches the source for clock reads.
- Everything that affects a run's state lives here. Drivers (the asyncio
  runner, later the Temporal workflow) only perform the commands it returns
  and feed back what happened.
- The whole state is a plain value (``RunState``); a checkpoint is that
  value serialized with ``to_dict``.

Theory of operation. A driver sends an event and gets back exactly one
command: ``CallModel``, ``RunTools``, ``AwaitApproval`` or ``Finish``. The
allowed (status, event) pairs and the statuses each may lead to are the
``TRANSITIONS`` table; any other pair raises ``TransitionError`` and poisons
the machine, which then refuses all further input. On every model reply the
checks run in the order of DESIGN.md §3: protocol invariants, stop reasons,
per-call verdicts (decoding, tool offered, schema, call-id reuse, loop
guard), budgets, the repair budget, approval.

What the driver runs around a step reaches the machine only as data in its
events: the verdict of the output validators on the answer a reply gives
(``ModelReplied.validated``; the driver asks ``proposed_answer`` first),
the untrusted results the request left out (``ModelReplied.hidden``: they
do not taint the judging of that reply), and the calls whose tool raised
``Retry`` (``ToolsFinished.retried``, counted per tool against its retries).

Handoffs (``tether.drivers.local.handoffs``): a catalog may accept a call
as a transfer to another agent (``Accepted.handoff``). Only the first
transfer of a reply is executed; a later one is refused. Once a transfer
has run, the driver hands the run to its target (``Run.hand_off``): the
state names the agent holding the floor (``RunState.agent``), each
assistant message names the agent that wrote it, and later replies are
judged against the target's catalog and answer check.
A call may run an agent of its own (a sub-agent): its *child run*. What the
child spent reaches the machine with the step's results
(``ToolsFinished.children``) and counts against this run's budget, whose
remainder bounded the child; a child stopped by the budget stops this run
with the same status. A child that waits for a person makes this run wait
with it (``ChildPaused``, in the child's waiting status, with nothing
undecided of its own) until a driver goes on with the step (``ChildResumed``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from tether.core import envelope, nesting
from tether.core.budget import ESTIMATED_NOTE, RunConfig
from tether.core.envelope import ErrorCode, quoted
from tether.core.errors import ApprovalMismatch, RunPoisoned, TransitionError
from tether.core.messages import Message, ModelReply, ToolCall, Usage
from tether.core.quick import quick_init

if TYPE_CHECKING:
    from tether.core import provenance


# Calls read from one reply; more end the run protocol_error. Every call gets its own result, events and rows, and
# no model asks for this many at once: a reply that does is a broken or hostile server, not work to do.
MAX_CALLS_PER_REPLY = 1_000


class Status(StrEnum):
    """Where a run is: live (waiting on the model, tools or a person) or terminal (how it ended)."""

    READY = "ready"
    AWAITING_MODEL = "awaiting_model"
    AWAITING_TOOLS = "awaiting_tools"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_RECONCILIATION = "awaiting_reconciliation"
    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TRUNCATED = "truncated"
    CONTENT_FILTERED = "content_filtered"
    PROTOCOL_ERROR = "protocol_error"
    LOOP_DETECTED = "loop_detected"
    REPAIR_EXHAUSTED = "repair_exhausted"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the run has ended: no event moves it on."""
        return self not in _LIVE


_LIVE = frozenset(
    {
        Status.READY,
        Status.AWAITING_MODEL,
        Status.AWAITING_TOOLS,
        Status.AWAITING_APPROVAL,
        Status.AWAITING_RECONCILIATION,
    }
)


# --- events (driver -> machine) ---------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class Begin:
    """The driver starts the run at ``now``."""

    now: float


@dataclass(frozen=True, slots=True)
class Validated:
    """What the driver's output validators said of the final answer a reply gives (``Run.proposed_answer``)."""

    refused: str | None = None  # why the answer was refused: it goes back to the model as a correction
    output: str | None = None  # the answer as the validators replaced it (its text or JSON), if they did


@quick_init
@dataclass(frozen=True, slots=True)
class ModelReplied:
    """The model gave ``reply``: the machine judges its calls or its answer."""

    reply: ModelReply
    now: float
    usage_estimated: bool = False  # the provider reported no usage; the driver counted it locally
    # Call ids of results left out of the request (history processors): what the model did not see cannot taint.
    hidden: frozenset[str] = frozenset()
    validated: Validated | None = None  # None: the run has no output validators


@dataclass(frozen=True, slots=True)
class ModelFailed:
    """The model endpoint failed with ``message`` (retries, if any, are already spent)."""

    message: str
    now: float


@dataclass(frozen=True, slots=True)
class Retried:
    """A tool asked for the call to be made again (``tether.Retry``): why, and how many retries the tool allows."""

    message: str
    limit: int


@dataclass(frozen=True, slots=True)
class ChildRun:
    """What the child run of a call (a sub-agent) did: its id, how it ended, and what it spent."""

    run_id: str
    status: Status
    reason: str | None = None
    steps: int = 0  # its model requests, its own children's included
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    usage_estimated: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class ToolsFinished:
    """The step's tool calls finished: ``results`` maps each call id to its envelope's JSON text."""

    results: Mapping[str, str]  # call id -> envelope JSON text
    now: float
    untrusted: frozenset[str] = frozenset()  # call ids whose result the tool marked untrusted
    retried: Mapping[str, Retried] = field(default_factory=dict)  # call id -> the tool's Retry (its result is ours)
    children: Mapping[str, ChildRun] = field(default_factory=dict)  # call id -> the child run it ran, as it ended


@dataclass(frozen=True, slots=True)
class ChildPaused:
    """Calls of the step ran child runs that wait for a person (their ``status``): the run waits with them.

    The step's other calls are run again when it goes on (``ChildResumed``):
    a side effect's outcome comes from the ledger, a read-only call runs
    again, and a call that ran a child finds that child and carries it on.
    """

    children: Mapping[str, str]  # call id -> the id of its child run
    status: Status  # AWAITING_APPROVAL or AWAITING_RECONCILIATION
    now: float


@dataclass(frozen=True, slots=True)
class ChildResumed:
    """A driver goes on with the step whose child runs the run was waiting for."""

    now: float


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """A person (or an approver) decided the call ``call_id`` with these arguments (``fingerprint``)."""

    call_id: str
    fingerprint: str
    approved: bool
    now: float
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the run; ``finished`` holds the results of calls that did finish before it."""

    now: float
    reason: str = "cancelled"
    finished: Mapping[str, str] = field(default_factory=dict)  # results of calls that did finish


@dataclass(frozen=True, slots=True)
class OutcomeUnknown:
    """On resume: these calls' intents were recorded but not their outcomes."""

    call_ids: tuple[str, ...]
    now: float


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What became of a call whose outcome was unknown (a hook or a person says)."""

    call_id: str
    executed: bool
    now: float
    result: str | None = None  # the envelope, when executed


Event = (
    Begin
    | ModelReplied
    | ModelFailed
    | ToolsFinished
    | ApprovalDecided
    | Cancel
    | OutcomeUnknown
    | Reconciled
    | ChildPaused
    | ChildResumed
)


# --- what the tools layer tells the machine about one call ------------------


@quick_init
@dataclass(frozen=True, slots=True)
class Accepted:
    """The call decodes, names an offered tool and validates strictly."""

    arguments: dict[str, Any]
    read_only: bool
    needs_approval: bool = False
    untrusted_output: bool = False
    handoff: str | None = None  # the call transfers the run to the agent of this name
    sinks: frozenset[str] | None = None  # the tool's sink parameters (``core.provenance``); None: no policy
    trusted_fields: tuple[str, ...] = ()  # the fields of its untrusted result the system vouches for
    principal_sinks: frozenset[str] = frozenset()  # sinks a vouched field is not enough for: the principal's word
    # What the tool's own schema fixes (``provenance.schema_fixed``): values and property names, trusted for its calls.
    fixed: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    max_result_chars: int | None = None  # the tool's bound on a result; None: the tools' default (``result_limits``)


@dataclass(frozen=True, slots=True)
class Rejected:
    """A gate's refusal of a call: the envelope's error code and a message for the model."""

    code: ErrorCode
    message: str


class Catalog(Protocol):
    """The tools offered to this run's principal, as the machine sees them."""

    def check(self, call: ToolCall) -> Accepted | Rejected:
        """``Accepted`` with the call's parsed arguments, or ``Rejected`` saying which gate refused it."""


class AnswerCheck(Protocol):
    """What the final answer of a run with an output type must be.

    ``tool`` names the final-answer tool when the answer comes as a call of
    it; ``None`` when it comes as the reply's text. ``check_answer`` gets the
    raw JSON text and returns ``None`` for a valid answer.
    """

    @property
    def tool(self) -> str | None:
        """The final-answer tool's name, or None when the answer comes as text."""

    def check_answer(self, text: str) -> Rejected | None:
        """None when ``text`` is an acceptable answer, else why it is not."""


# --- commands (machine -> driver) --------------------------------------------


@quick_init
@dataclass(frozen=True, slots=True)
class PendingCall:
    """One call of the current step and what the machine decided for it.

    ``execute`` calls are for the driver to run; the others carry their
    ``result`` already (a rejection, a budget refusal or a recorded result).
    """

    call_id: str
    tool: str
    arguments: dict[str, Any] | None
    fingerprint: str | None
    read_only: bool = False
    execute: bool = False
    needs_approval: bool = False
    untrusted_output: bool = False
    result: str | None = None
    approval_reason: str | None = None  # why a person must decide, for the approval request

    def to_dict(self) -> dict[str, Any]:
        """The call as plain JSON data, as a checkpoint stores it."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "fingerprint": self.fingerprint,
            "read_only": self.read_only,
            "execute": self.execute,
            "needs_approval": self.needs_approval,
            "untrusted_output": self.untrusted_output,
            "result": self.result,
            "approval_reason": self.approval_reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingCall:
        """The call ``to_dict`` gave."""
        return cls(**data)


@quick_init
@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for step ``step``'s reply to ``messages``, before ``deadline_at`` if set."""

    step: int
    messages: tuple[Message, ...]
    deadline_at: float | None
    tool_choice: str | None = None  # what the run's policy asks for ("none", "required"); None: the driver's


@quick_init
@dataclass(frozen=True, slots=True)
class RunTools:
    """Run the accepted calls of step ``step``; the refused ones are in ``calls`` with their verdicts."""

    step: int
    calls: tuple[PendingCall, ...]  # every call of the step, in call order

    @property
    def to_execute(self) -> tuple[PendingCall, ...]:
        """The calls the driver must execute, in call order."""
        return tuple(c for c in self.calls if c.execute)

    @property
    def batches(self) -> tuple[tuple[PendingCall, ...], ...]:
        """The calls to execute as the driver runs them: each batch after the one before, its calls together.

        Consecutive read-only calls share a batch (they may run concurrently);
        each side-effecting call is a batch of its own; call order is kept. So
        a read never moves across a write, and two writes never overlap. Both
        drivers run calls this way: the rule is written here, once.
        """
        batches: list[list[PendingCall]] = []
        for call in self.to_execute:
            if call.read_only and batches and batches[-1][0].read_only:
                batches[-1].append(call)
            else:
                batches.append([call])
        return tuple(tuple(batch) for batch in batches)


@dataclass(frozen=True, slots=True)
class AwaitApproval:
    """Wait for a decision on each of ``calls`` (``ApprovalDecided``); the run is paused."""

    calls: tuple[PendingCall, ...]  # the calls still waiting for a decision


@quick_init
@dataclass(frozen=True, slots=True)
class Finish:
    """The run ended with ``status``; ``output`` is its answer, ``reason`` why it stopped otherwise."""

    status: Status
    output: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class AwaitReconciliation:
    """Wait for a person to say whether each of ``calls`` ran (their intent was recorded, their outcome was not)."""

    calls: tuple[PendingCall, ...]  # the calls whose outcome nobody knows yet


@dataclass(frozen=True, slots=True)
class AwaitChildren:
    """Wait for child runs (sub-agents) that wait for a person: ``children`` maps call ids to their run ids."""

    children: Mapping[str, str]  # call id -> the child run that waits for a person


Command = CallModel | RunTools | AwaitApproval | AwaitReconciliation | AwaitChildren | Finish


# --- the transition table ------------------------------------------------------

_TERMINALS = frozenset(s for s in Status if s.terminal)
# AWAITING_MODEL again: an invalid final answer (runs with an output type) goes back to the model.
_NEXT_AFTER_REPLY = frozenset({Status.AWAITING_MODEL, Status.AWAITING_TOOLS, Status.AWAITING_APPROVAL}) | (
    _TERMINALS - {Status.CANCELLED}
)

TRANSITIONS: dict[Status, dict[type[Any], frozenset[Status]]] = {
    Status.READY: {
        Begin: frozenset({Status.AWAITING_MODEL, Status.BUDGET_EXHAUSTED}),
        Cancel: frozenset({Status.CANCELLED}),
    },
    Status.AWAITING_MODEL: {
        ModelReplied: _NEXT_AFTER_REPLY,
        ModelFailed: frozenset({Status.MODEL_ERROR, Status.BUDGET_EXHAUSTED}),
        Cancel: frozenset({Status.CANCELLED}),
    },
    Status.AWAITING_APPROVAL: {
        ApprovalDecided: frozenset({Status.AWAITING_APPROVAL, Status.AWAITING_TOOLS, Status.BUDGET_EXHAUSTED}),
        ChildResumed: frozenset({Status.AWAITING_TOOLS}),
        Cancel: frozenset({Status.CANCELLED}),
    },
    Status.AWAITING_TOOLS: {
        # REPAIR_EXHAUSTED: a tool asked for more retries than it allows (``Retried``), one failed repair too many.
        ToolsFinished: frozenset(
            {Status.AWAITING_MODEL, Status.MAX_STEPS, Status.BUDGET_EXHAUSTED, Status.REPAIR_EXHAUSTED}
        ),
        OutcomeUnknown: frozenset({Status.AWAITING_RECONCILIATION}),
        ChildPaused: frozenset({Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION}),
        Cancel: frozenset({Status.CANCELLED}),
    },
    Status.AWAITING_RECONCILIATION: {
        Reconciled: frozenset({Status.AWAITING_RECONCILIATION, Status.AWAITING_TOOLS}),
        ChildResumed: frozenset({Status.AWAITING_TOOLS}),
        Cancel: frozenset({Status.CANCELLED}),
    },
    **{status: {} for status in _TERMINALS},
}


def mermaid_diagram() -> str:
    """The state diagram for the docs, generated from ``TRANSITIONS``."""
    lines = ["stateDiagram-v2"]
    for status, events in TRANSITIONS.items():
        for event, targets in events.items():
            for target in sorted(targets):
                lines.append(f"    {status.value} --> {target.value}: {event.__name__}")
    return "\n".join(lines)


# --- the state -------------------------------------------------------------------


def _refused(call: PendingCall, code: ErrorCode, message: str) -> PendingCall:
    """``call`` answered with an error instead of being executed."""
    return replace(call, execute=False, result=envelope.error(code, message))


def _last_step_succeeded(messages: list[Message]) -> bool:
    """Whether the conversation ends with the results of a step whose calls all returned ``ok``."""
    results = 0
    for message in reversed(messages):
        if message.role != "tool":
            break
        try:  # a stored run's tool message may predate the bound on results: never a RecursionError here
            result = nesting.loads(message.content or "", nesting.MAX_REPLY_DEPTH)
        except ValueError:
            return False
        if not (isinstance(result, dict) and result.get("ok") is True):
            return False
        results += 1
    return results > 0


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
# The C encoder ``_CANONICAL.encode`` would build on every call, built once (its same arguments, without the
# circular-reference check: arguments are decoded JSON, which has no cycles); the text is the same.
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # the C encoder's factory (CPython has it)
_C_CANONICAL = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None, _CANONICAL.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )
)


def fingerprint(tool: str, arguments: Mapping[str, Any]) -> str:
    """A stable digest of a tool name and its canonical arguments."""
    pair = [tool, arguments]
    canonical = "".join(_C_CANONICAL(pair, 0)) if _C_CANONICAL is not None else _CANONICAL.encode(pair)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(slots=True)
class RunState:
    """Everything a run is, as plain data. ``to_dict`` is a checkpoint."""

    run_id: str
    config: RunConfig
    messages: list[Message]
    status: Status = Status.READY
    started_at: float | None = None
    steps: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    usage_estimated: bool = False  # some of ``usage`` was counted locally, not reported by the provider
    failed_repairs: int = 0
    last_signature: str | None = None
    repeats: int = 0
    tainted: bool = False
    tainted_by: str | None = None  # the tool whose result first tainted the run
    # call id -> tool, for each result in ``messages`` that someone other than the principal wrote; a
    # conversation's next turn is tainted for as long as one of them is in what its model sees.
    untrusted: dict[str, str] = field(default_factory=dict)
    executed: dict[str, list[str]] = field(default_factory=dict)  # call id -> [fingerprint, result]
    pending: list[PendingCall] = field(default_factory=list)
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # call ids awaiting reconciliation
    output: str | None = None
    reason: str | None = None
    retries: dict[str, int] = field(default_factory=dict)  # tool -> how many times it raised Retry in this run
    agent: str | None = None  # the agent holding the floor, in a run whose agent has handoffs
    child_steps: int = 0  # model requests made by this run's child runs (sub-agents): they count against max_steps
    waiting_on: dict[str, str] = field(default_factory=dict)  # call id -> the child run this run waits with
    # Calls of the current step traced in a tainted run (``core.provenance``): call id -> {"sinks": the tool's sink
    # parameters, "provenance": where each sink value was found}. Checked again before the call runs after a load.
    traced: dict[str, dict[str, Any]] = field(default_factory=dict)
    # call id -> the fields of its untrusted result the tool vouches for (``Tool.trusted_fields``), set when the call
    # is accepted: their values are trusted text of that result once it is read as untrusted and the transcript is
    # indexed (``core.provenance``), again after a load.
    vouched: dict[str, list[str]] = field(default_factory=dict)
    # Calls of the current step whose tool bounds its result otherwise than the tools' default: call id -> its
    # ``max_result_chars``, which a result a person reports for the call is cut to (``Accepted.max_result_chars``).
    result_limits: dict[str, int] = field(default_factory=dict)

    def provenance_of(self, call_id: str) -> list[dict[str, Any]] | None:
        """Where each sink value of a call of the current step was found; None for a call not traced."""
        found = self.traced.get(call_id)
        return None if found is None else list(found["provenance"])

    def undecided(self) -> list[PendingCall]:
        """The calls of the current step that wait for an approval decision."""
        return [p for p in self.pending if p.execute and p.needs_approval and p.call_id not in self.approvals]

    def to_dict(self) -> dict[str, Any]:
        """The state as plain JSON data: what the store's checkpoint holds."""
        return {
            "run_id": self.run_id,
            "config": self.config.to_dict(),
            "messages": [m.to_dict() for m in self.messages],
            "executed": {k: list(v) for k, v in self.executed.items()},
            **self.progress(),
        }

    def progress(self) -> dict[str, Any]:
        """The parts of the state that do not grow with the run (no config, messages or executed calls).

        A store that appends messages and executed calls elsewhere saves only
        this at each checkpoint, so a step costs the same at step 200 as at step 1.
        """
        progress: dict[str, Any] = {
            "status": self.status.value,
            "started_at": self.started_at,
            "steps": self.steps,
            "tool_calls": self.tool_calls,
            "usage": [self.usage.input_tokens, self.usage.output_tokens],
            "usage_estimated": self.usage_estimated,
            "failed_repairs": self.failed_repairs,
            "last_signature": self.last_signature,
            "repeats": self.repeats,
            "tainted": self.tainted,
            "tainted_by": self.tainted_by,
            "untrusted": dict(self.untrusted),
            "pending": [p.to_dict() for p in self.pending],
            "approvals": {k: dict(v) for k, v in self.approvals.items()},
            "unknown": list(self.unknown),
            "output": self.output,
            "reason": self.reason,
        }
        if self.retries:  # only once a tool asked for a retry: a checkpoint without one is as it always was
            progress["retries"] = dict(self.retries)
        if self.agent is not None:  # only in a run with handoffs: other checkpoints are as they always were
            progress["agent"] = self.agent
        if self.child_steps:  # only once a child run asked a model: likewise
            progress["child_steps"] = self.child_steps
        if self.waiting_on:
            progress["waiting_on"] = dict(self.waiting_on)
        if self.traced:  # only for a step with a traced call: likewise
            progress["traced"] = {k: dict(v) for k, v in self.traced.items()}
        if self.vouched:  # only once a call of a tool with trusted fields was accepted: likewise
            progress["vouched"] = {k: list(v) for k, v in self.vouched.items()}
        if self.result_limits:  # only for a step with a call of a tool with its own bound: likewise
            progress["result_limits"] = dict(self.result_limits)
        return progress

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """The state ``to_dict`` gave."""
        return cls(
            run_id=data["run_id"],
            config=RunConfig.from_dict(data["config"]),
            messages=[Message.from_dict(m) for m in data["messages"]],
            status=Status(data["status"]),
            started_at=data["started_at"],
            steps=data["steps"],
            tool_calls=data["tool_calls"],
            usage=Usage(*data["usage"]),
            usage_estimated=data.get("usage_estimated", False),
            failed_repairs=data["failed_repairs"],
            last_signature=data["last_signature"],
            repeats=data["repeats"],
            tainted=data["tainted"],
            tainted_by=data.get("tainted_by"),  # absent from checkpoints written before it existed
            untrusted=dict(data.get("untrusted", {})),
            executed={k: list(v) for k, v in data["executed"].items()},
            pending=[PendingCall.from_dict(p) for p in data["pending"]],
            approvals={k: dict(v) for k, v in data["approvals"].items()},
            unknown=list(data.get("unknown", ())),
            output=data["output"],
            reason=data["reason"],
            retries=dict(data.get("retries", {})),
            agent=data.get("agent"),
            child_steps=data.get("child_steps", 0),
            waiting_on=dict(data.get("waiting_on", {})),
            traced={k: dict(v) for k, v in data.get("traced", {}).items()},
            vouched={k: list(v) for k, v in data.get("vouched", {}).items()},
            result_limits=dict(data.get("result_limits", {})),
        )


# --- the machine -----------------------------------------------------------------


class Run:
    """Drive one run: ``send`` an event, get the next command."""

    def __init__(
        self, state: RunState, catalog: Catalog, answer: AnswerCheck | None = None, *, executes: bool = True
    ) -> None:
        """``executes=False``: this object only records a decision (``tether approve`` in another process); the
        driver that then executes the calls, with the run's whole context, traces them again (``_still_approved``).
        """
        self.state = state
        self._catalog = catalog
        self._answer = answer  # None: any text is a final answer
        self._poisoned: str | None = None
        self._provenance: provenance.Provenance | None = None  # made at first use (``provenance``)
        self._traced: set[str] = set()  # calls traced by this object: their verdict is checked again only after a load
        self._executes = executes

    @classmethod
    def new(
        cls,
        run_id: str,
        messages: list[Message],
        catalog: Catalog,
        config: RunConfig | None = None,
        answer: AnswerCheck | None = None,
        untrusted: Mapping[str, str] | None = None,
    ) -> Run:
        """A run over ``messages``; ``untrusted`` (call id -> tool) marks results in them that taint it.

        A conversation's turn passes the earlier turns' untrusted results:
        those still among ``messages`` taint the new run from its start.
        """
        state = RunState(run_id=run_id, config=config or RunConfig(), messages=list(messages))
        if untrusted:
            shown = {m.tool_call_id for m in state.messages if m.role == "tool"}
            state.untrusted = {call_id: tool for call_id, tool in untrusted.items() if call_id in shown}
            if state.untrusted:
                state.tainted, state.tainted_by = True, next(iter(state.untrusted.values()))
        return cls(state, catalog, answer)

    def start_untrusted(self, source: str) -> None:
        """Taint a run before it begins: its prompt was written by a run that read untrusted text.

        A sub-agent's child run of a tainted run starts so (``source`` names
        why, as ``tainted_by`` does): its side-effecting calls need approval
        from its first step, whatever its own tools read.
        """
        if self.state.status is not Status.READY:
            raise TransitionError(self.state.status.value, "start_untrusted")
        self.state.tainted, self.state.tainted_by = True, source

    @property
    def status(self) -> Status:
        """Where the run is now."""
        return self.state.status

    @property
    def provenance(self) -> provenance.Provenance:
        """The transcript's index, rebuilt from the state when loaded; made (and its module loaded) at first use."""
        if self._provenance is None:
            from tether.core.provenance import Provenance

            self._provenance = Provenance()
        return self._provenance

    def hand_off(
        self, agent: str, catalog: Catalog, answer: AnswerCheck | None = None, *, described_by: str | None = None
    ) -> None:
        """Give the floor to the agent named ``agent``: later replies are judged against its catalog and answer.

        ``described_by``: whose words the agent's tool descriptions are, when not the host's; the model reads
        them from the next request, so the run is tainted from here (if it was not already).
        """
        if self._poisoned is not None:
            raise RunPoisoned(f"run {self.state.run_id} refused input after: {self._poisoned}")
        self.state.agent = agent
        self._catalog, self._answer = catalog, answer
        if described_by is not None:
            self.read_descriptions(described_by)

    def read_descriptions(self, described_by: str) -> None:
        """The model reads tool descriptions ``described_by`` wrote, someone other than the host (an MCP
        server): the run is tainted from here, if it was not already (``Tool.described_by``)."""
        if not self.state.tainted:
            self.state.tainted, self.state.tainted_by = True, f"the tool descriptions of {described_by}"

    def send(self, event: Event) -> Command:
        """Feed ``event`` to the machine and get the command the driver must perform next.

        Raises ``TransitionError`` for an event the current status does not allow (and poisons the run),
        ``RunPoisoned`` for any event after an earlier error.
        """
        if self._poisoned is not None:
            raise RunPoisoned(f"run {self.state.run_id} refused input after: {self._poisoned}")
        before = self.state.status
        allowed = TRANSITIONS[before].get(type(event))
        if allowed is None:
            error = TransitionError(before.value, type(event).__name__)
            self._poisoned = str(error)
            raise error
        command = self._handle(event)
        if self.state.status not in allowed:
            # A bug in this file, not in the input: stop before it spreads.
            error = TransitionError(before.value, f"{type(event).__name__}->{self.state.status}")
            self._poisoned = str(error)
            raise error
        return command

    def pending_command(self) -> Command:
        """The command the current state is waiting on (for resuming a run)."""
        s = self.state
        if s.status is Status.AWAITING_MODEL:
            return self._call_model()
        if s.status is Status.AWAITING_TOOLS:
            return self._run_tools()
        if s.waiting_on and s.status in (Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION):
            return AwaitChildren(dict(s.waiting_on))
        if s.status is Status.AWAITING_APPROVAL:
            return AwaitApproval(tuple(self.state.undecided()))
        if s.status is Status.AWAITING_RECONCILIATION:
            return self._await_reconciliation()
        if s.status.terminal:
            return Finish(s.status, s.output, s.reason)
        raise TransitionError(s.status.value, "pending_command")

    # -- handlers --

    def _handle(self, event: Event) -> Command:
        match event:
            case Begin(now=now):
                self.state.started_at = now
                return self._next_step(now)
            case ModelReplied(reply=reply, now=now, usage_estimated=estimated):
                self.state.usage_estimated = self.state.usage_estimated or estimated
                return self._on_reply(reply, now, event.hidden, event.validated)
            case ModelFailed(message=message, now=now):
                # A model call cut short by the run's deadline is the budget's doing.
                why = self._exhausted(now)
                if why is not None:
                    return self._finish(Status.BUDGET_EXHAUSTED, None, why)
                return self._finish(Status.MODEL_ERROR, None, message)
            case ToolsFinished(results=results, now=now, untrusted=untrusted, retried=retried, children=children):
                return self._on_tools_finished(results, now, untrusted, retried, children)
            case ChildPaused(children=children, status=status):
                if status not in (Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION) or not children:
                    raise ApprovalMismatch(f"a run waits with child runs waiting for a person, not {status.value}")
                self.state.waiting_on = dict(children)
                self.state.status = status
                return AwaitChildren(dict(children))
            case ChildResumed():
                if not self.state.waiting_on:
                    raise ApprovalMismatch(f"run {self.state.run_id} waits with no child run")
                self.state.waiting_on = {}
                return self._run_tools()
            case ApprovalDecided():
                return self._on_approval(event)
            case OutcomeUnknown(call_ids=call_ids):
                waiting = {p.call_id for p in self.state.pending if p.execute}
                if not call_ids or not set(call_ids) <= waiting:
                    raise ApprovalMismatch(f"calls {list(call_ids)} are not waiting to be executed")
                self.state.unknown = list(call_ids)
                self.state.status = Status.AWAITING_RECONCILIATION
                return self._await_reconciliation()
            case Reconciled():
                return self._on_reconciled(event)
            case Cancel(reason=reason, finished=finished):
                s = self.state
                s.pending = [
                    replace(p, execute=False, result=self._record(p, finished[p.call_id]))
                    if p.execute and p.call_id in finished
                    else p
                    for p in s.pending
                ]
                self._close_pending(ErrorCode.TOOL_FAILED, "run cancelled before this call finished")
                s.waiting_on = {}
                return self._finish(Status.CANCELLED, None, reason)
        raise AssertionError(event)  # pragma: no cover - the table rejects unknown events

    def _finish(self, status: Status, output: str | None, reason: str | None) -> Finish:
        self.state.status = status
        self.state.output = output
        self.state.reason = reason
        return Finish(status, output, reason)

    def _call_model(self) -> CallModel:
        s = self.state
        return CallModel(s.steps, tuple(s.messages), self.deadline_at, self._policy_choice())

    def _policy_choice(self) -> str | None:
        """The tool choice the run's small-model policy asks for at this step, if any (see ``Compat``)."""
        compat, messages = self.state.config.compat, self.state.messages
        if compat.answer_after_success and _last_step_succeeded(messages):
            return "none"
        if compat.call_first and messages and messages[-1].role == "user":
            return "required"
        return None

    @property
    def deadline_at(self) -> float | None:
        """When the run's time budget runs out (on the clock its events' ``now`` reads), or None without one."""
        seconds = self.state.config.budget.deadline_seconds
        if seconds is None or self.state.started_at is None:
            return None
        return self.state.started_at + seconds

    def _exhausted(self, now: float) -> str | None:
        """Why no further model request or execution is allowed, if so."""
        b, s = self.state.config.budget, self.state
        if b.deadline_seconds is not None and s.started_at is not None and now >= s.started_at + b.deadline_seconds:
            return f"deadline of {b.deadline_seconds}s passed"
        note = f"; {ESTIMATED_NOTE}" if s.usage_estimated else ""
        if b.max_input_tokens is not None and s.usage.input_tokens >= b.max_input_tokens:
            return f"input token budget of {b.max_input_tokens} used{note}"
        if b.max_output_tokens is not None and s.usage.output_tokens >= b.max_output_tokens:
            return f"output token budget of {b.max_output_tokens} used{note}"
        if b.max_total_tokens is not None and s.usage.total_tokens >= b.max_total_tokens:
            return f"total token budget of {b.max_total_tokens} used{note}"
        return None

    def _next_step(self, now: float) -> Command:
        s = self.state
        if s.steps + s.child_steps >= s.config.budget.max_steps:
            return self._finish(Status.MAX_STEPS, None, f"max_steps {s.config.budget.max_steps} reached")
        why = self._exhausted(now)
        if why is not None:
            return self._finish(Status.BUDGET_EXHAUSTED, None, why)
        s.steps += 1
        s.status = Status.AWAITING_MODEL
        return self._call_model()

    def proposed_answer(self, reply: ModelReply) -> str | None:
        """The final answer ``reply`` would end the run with, for the driver's output validators; else None.

        Nothing of the state changes: the driver asks before it sends
        ``ModelReplied``, runs the validators on this answer, and sends their
        verdict with the reply (``Validated``), which the judging below then
        applies. The answer is the reply's text, or the arguments of its
        first valid call of the final-answer tool.
        """
        calls = self._protocol_check(reply)
        if isinstance(calls, str) or reply.finish_reason in ("length", "content_filter"):
            return None
        answer = self._answer
        if not calls:
            text = reply.content or ""
            if answer is None or (answer.tool is None and answer.check_answer(text) is None):
                return text
            return None
        if answer is None or answer.tool is None:
            return None
        valid = (c.arguments for c in calls if c.name == answer.tool and answer.check_answer(c.arguments) is None)
        return next(valid, None)

    def _on_reply(
        self, reply: ModelReply, now: float, hidden: frozenset[str] = frozenset(), validated: Validated | None = None
    ) -> Command:
        s = self.state
        s.usage = s.usage + reply.usage
        calls_or_error = self._protocol_check(reply)
        if isinstance(calls_or_error, str):
            return self._finish(Status.PROTOCOL_ERROR, None, calls_or_error)
        calls = calls_or_error
        if reply.finish_reason == "length":
            return self._finish(Status.TRUNCATED, None, "the model's output was cut at its token limit")
        if reply.finish_reason == "content_filter":
            return self._finish(Status.CONTENT_FILTERED, None, "the provider filtered the reply")
        s.messages.append(Message("assistant", reply.content, calls, provider_data=reply.provider_data, agent=s.agent))
        if not calls and self._answer is not None:
            return self._judge_text_answer(reply.content or "", now, validated)
        if not calls:
            if validated is not None and validated.refused is not None:
                return self._refuse_answer(validated.refused, "give a corrected answer", now)
            output = validated.output if validated is not None and validated.output is not None else reply.content
            return self._finish(Status.COMPLETED, output or "", None)
        return self._judge(calls, now, hidden, validated)

    def _judge_text_answer(self, text: str, now: float, validated: Validated | None = None) -> Command:
        """A reply without calls in a run with an output type: a valid answer, or a repair."""
        assert self._answer is not None
        s, tool = self.state, self._answer.tool
        if tool is None:
            problem = self._answer.check_answer(text)
        else:
            problem = Rejected(ErrorCode.INVALID_ARGUMENTS, f"give the final answer by calling the tool {tool}")
        if problem is None and validated is not None and validated.refused is not None:
            return self._refuse_answer(validated.refused, "reply with only the corrected JSON", now)
        if problem is None:
            s.failed_repairs = 0
            output = validated.output if validated is not None and validated.output is not None else text
            return self._finish(Status.COMPLETED, output, None)
        s.failed_repairs += 1
        if s.failed_repairs > s.config.budget.max_repairs:
            return self._finish(
                Status.REPAIR_EXHAUSTED, None, f"{s.failed_repairs} answers in a row were invalid: {problem.message}"
            )
        fix = f"call {tool}" if tool is not None else "reply with only the corrected JSON"
        s.messages.append(
            Message("user", f"Your final answer is invalid ({problem.code.value}): {problem.message}. {fix}.")
        )
        return self._next_step(now)

    def _refuse_answer(self, why: str, fix: str, now: float) -> Command:
        """An answer text the output validators refused (``tether.Retry``): a correction, counted as a failed repair."""
        s = self.state
        s.failed_repairs += 1
        if s.failed_repairs > s.config.budget.max_repairs:
            output = s.config.fallback_answer if self._answer is None else None
            return self._finish(
                Status.REPAIR_EXHAUSTED, output, f"{s.failed_repairs} answers in a row were refused: {why}"
            )
        s.messages.append(Message("user", f"Your final answer was refused: {why}. Please {fix}."))
        return self._next_step(now)

    def _protocol_check(self, reply: ModelReply) -> tuple[ToolCall, ...] | str:
        """The checked calls of a reply, or why the reply breaks the protocol."""
        compat = self.state.config.compat
        if reply.choices < 1:
            return "the reply has no choice"
        has_calls = bool(reply.tool_calls)
        reason = reply.finish_reason
        if reason in ("length", "content_filter"):
            # Checked before anything about calls: truncated or filtered calls never run.
            return ()
        lenient = has_calls and (
            (reason == "stop" and compat.allow_stop_with_tool_calls)
            or (reason == "" and compat.accept_empty_finish_reason_with_calls)
        )
        if has_calls != (reason == "tool_calls") and not lenient:
            return f"finish_reason {quoted(reason)} does not match {len(reply.tool_calls)} tool call(s)"
        if len(reply.tool_calls) > MAX_CALLS_PER_REPLY:
            return f"the reply has {len(reply.tool_calls)} tool calls; at most {MAX_CALLS_PER_REPLY} are read"
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for index, wire in enumerate(reply.tool_calls):
            call_id = wire.id
            if (call_id is None or call_id == "") and compat.synthesize_missing_ids:
                call_id = f"call_{self.state.steps}_{index}"
            if not isinstance(call_id, str) or not call_id:
                return f"tool call {index} has no id"
            if call_id in seen:
                return f"tool call id {quoted(call_id)} appears twice in one reply"
            seen.add(call_id)
            if wire.type != "function":
                return f"tool call {quoted(call_id)} has type {quoted(wire.type)}, not 'function'"
            if not isinstance(wire.name, str) or not wire.name:
                return f"tool call {quoted(call_id)} has no function name"
            if not isinstance(wire.arguments, str):
                return f"tool call {quoted(call_id)} arguments are not a JSON string"
            calls.append(ToolCall(call_id, wire.name, wire.arguments))
        return tuple(calls)

    def _judge(
        self,
        calls: tuple[ToolCall, ...],
        now: float,
        hidden: frozenset[str] = frozenset(),
        validated: Validated | None = None,
    ) -> Command:
        """Turn each call into an executable call or a controlled error."""
        s, b = self.state, self.state.config.budget
        pending: list[PendingCall] = []
        repair_needed = False
        answer_tool = self._answer.tool if self._answer is not None else None
        refused = validated.refused if validated is not None else None
        transfer: str | None = None  # the call of this reply that hands the run on: the first one wins
        s.traced = {}  # a verdict binds one call of one step, as a decision does
        s.result_limits = {}
        for call in calls:
            if call.name == answer_tool and answer_tool is not None:
                assert self._answer is not None
                problem = self._answer.check_answer(call.arguments)
                if problem is None and refused is None:
                    output = validated.output if validated is not None else None
                    return self._accept_answer_call(call, calls, output)
                repair_needed = True
                if problem is None:  # refused by the output validators: every valid answer of this reply
                    note = f"answer refused: {refused}"
                    result = envelope.error(ErrorCode.TOOL_FAILED, note, retryable=True)
                    pending.append(PendingCall(call.id, call.name, None, None, result=result))
                    continue
                pending.append(_refused(PendingCall(call.id, call.name, None, None), problem.code, problem.message))
                continue
            verdict = self._catalog.check(call)
            if isinstance(verdict, Rejected):
                repair_needed = True
                pending.append(_refused(PendingCall(call.id, call.name, None, None), verdict.code, verdict.message))
                continue
            if verdict.handoff is not None:
                if transfer is not None:
                    note = f"not executed: call {transfer} of this reply already transfers the run"
                    pending.append(_refused(PendingCall(call.id, call.name, None, None), ErrorCode.TOOL_FAILED, note))
                    continue
                transfer = call.id
            fp = fingerprint(call.name, verdict.arguments)
            if fp == s.last_signature:
                s.repeats += 1
            else:
                s.last_signature, s.repeats = fp, 1
            if s.repeats > b.loop_limit:
                pending.append(PendingCall(call.id, call.name, verdict.arguments, fp))
                s.pending = pending + [PendingCall(c.id, c.name, None, None) for c in calls[len(pending) :]]
                self._close_pending(ErrorCode.REPEATED_CALL, "call not executed: loop detected")
                return self._finish(Status.LOOP_DETECTED, None, f"{call.name} requested {s.repeats} times in a row")
            earlier = s.executed.get(call.id)
            executes = s.repeats != b.loop_limit and earlier is None  # else not executed: answered from here
            why, traced = self._approval_reason(call.name, verdict, hidden) if executes else (None, None)
            record = PendingCall(
                call.id,
                call.name,
                verdict.arguments,
                fp,
                read_only=verdict.read_only,
                untrusted_output=verdict.untrusted_output,
                execute=executes,
                needs_approval=why is not None,
                approval_reason=why,
            )  # built once, whichever way the call goes
            if s.repeats == b.loop_limit:
                message = f"same call made {s.repeats} times in a row; change the arguments or answer"
                pending.append(_refused(record, ErrorCode.REPEATED_CALL, message))
            elif earlier is not None and earlier[0] == fp:
                pending.append(replace(record, result=earlier[1]))  # the recorded result, not a second execution
            elif earlier is not None:
                message = f"call id {call.id} was already used with other arguments; use a new id"
                pending.append(_refused(record, ErrorCode.CALL_ID_REUSED, message))
            else:
                if traced is not None:
                    self._traced.add(call.id)
                    s.traced[call.id] = {"sinks": sorted(verdict.sinks or ()), "provenance": traced}
                    if verdict.principal_sinks:  # only for a tool that has some: other records are as they were
                        s.traced[call.id]["principal"] = sorted(verdict.principal_sinks)
                    if any("fixed" in item for item in traced):  # only what was used: a schema's enum may be long
                        from tether.core.provenance import fixed_used

                        values, keys = fixed_used(traced)
                        s.traced[call.id]["fixed"] = {"values": sorted(values), "keys": sorted(keys)}
                pending.append(record)
                if verdict.trusted_fields:  # used only once its result is read as untrusted text (``_record``)
                    s.vouched[call.id] = list(verdict.trusted_fields)
                if verdict.max_result_chars is not None:  # read only if the call's outcome comes to be unknown
                    s.result_limits[call.id] = verdict.max_result_chars
        s.pending = pending
        s.approvals = {}  # a decision binds one call of one step, never a later reuse of its id
        s.failed_repairs = s.failed_repairs + 1 if repair_needed else 0

        to_execute = [p for p in pending if p.execute]
        refusal: tuple[Status, str] | None = None
        if s.steps + s.child_steps >= b.max_steps:
            refusal = (
                Status.MAX_STEPS,
                f"max_steps {b.max_steps} reached; calls of the last step are not executed",
            )
        elif (why := self._exhausted(now)) is not None:
            refusal = (Status.BUDGET_EXHAUSTED, why)
        elif b.max_tool_calls is not None and s.tool_calls + len(to_execute) > b.max_tool_calls:
            refusal = (Status.BUDGET_EXHAUSTED, f"tool call budget of {b.max_tool_calls} would be exceeded")
        elif s.failed_repairs > b.max_repairs:
            self._close_pending(ErrorCode.BUDGET_EXHAUSTED, "repair budget exhausted; call not executed")
            return self._finish(
                Status.REPAIR_EXHAUSTED,
                s.config.fallback_answer if self._answer is None else None,
                f"{s.failed_repairs} replies in a row had invalid calls",
            )
        if refusal is not None:
            self._close_pending(ErrorCode.BUDGET_EXHAUSTED, f"call not executed: {refusal[1]}")
            return self._finish(refusal[0], None, refusal[1])
        if any(p.needs_approval for p in to_execute):
            s.status = Status.AWAITING_APPROVAL
            return AwaitApproval(tuple(self.state.undecided()))
        return self._run_tools()

    def _approval_reason(
        self, tool: str, verdict: Accepted, hidden: frozenset[str] = frozenset()
    ) -> tuple[str | None, list[dict[str, Any]] | None]:
        """Why this call needs a person's approval (None when it does not), and its sink values' provenance.

        A side-effecting call in a tainted run needs one: text someone other
        than the principal wrote is in the history and may be steering the
        model. Unless its tool names its sinks and every sink value is traced
        to trusted text (``core.provenance``): then the untrusted text did
        not choose where the effect goes.
        """
        reasons = []
        traced: list[dict[str, Any]] | None = None
        if verdict.needs_approval:
            reasons.append(f"{tool} requires approval")
        if not verdict.read_only and (source := self._taint(hidden)) is not None:
            traced = self._trace(verdict.sinks, verdict.arguments, verdict.principal_sinks, verdict.fixed)
            from tether.core import provenance  # a side effect in a tainted run: rare, and its module is not small

            if traced is None or provenance.untraced(traced):
                why = f"the run read untrusted text from {source}"
                if traced:
                    why += ", and " + "; ".join(provenance.reasons(traced, verdict.arguments))
                reasons.append(why)
        return "; ".join(reasons) or None, traced

    def _trace(
        self,
        sinks: Collection[str] | None,
        arguments: Mapping[str, Any],
        principal: Collection[str] = (),
        fixed: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset()),
    ) -> list[dict[str, Any]] | None:
        """Where each sink value of a call was found in the transcript; None for a tool without sinks.

        None too for a run whose untrusted results are not listed (saved
        before they were): which text is whose cannot be told, so today's
        rule stands (every side effect needs approval).
        """
        s = self.state
        if sinks is None or not (s.untrusted or self.provenance.outer is not None):
            return None
        self.provenance.sync(s.messages, s.untrusted, s.vouched)
        return self.provenance.trace(sorted(sinks), arguments, principal, fixed)

    def _taint(self, hidden: frozenset[str]) -> str | None:
        """The tool whose untrusted result the model saw for this reply, if any.

        Taint follows what is sent: a result left out of the request (``hidden``,
        by a history processor) no longer taints. A run saved before results
        were listed (tainted, with no ``untrusted``) stays tainted.
        """
        s = self.state
        if not s.tainted:
            return None
        if hidden and s.untrusted:
            seen = [tool for call_id, tool in s.untrusted.items() if call_id not in hidden]
            if not seen:
                return None
            return s.tainted_by if s.tainted_by in seen else seen[0]
        return s.tainted_by or "a tool"

    def _accept_answer_call(self, answer: ToolCall, calls: tuple[ToolCall, ...], output: str | None = None) -> Finish:
        """A valid call of the final-answer tool ends the run; the step's other calls are not executed."""
        s = self.state
        s.pending = [
            PendingCall(c.id, c.name, None, None, result=envelope.ok("final answer accepted"))
            if c.id == answer.id
            else _refused(PendingCall(c.id, c.name, None, None), ErrorCode.TOOL_FAILED, "not executed: the run ended")
            for c in calls
        ]
        self._close_pending(ErrorCode.TOOL_FAILED, "not executed: the run ended")
        s.failed_repairs = 0
        return self._finish(Status.COMPLETED, answer.arguments if output is None else output, None)

    def _run_tools(self) -> RunTools:
        s = self.state
        s.status = Status.AWAITING_TOOLS
        s.pending = [self._still_approved(p) for p in s.pending]
        return RunTools(s.steps, tuple(s.pending))

    def _still_approved(self, call: PendingCall) -> PendingCall:
        """Refuse a call needing approval unless a decision covers exactly these arguments.

        A traced call's provenance is traced again when this object did not
        trace it (the run was loaded: a resume): the transcript is the same,
        so the verdict must be; a call whose verdict differs is refused.
        """
        traced = self.state.traced.get(call.call_id)
        if self._executes and call.execute and traced is not None and call.call_id not in self._traced:
            used = traced.get("fixed", {})
            fixed = frozenset(used.get("values", ())), frozenset(used.get("keys", ()))
            again = self._trace(traced["sinks"], call.arguments or {}, traced.get("principal", ()), fixed)
            if again != traced["provenance"]:
                return _refused(call, ErrorCode.DENIED, "its sink values' provenance changed; not executed")
            self._traced.add(call.call_id)
        if not (call.execute and call.needs_approval):
            return call
        decision = self.state.approvals.get(call.call_id)
        current = fingerprint(call.tool, call.arguments or {})
        if decision and decision["approved"] and decision["fingerprint"] == current == call.fingerprint:
            return call
        return _refused(call, ErrorCode.DENIED, "arguments changed after approval; not executed")

    def _close_pending(self, code: ErrorCode, message: str) -> None:
        """Give every call of the step its one tool message, executed or not."""
        s = self.state
        for p in s.pending:
            s.messages.append(Message("tool", p.result or envelope.error(code, message), tool_call_id=p.call_id))
        s.pending = []

    def _on_approval(self, event: ApprovalDecided) -> Command:
        s = self.state
        match = next((p for p in self.state.undecided() if p.call_id == event.call_id), None)
        if match is None:
            raise ApprovalMismatch(f"call {event.call_id} is not waiting for approval")
        if match.fingerprint != event.fingerprint:
            raise ApprovalMismatch(f"call {event.call_id}: the decision is for other arguments")
        s.approvals[event.call_id] = {
            "fingerprint": event.fingerprint,
            "approved": event.approved,
            "reason": event.reason,
        }
        if not event.approved:
            note = f"denied by approver: {event.reason}" if event.reason else "denied by approver"
            s.pending = [_refused(p, ErrorCode.DENIED, note) if p.call_id == event.call_id else p for p in s.pending]
        if self.state.undecided():
            return AwaitApproval(tuple(self.state.undecided()))
        why = self._exhausted(event.now)  # a decision may come hours later
        if why is not None:
            self._close_pending(ErrorCode.BUDGET_EXHAUSTED, f"call not executed: {why}")
            return self._finish(Status.BUDGET_EXHAUSTED, None, why)
        return self._run_tools()

    def _await_reconciliation(self) -> AwaitReconciliation:
        unknown = set(self.state.unknown)
        return AwaitReconciliation(tuple(p for p in self.state.pending if p.call_id in unknown))

    def _on_reconciled(self, event: Reconciled) -> Command:
        s = self.state
        if event.call_id not in s.unknown:
            raise ApprovalMismatch(f"call {event.call_id} has no unknown outcome")
        if event.executed:
            if event.result is None:
                raise ApprovalMismatch(f"call {event.call_id}: an executed call needs its result")
            s.pending = [
                replace(p, execute=False, result=self._record(p, event.result)) if p.call_id == event.call_id else p
                for p in s.pending
            ]
        s.unknown = [c for c in s.unknown if c != event.call_id]
        if s.unknown:
            return self._await_reconciliation()
        return self._run_tools()

    def _on_tools_finished(
        self,
        results: Mapping[str, str],
        now: float,
        untrusted: frozenset[str],
        retried: Mapping[str, Retried],
        children: Mapping[str, ChildRun],
    ) -> Command:
        s = self.state
        spent: str | None = None  # why the step counts as a failed repair: a tool out of retries
        for p in s.pending:
            if p.execute:
                content = results.get(p.call_id) or envelope.error(ErrorCode.TOOL_FAILED, "the tool produced no result")
                if (retry := retried.get(p.call_id)) is not None:
                    content, over = self._retry_result(p.tool, retry)
                    spent = spent or over
                content = self._record(p, content, p.call_id in untrusted)
            else:
                content = p.result or ""
            s.messages.append(Message("tool", content, tool_call_id=p.call_id))
        s.pending, s.traced = [], {}
        if children and (stopped := self._count_children(children)) is not None:
            return stopped
        if spent is not None:
            s.failed_repairs += 1
            if s.failed_repairs > s.config.budget.max_repairs:
                output = s.config.fallback_answer if self._answer is None else None
                why = f"{spent}; {s.failed_repairs} failed repairs in a row"
                return self._finish(Status.REPAIR_EXHAUSTED, output, why)
        return self._next_step(now)

    def _count_children(self, children: Mapping[str, ChildRun]) -> Finish | None:
        """Add what the step's child runs spent to this run's; a child the budget stopped stops this run too.

        The child ran with what remained of this run's budget, so its
        budget stop is this run's: it ends with the same status, rather than
        going on as if the child had answered.
        """
        s = self.state
        stopped: tuple[str, ChildRun] | None = None
        for call_id, child in children.items():
            s.child_steps += child.steps
            s.tool_calls += child.tool_calls
            s.usage = s.usage + child.usage
            s.usage_estimated = s.usage_estimated or child.usage_estimated
            if stopped is None and child.status in (Status.BUDGET_EXHAUSTED, Status.MAX_STEPS):
                stopped = (call_id, child)
        if stopped is None:
            return None
        call_id, child = stopped
        return self._finish(child.status, None, f"child run {child.run_id} of call {call_id}: {child.reason}")

    def _retry_result(self, tool: str, retry: Retried) -> tuple[str, str | None]:
        """The result of a call whose tool raised ``Retry``, and, past the tool's retries, why that is a failed repair.

        Retries are counted per tool over the run. Within the tool's limit the
        model gets the tool's message as a retryable ``tool_failed``; past it,
        a ``tool_failed`` it should not retry, and the step counts as a failed
        repair (``Budget.max_repairs``).
        """
        count = self.state.retries[tool] = self.state.retries.get(tool, 0) + 1
        if count <= retry.limit:
            return envelope.error(ErrorCode.TOOL_FAILED, retry.message, retryable=True), None
        why = f"{tool} asked for a retry after its {retry.limit} allowed"
        return envelope.error(ErrorCode.TOOL_FAILED, f"{retry.message} ({why}; do not call it again)", False), why

    def _record(self, call: PendingCall, content: str, untrusted: bool = False) -> str:
        """Note that ``call`` was executed with this result (``untrusted``: the tool marked it so)."""
        s = self.state
        s.executed[call.call_id] = [call.fingerprint or "", content]
        s.tool_calls += 1
        if untrusted or call.untrusted_output:
            s.untrusted[call.call_id] = call.tool
            if not s.tainted:
                s.tainted, s.tainted_by = True, call.tool
        return content
