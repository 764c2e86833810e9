"""What crosses between the Temporal workflow and its activities: frozen dataclasses, the wire format of a run.

The SDK's default data converter writes a dataclass as the JSON object of its
fields (``dataclasses.asdict``, keys sorted) and reads one back by its type
hints, ignoring keys it does not know. These fields are what every recorded
history holds: a run recorded by an earlier worker must replay, and workers
of two versions may share a task queue. So a field keeps its name and its
shape, and a value that comes in several shapes is a union of classes, each
with exactly the keys of its shape (``accepted``, ``known`` and ``executed``
tell them apart), never one class with fields left null.

The workflow imports this module in its sandbox: it imports only
``tether.core`` and the standard library, and does nothing when imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tether.core.budget import RunConfig
from tether.core.envelope import ErrorCode
from tether.core.machine import Accepted, PendingCall, Rejected
from tether.core.messages import ModelReply, Usage, WireToolCall

# A JSON object in a form the core defines (``Message.to_dict``, ``RunState.progress``), or one that may hold
# any JSON (an audit event's data, a call's decoded arguments): the core reads it, the wire only carries it.
JSONObject = dict[str, Any]
# An audit event for the store: kind, data, step, at (the local driver's ``RunEvent`` without its run id).
AuditEvent = tuple[str, JSONObject, int, float]


@dataclass(frozen=True, slots=True)
class PrincipalData:
    """Who the run acts for (``tether.tools.context.Principal``): scopes and roles sorted."""

    id: str
    scopes: tuple[str, ...]
    roles: tuple[str, ...] = ()  # absent from runs started before principals had roles

    @classmethod
    def from_dict(cls, data: JSONObject) -> PrincipalData:
        """From the workflow's start (``client.start_run``), which carries the principal as a plain object."""
        return cls(data["id"], tuple(data["scopes"]), tuple(data.get("roles", ())))


@dataclass(frozen=True, slots=True)
class Creation:
    """What the run's first save needs to create its row: its principal and setup (the engine, the queue)."""

    principal: PrincipalData
    setup: dict[str, str]


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """What the store lacks since the workflow's last save (``activities.save_run``).

    ``events_from`` and ``messages_from`` are the counts the store held
    before; ``progress`` is ``RunState.progress()``, ``messages`` are
    ``Message.to_dict()`` forms; ``create`` only on the run's first save.
    """

    run_id: str
    create: Creation | None
    progress: JSONObject
    config: RunConfig
    events_from: int
    events: tuple[AuditEvent, ...]
    messages_from: int
    messages: tuple[JSONObject, ...]
    outcomes: tuple[tuple[PendingCall, str], ...]  # the ledger's outcomes: the call, its result
    intents: tuple[PendingCall, ...]
    cleared: tuple[str, ...]  # call ids found never to have run


@dataclass(frozen=True, slots=True)
class CallModelRequest:
    """The ``tether.call_model`` activity's input: a save, then one model request on the stored transcript."""

    save: SaveRequest
    step: int
    principal: PrincipalData
    deadline_at: float | None
    counts_tokens: bool  # the run's budget limits tokens: a reply without usage gets an estimate


@dataclass(frozen=True, slots=True)
class ChoosingRequest(CallModelRequest):
    """A model request with the run's small-model tool choice for the step (``Compat``: "none", "required");
    a shape of its own, so requests without one are written as before."""

    tool_choice: str


@dataclass(frozen=True, slots=True)
class WireCall:
    """A tool call as the provider sent it (``WireToolCall``): each field may be any JSON, the machine judges it."""

    id: Any
    type: Any
    name: Any
    arguments: Any


@dataclass(frozen=True, slots=True)
class ReplyData:
    """A model's reply (``ModelReply``); ``usage`` is [input tokens, output tokens]."""

    choices: int
    finish_reason: str | None
    content: str | None
    tool_calls: tuple[WireCall, ...]
    usage: tuple[int, int]
    model: str | None

    @classmethod
    def of(cls, reply: ModelReply) -> ReplyData:
        calls = tuple(WireCall(c.id, c.type, c.name, c.arguments) for c in reply.tool_calls)
        usage = (reply.usage.input_tokens, reply.usage.output_tokens)
        if reply.provider_data is not None:
            return ReplyWithData(
                reply.choices, reply.finish_reason, reply.content, calls, usage, reply.model, reply.provider_data
            )
        return cls(reply.choices, reply.finish_reason, reply.content, calls, usage, reply.model)

    def reply(self) -> ModelReply:
        return ModelReply(
            choices=self.choices,
            finish_reason=self.finish_reason,
            content=self.content,
            tool_calls=tuple(WireToolCall(c.id, c.type, c.name, c.arguments) for c in self.tool_calls),
            usage=Usage(*self.usage),
            model=self.model,
            provider_data=getattr(self, "provider_data", None),
        )


@dataclass(frozen=True, slots=True)
class ReplyWithData(ReplyData):
    """A reply with what its adapter sends back with the assistant message (``ModelReply.provider_data``:
    reasoning items); a shape of its own, so replies without it are written as before."""

    provider_data: JSONObject


@dataclass(frozen=True, slots=True)
class AcceptedCall:
    """A call the worker's gates accepted, with the call it judged (``name``, ``raw_arguments``) and the
    tool's timeout."""

    name: str
    raw_arguments: str
    arguments: JSONObject
    read_only: bool
    needs_approval: bool
    untrusted_output: bool
    timeout: float | None
    accepted: Literal[True] = True

    def verdict(self) -> Accepted:
        return Accepted(self.arguments, self.read_only, self.needs_approval, self.untrusted_output)


@dataclass(frozen=True, slots=True)
class TracedCall:
    """An accepted call of a tool that names its sinks (``@tool(sinks=...)``): the workflow's machine traces
    their values (``core.provenance``) exactly as the local driver's does. ``AcceptedCall`` with ``sinks``."""

    name: str
    raw_arguments: str
    arguments: JSONObject
    read_only: bool
    needs_approval: bool
    untrusted_output: bool
    timeout: float | None
    sinks: tuple[str, ...]
    accepted: Literal[True] = True
    # What the tool's schema fixes (``Accepted.fixed``); absent from histories recorded before it was sent.
    fixed_values: tuple[str, ...] = ()
    fixed_keys: tuple[str, ...] = ()

    def verdict(self) -> Accepted:
        sinks = frozenset(self.sinks)
        return Accepted(
            self.arguments,
            self.read_only,
            self.needs_approval,
            self.untrusted_output,
            sinks=sinks,
            fixed=(frozenset(self.fixed_values), frozenset(self.fixed_keys)),
        )


@dataclass(frozen=True, slots=True)
class FieldedCall:
    """An accepted call of a tool that vouches for fields of its untrusted results (``trusted_fields``) or names
    principal sinks (``principal_sinks``): the workflow's machine indexes those fields and traces those sinks
    (``core.provenance``) exactly as the local driver's does. ``TracedCall`` with both, its ``sinks`` None for a
    tool without."""

    name: str
    raw_arguments: str
    arguments: JSONObject
    read_only: bool
    needs_approval: bool
    untrusted_output: bool
    timeout: float | None
    sinks: tuple[str, ...] | None
    trusted_fields: tuple[str, ...]
    principal_sinks: tuple[str, ...]
    accepted: Literal[True] = True
    fixed_values: tuple[str, ...] = ()  # as ``TracedCall``'s
    fixed_keys: tuple[str, ...] = ()

    def verdict(self) -> Accepted:
        return Accepted(
            self.arguments,
            self.read_only,
            self.needs_approval,
            self.untrusted_output,
            sinks=None if self.sinks is None else frozenset(self.sinks),
            trusted_fields=self.trusted_fields,
            principal_sinks=frozenset(self.principal_sinks),
            fixed=(frozenset(self.fixed_values), frozenset(self.fixed_keys)),
        )

    def as_before(self) -> TracedCall | AcceptedCall:
        """The call as a workflow before this shape read its payload: traced without the fields, or accepted."""
        common = (self.name, self.raw_arguments, self.arguments, self.read_only, self.needs_approval)
        if self.sinks is None:
            return AcceptedCall(*common, self.untrusted_output, self.timeout)
        return TracedCall(*common, self.untrusted_output, self.timeout, self.sinks)


@dataclass(frozen=True, slots=True)
class RejectedCall:
    """A call the worker's gates refused, with the call it judged and the error the model is sent."""

    name: str
    raw_arguments: str
    code: ErrorCode
    message: str
    accepted: Literal[False] = False

    def verdict(self) -> Rejected:
        return Rejected(self.code, self.message)


# The shapes with more keys first (an AcceptedCall reads from a TracedCall's payload, ignoring ``sinks``).
Verdict = FieldedCall | TracedCall | AcceptedCall | RejectedCall


def verdict_data(verdict: Accepted | Rejected, name: str, arguments: str, timeout: float | None) -> Verdict:
    """One call's verdict as recorded in history, with the call it judged and the tool's timeout."""
    if isinstance(verdict, Rejected):
        return RejectedCall(name, arguments, verdict.code, verdict.message)
    fixed = verdict.fixed
    if verdict.sinks is not None and (fixed[0] or fixed[1]):
        from tether.core.provenance import fixed_for

        fixed = fixed_for(fixed, verdict.sinks, verdict.arguments)  # only what this call's values can use
    if verdict.trusted_fields or verdict.principal_sinks:
        return FieldedCall(
            name,
            arguments,
            verdict.arguments,
            verdict.read_only,
            verdict.needs_approval,
            verdict.untrusted_output,
            timeout,
            None if verdict.sinks is None else tuple(sorted(verdict.sinks)),
            tuple(verdict.trusted_fields),
            tuple(sorted(verdict.principal_sinks)),
            fixed_values=tuple(sorted(fixed[0])),
            fixed_keys=tuple(sorted(fixed[1])),
        )
    if verdict.sinks is not None:
        return TracedCall(
            name,
            arguments,
            verdict.arguments,
            verdict.read_only,
            verdict.needs_approval,
            verdict.untrusted_output,
            timeout,
            tuple(sorted(verdict.sinks)),
            fixed_values=tuple(sorted(fixed[0])),
            fixed_keys=tuple(sorted(fixed[1])),
        )
    return AcceptedCall(
        name,
        arguments,
        verdict.arguments,
        verdict.read_only,
        verdict.needs_approval,
        verdict.untrusted_output,
        timeout,
    )


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """The model's reply and the verdict on each of its calls, in wire order (None: a call the machine refuses
    before judging any, its name or arguments not a string)."""

    reply: ReplyWithData | ReplyData  # the one with more keys first: the converter takes the first that reads
    usage_estimated: bool
    verdicts: tuple[Verdict | None, ...]


@dataclass(frozen=True, slots=True)
class NamedAnswer(ModelAnswer):
    """A model answer that names the model that answered (the worker's, or which one of its fallback chain);
    a shape of its own, so the answers of histories recorded before are read and written as they were."""

    answered_by: str


@dataclass(frozen=True, slots=True)
class DescribedAnswer(NamedAnswer):
    """A model answer from a worker whose tools offered to the run's principal include some whose descriptions
    someone other than the host wrote (``Toolbox.described_by``: an MCP server's): the model read them, so the
    run is tainted (as a local run is from its start)."""

    described_by: str


@dataclass(frozen=True, slots=True)
class ModelFailure:
    """The model request failed (``ModelError``): its type and message."""

    error: str


@dataclass(frozen=True, slots=True)
class NamedFailure(ModelFailure):
    """A failed model request that names the worker's model."""

    model: str


# The shapes with more keys first: the converter takes the first that reads.
ModelOutcome = DescribedAnswer | NamedAnswer | ModelAnswer | NamedFailure | ModelFailure


@dataclass(frozen=True, slots=True)
class ResolveRequest:
    """The ``tether.resolve`` local activity's input, before a side-effecting call's intent: may ``principal``
    (the run's) still call ``tool``?"""

    tool: str
    principal: PrincipalData


@dataclass(frozen=True, slots=True)
class PrincipalResolved:
    """The worker's ``resolve_principal`` allows the call: it runs for ``principal``, as the resolver has it now
    (the run's own on a worker without a resolver)."""

    principal: PrincipalData


@dataclass(frozen=True, slots=True)
class PrincipalRefused:
    """The worker's ``resolve_principal`` says the run's principal may no longer make the call (it is gone, or
    lacks the tool's scopes): the call does not run, and the model reads ``forbidden``."""

    refused: Literal[True] = True


Resolution = PrincipalResolved | PrincipalRefused


@dataclass(frozen=True, slots=True)
class RunToolRequest:
    """The ``tether.run_tool`` activity's input: one accepted call to run, for ``principal`` as it is."""

    run_id: str
    call: PendingCall
    principal: PrincipalData
    deadline_at: float | None
    heartbeat_seconds: float | None = None  # absent: the default heartbeat


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedToolRequest(RunToolRequest):
    """A side-effecting call whose principal the worker's resolver changed before its intent (``PrincipalResolved``
    is ``runs_for``), with the tools offered to the run's ``principal``; a shape of its own, so a call for the
    run's principal as it is is written as before. Its activity asks the resolver again just before the effect,
    and the call runs for that answer."""

    runs_for: PrincipalData


@dataclass(frozen=True, slots=True, kw_only=True)
class AskingToolRequest(RunToolRequest):
    """A read-only call, to run once the worker's ``resolve_principal`` says ``principal`` may still make it (for
    the principal as resolved), else answered ``PrincipalRefused``: nothing is recorded before a read, so the
    activity that runs it asks. A shape of its own, so requests that do not ask are written as before."""

    ask: Literal[True]


# The shapes with more keys first: the converter takes the first that reads.
ToolRequest = ResolvedToolRequest | AskingToolRequest | RunToolRequest


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's result envelope, and whether the tool marked it untrusted."""

    content: str
    untrusted: bool


@dataclass(frozen=True, slots=True)
class RetriedResult(ToolResult):
    """The result of a call whose tool raised ``Retry``: its message, and how many retries per run the tool
    allows (the machine counts them, ``Retried``); a shape of its own, so other results are written as before."""

    retry: str
    limit: int


# The shape with more keys first: the converter takes the first that reads (a refusal has none of a result's).
ToolOutcome = RetriedResult | ToolResult | PrincipalRefused


@dataclass(frozen=True, slots=True)
class ReconcileRequest:
    """The ``tether.reconcile`` activity's input: a call whose outcome is unknown."""

    run_id: str
    call: PendingCall
    principal: PrincipalData


@dataclass(frozen=True, slots=True)
class Unreconciled:
    """The tool's reconcile hook cannot tell (there is none, it failed, or it said neither): a person decides."""

    known: Literal[False] = False


@dataclass(frozen=True, slots=True)
class ReconciledNotExecuted:
    """The hook says the call never took effect."""

    known: Literal[True] = True
    executed: Literal[False] = False


@dataclass(frozen=True, slots=True)
class ReconciledExecuted:
    """The hook says the call took effect: ``result`` is its result envelope."""

    result: str
    known: Literal[True] = True
    executed: Literal[True] = True


@dataclass(frozen=True, slots=True)
class UnreconciledWithin:
    """``Unreconciled`` for a tool that bounds its results otherwise than by default (``max_result_chars``): a
    person's result for the call is cut to that bound. A shape of its own, so other answers are written as before."""

    max_result_chars: int
    known: Literal[False] = False


# The shapes with more keys first (an ``Unreconciled`` reads from an ``UnreconciledWithin``'s payload).
ReconcileAnswer = ReconciledExecuted | ReconciledNotExecuted | UnreconciledWithin | Unreconciled
