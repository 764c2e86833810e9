"""A run as a Temporal workflow: the same ``tether.core`` machine, driven durably.

Rules of this file:

- It imports only ``temporalio``, ``tether.core``, ``tether.drivers.common``,
  the payload types (``tether.drivers.temporal.payloads``, what crosses
  between it and its activities) and the standard library. Never a tool
  module, a model adapter or a store: the workflow is replayed from its
  history on any worker, so everything it does must follow from that history
  alone.
- It never reads the clock; time comes from ``workflow.now()``.
- What the host decided about a call (decoding, tool offered, schema,
  approval rule) is decided once, in the ``tether.call_model`` activity, and
  recorded in history as that activity's result. The workflow feeds those
  recorded verdicts to the machine (``RecordedCatalog``), so a tool whose
  rules change while a run is in flight cannot break the run's replay.

Theory of operation. ``RunWorkflow.run`` sends ``Begin`` and performs the
commands the machine returns: ``CallModel`` is the ``tether.call_model``
activity; ``RunTools`` is one ``tether.run_tool`` activity per call
(consecutive read-only calls concurrently and retried; a side-effecting call
alone, with exactly one attempt and a heartbeat timeout); ``AwaitApproval``
waits for ``decide`` updates; ``AwaitReconciliation`` asks the tool's
``reconcile`` hook (``tether.reconcile``) and otherwise waits for a
``reconcile`` update. A side-effecting call whose activity did not report
back (its worker died, it timed out) is an unknown outcome: never run again
blindly. Any exception in workflow code fails the workflow (a bug does not
retry forever).

Before each call runs, the worker's ``resolve_principal`` is asked whether
the run's principal may still make it, as the local driver asks: by the
``tether.run_tool`` activity of a read-only call (nothing is recorded
before it), by the ``tether.resolve`` local activity before a side-effecting
call's intent is recorded, and again by its activity just before the effect
(the intent's save may have waited, its worker died). A refused call does not
run, is answered ``forbidden`` and reported ``call_rejected``, and has nothing
in the ledger (an intent saved before the refusal is cleared, ``reconciled``
as not executed by ``resolve_principal``); an allowed one runs for the
principal as resolved.

The run store. The workflow keeps the audit events and ledger writes the
local driver would checkpoint, and hands them, with the messages the
machine added since, to the next saving activity: ``tether.call_model``
saves before it asks the model (and reads the transcript from the store),
``tether.save`` before a side-effecting call (its intent), at a pause and at
the end. Each save names the counts of events and messages the store held
before it, so a retried save is recognised and appends nothing twice. Only
these increments and references cross the activity boundary: the history
grows by the same amount at step 100 as at step 1. A save too large for one
payload (a long text is in a message, its event and the run's output) is
made in several (``_parts``): what fitted in an activity's payload is saved.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    # The machine imports these on first use (a traced call, a redacted event): imported here, so the sandbox
    # passes them through like the rest instead of loading them again inside a running workflow.
    import tether.core.provenance
    import tether.core.redact  # noqa: F401
    from tether.core import envelope, nesting
    from tether.core.budget import RunConfig
    from tether.core.events import (
        APPROVAL_DECIDED,
        APPROVAL_REQUESTED,
        CALL_EXECUTED,
        CALL_RECOVERED,
        CALL_REJECTED,
        CALL_VALIDATED,
        INTENT_RECORDED,
        MODEL_REPLIED,
        OUTCOME_RECORDED,
        RECONCILED,
        RECONCILIATION_NEEDED,
        RUN_FINISHED,
        RUN_PAUSED,
        RUN_STARTED,
        STEP_STARTED,
        digest,
        intent_event,
        outcome_event,
        reconciled_event,
        rejected_event,
        validated_event,
    )
    from tether.core.history import untrusted_results
    from tether.core.machine import (
        Accepted,
        ApprovalDecided,
        AwaitApproval,
        AwaitReconciliation,
        Begin,
        CallModel,
        Cancel,
        Command,
        Finish,
        ModelFailed,
        ModelReplied,
        OutcomeUnknown,
        PendingCall,
        Reconciled,
        Rejected,
        Retried,
        Run,
        RunTools,
        Status,
        ToolsFinished,
    )
    from tether.core.messages import Message, ToolCall
    from tether.drivers.common import json_object, no_longer_allowed
    from tether.drivers.temporal.payloads import (
        AskingToolRequest,
        AuditEvent,
        CallModelRequest,
        ChoosingRequest,
        Creation,
        DescribedAnswer,
        FieldedCall,
        ModelFailure,
        ModelOutcome,
        NamedAnswer,
        NamedFailure,
        PrincipalData,
        PrincipalRefused,
        ReconcileAnswer,
        ReconciledExecuted,
        ReconciledNotExecuted,
        ReconcileRequest,
        Resolution,
        ResolvedToolRequest,
        ResolveRequest,
        RetriedResult,
        RunToolRequest,
        SaveRequest,
        ToolOutcome,
        UnreconciledWithin,
        Verdict,
    )

T = TypeVar("T")

WORKFLOW_NAME = "tether.run"
CALL_MODEL = "tether.call_model"
RUN_TOOL = "tether.run_tool"
RECONCILE = "tether.reconcile"
RESOLVE = "tether.resolve"  # a local activity, before a side effect's intent: the worker asks its resolve_principal
SAVE = "tether.save"
# Workflow changes (``workflow.patched``): runs recorded before them replay without them.
CLEARED_BEFORE_INTENT = "tether.cleared-before-intent"
SAVES_IN_PARTS = "tether.saves-in-parts"  # a save too large for one payload is cut in parts (``_parts``)
FIELDED_VERDICTS = "tether.fielded-verdicts"  # a verdict's trusted_fields and principal_sinks (``FieldedCall``)
PROMPT_RESULTS_TAINT = "tether.prompt-results-taint"  # tool results in the prompt taint the run
RETRIES_COUNTED = "tether.retries-counted"  # a tool's Retry counts against its retries (``RetriedResult``)
RECONCILED_CUT = "tether.reconciled-cut"  # a person's result is cut to the tool's bound (``reconcile``)
DESCRIPTIONS_TAINT = "tether.descriptions-taint"  # others' tool descriptions taint the run (``DescribedAnswer``)
# The worker's resolve_principal is asked before a side effect's intent (``RESOLVE``). A read's activity asks
# (``AskingToolRequest``): its request changed, not the commands, so a run recorded before replays as it is.
PRINCIPAL_RESOLVED = "tether.principal-resolved"
ENGINE = "temporal"  # the run's setup in the store says which engine drives it

DEFAULT_HEARTBEAT_SECONDS = 10.0
DEFAULT_MODEL_TIMEOUT_SECONDS = 300.0
DEFAULT_TOOL_TIMEOUT_SECONDS = 300.0  # for a tool that declares none
TOOL_TIMEOUT_MARGIN_SECONDS = 30.0  # the activity outlives the tool's own timeout by this much
READ_ONLY_ATTEMPTS = 5
MODEL_ATTEMPTS = 3
SAVE_TIMEOUT_SECONDS = 30.0
RESOLVE_TIMEOUT_SECONDS = 30.0  # an application's lookup of who the principal is now
# The SDK refuses a payload over 2 MiB (its error limit); a margin for the envelope around the data.
PAYLOAD_LIMIT_BYTES = 2 * 1024 * 1024 - 64 * 1024
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
# A save waits out a lease left by a worker that died mid-save (the store's lease term, 30 s by default).
SAVE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=5), maximum_attempts=20)


# --- what crosses the activity boundary (its types: payloads.py) -----------------------


def payload_size(value: Any) -> int:
    """The bytes of ``value`` as one payload, as the SDK's converter encodes it: its JSON escapes each non-ASCII
    character (six bytes for ``é``), so text can fit as UTF-8 and not as a payload."""
    return PayloadConverter.default.to_payloads([value])[0].ByteSize()


def fitting(value: T, what: str) -> T:
    """``value`` if it fits in one Temporal payload; else a non-retryable error naming ``what`` and its size.

    A payload over the limit fails the same way on every attempt: retrying it
    would ask the model again or run the tool again for nothing.
    """
    size = payload_size(value)
    if size > PAYLOAD_LIMIT_BYTES:
        raise ApplicationError(
            f"{what} is {size} bytes, more than a Temporal payload carries ({PAYLOAD_LIMIT_BYTES} bytes)",
            type=PAYLOAD_TOO_LARGE,
            non_retryable=True,
        )
    return value


def failure_reason(error: BaseException) -> str:
    """The innermost message of an error's cause chain (an activity's failure under ``Activity task failed``)."""
    while error.__cause__ is not None or getattr(error, "cause", None) is not None:
        error = getattr(error, "cause", None) or error.__cause__  # type: ignore[assignment]
    return str(getattr(error, "message", None) or error)


class RecordedCatalog:
    """The machine's ``Catalog``, answering from the verdicts the model activity recorded.

    The machine judges the calls of a reply in their order on the wire, so
    the n-th ``check`` gets the n-th verdict. Each verdict names the call it
    judged: a mismatch is a bug and fails the workflow.
    """

    def __init__(self) -> None:
        self._verdicts: tuple[Verdict | None, ...] = ()
        self._next = 0
        self.timeouts: dict[str, float | None] = {}  # call id -> the tool's timeout, for the activity's

    def load(self, verdicts: tuple[Verdict | None, ...]) -> None:
        self._verdicts, self._next = verdicts, 0

    def check(self, call: ToolCall) -> Accepted | Rejected:
        index, self._next = self._next, self._next + 1
        verdict = self._verdicts[index] if index < len(self._verdicts) else None
        if verdict is None or verdict.name != call.name or verdict.raw_arguments != call.arguments:
            raise ApplicationError(f"no recorded verdict for call {call.id} ({call.name})", non_retryable=True)
        if verdict.accepted:
            self.timeouts[call.id] = verdict.timeout
        return verdict.verdict()


@dataclass(frozen=True, slots=True)
class Decision:
    """What a ``decide`` update carries."""

    call_id: str
    fingerprint: str
    approved: bool
    reason: str | None = None
    by: str | None = None  # who decided, as the audit log names them (None: an update of an earlier client)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a ``reconcile`` update carries: ``result`` is the JSON text of the call's result when executed."""

    call_id: str
    executed: bool
    result: str | None = None
    by: str | None = None  # who said so, as the audit log names them


@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=[Exception])
class RunWorkflow:
    """One run; the workflow id is the run id."""

    def __init__(self) -> None:
        self._catalog = RecordedCatalog()
        self._machine: Run | None = None
        self._command: Command | None = None
        self._heartbeat = timedelta(seconds=DEFAULT_HEARTBEAT_SECONDS)
        self._principal: PrincipalData | None = None
        # Results of a step cut short by an unknown outcome, for when it goes on after the reconciliation.
        self._finished: dict[str, str] = {}
        self._untrusted: set[str] = set()
        self._retried: dict[str, Retried] = {}
        # What the store has not been handed yet, and what it holds (see ``_save_request``).
        self._log: list[AuditEvent] = []
        self._outcomes: list[tuple[PendingCall, str]] = []  # ledger outcomes: the call, its result
        self._cleared: list[str] = []  # call ids found never to have run
        self._saved_events = 0
        self._saved_messages = 0
        self._saved_progress: dict[str, Any] | None = None  # the run's progress as the store holds it, once saved
        self._created = False
        self._announced: set[str] = set()  # call ids of the current step with an event
        self._step_start = 0  # where the current step's assistant message is in the transcript
        self._reconciling = False  # the reconcile hooks of unknown outcomes are deciding (see ``_phase``)
        self._bounds: dict[str, int] = {}  # call id -> its tool's bound on a result, when not the default

    # -- the run --

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        """``start``: messages, config (``RunConfig.to_dict``), principal, and optionally heartbeat_seconds
        and ``stored`` (the counts of events and messages the client recorded, ``client.record_start``).

        A failure no retry mends (a bug, a payload over the limit, a store that
        disagrees) fails the workflow; the store records the run as cancelled,
        its reason saying why the workflow failed.
        """
        try:
            return await self._drive(start)
        except Exception as exc:
            if self._machine is None or self._machine.status.terminal:
                raise
            reason = f"the workflow failed: {failure_reason(exc)}"
            await self._record_failure(reason)
            raise ApplicationError(reason, type="RunFailed", non_retryable=True) from exc

    async def _record_failure(self, reason: str) -> None:
        """End the run in the store as cancelled with ``reason``; a store that cannot take it leaves it as it was."""
        assert self._machine is not None
        self._send(Cancel(self._now(), reason=reason, finished=dict(self._finished)))
        self._emit(RUN_FINISHED, status=Status.CANCELLED.value, output=None, reason=reason)
        try:
            retry = RetryPolicy(maximum_interval=timedelta(seconds=1), maximum_attempts=3)
            await self._save(retry=retry, what="the run's last save")
        except (ActivityError, ApplicationError):
            workflow.logger.warning("run %s: its failure could not be saved", self._machine.state.run_id)

    async def _drive(self, start: dict[str, Any]) -> dict[str, Any]:
        messages = [Message.from_dict(m) for m in start["messages"]]
        config = RunConfig.from_dict(start["config"]) if start.get("config") else RunConfig()
        self._principal = PrincipalData.from_dict(start["principal"])
        self._heartbeat = timedelta(seconds=start.get("heartbeat_seconds") or DEFAULT_HEARTBEAT_SECONDS)
        # Tool results in the prompt were written by neither the principal nor this run: they taint it (DESIGN.md §7).
        # Asked only when there are some, so a recorded run without any replays with no marker to match.
        has_results = any(m.role == "tool" for m in messages)
        untrusted = untrusted_results(messages) if has_results and workflow.patched(PROMPT_RESULTS_TAINT) else None
        self._machine = Run.new(workflow.info().workflow_id, messages, self._catalog, config, untrusted=untrusted)
        if stored := start.get("stored"):  # the client recorded the run and its start: go on from there
            self._saved_events, self._saved_messages, self._created = stored["events"], stored["messages"], True
        else:
            prompt = "\n".join(m.content or "" for m in messages if m.role == "user")
            self._emit(RUN_STARTED, principal=self._principal.id, prompt=prompt)
        command = self._send(Begin(self._now()))
        while True:
            match command:
                case CallModel():
                    command = await self._call_model(command)
                case RunTools():
                    command = await self._run_tools(command)
                case AwaitApproval():
                    for call in command.calls:
                        self._emit(
                            APPROVAL_REQUESTED,
                            id=call.call_id,
                            tool=call.tool,
                            arguments=call.arguments,
                            reason=call.approval_reason,
                            **self._provenance(call.call_id),
                        )
                    command = await self._pause(command, "waiting for approval")
                case AwaitReconciliation():
                    command = await self._reconcile(command)
                case Finish():
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    self._announce_cut_off()
                    self._emit(RUN_FINISHED, status=command.status.value, output=command.output, reason=command.reason)
                    await self._save()
                    return self._summary()

    async def _decided(self, waiting: Command) -> Command:
        """The command after ``waiting``, once an update has moved the machine on."""
        await workflow.wait_condition(lambda: self._command is not waiting)
        assert self._command is not None
        return self._command

    async def _pause(self, waiting: Command, reason: str) -> Command:
        """Save the run as waiting for a person (unless an update came first), then wait for the update."""
        assert self._machine is not None
        if self._command is waiting:
            self._emit(RUN_PAUSED, status=self._machine.status.value, reason=reason)
            await self._save()
        return await self._decided(waiting)

    def _now(self) -> float:
        return workflow.now().timestamp()

    # -- the run store, through activities --

    def _provenance(self, call_id: str) -> dict[str, Any]:
        """An event's ``provenance`` entry for a traced call (where each sink value was found); none for another."""
        assert self._machine is not None
        found = self._machine.state.provenance_of(call_id)
        return {} if found is None else {"provenance": found}

    def _emit(self, kind: str, **data: Any) -> None:
        """Log an audit event; the next save writes it (the local driver's ``_emit`` for a stored run)."""
        assert self._machine is not None
        self._log.append((kind, data, self._machine.state.steps, self._now()))

    def _save_request(self, intents: tuple[PendingCall, ...] = ()) -> SaveRequest:
        """What the store lacks: the events, messages and ledger writes since the last save, and where they go."""
        assert self._machine is not None and self._principal is not None
        s = self._machine.state
        create = None
        if not self._created:
            create = Creation(self._principal, {"engine": ENGINE, "task_queue": workflow.info().task_queue})
        return SaveRequest(
            run_id=s.run_id,
            create=create,
            progress=s.progress(),
            config=s.config,
            events_from=self._saved_events,
            events=tuple(self._log),
            messages_from=self._saved_messages,
            messages=tuple(m.to_dict() for m in s.messages[self._saved_messages :]),
            outcomes=tuple(self._outcomes),
            intents=intents,
            cleared=tuple(self._cleared),
        )

    def _saved(self, request: SaveRequest) -> None:
        """The store holds ``request`` now; what updates added meanwhile waits for the next save."""
        del self._log[: len(request.events)]
        del self._outcomes[: len(request.outcomes)]
        del self._cleared[: len(request.cleared)]
        self._saved_events += len(request.events)
        self._saved_messages += len(request.messages)
        self._saved_progress = request.progress
        self._created = True

    async def _save(
        self, intents: tuple[PendingCall, ...] = (), *, retry: RetryPolicy = SAVE_RETRY, what: str = "the run's save"
    ) -> None:
        request = self._save_request(intents)
        parts = [request]
        if payload_size(request) > PAYLOAD_LIMIT_BYTES and workflow.patched(SAVES_IN_PARTS):
            parts = self._parts(request)
        for part in parts:
            await workflow.execute_activity(
                SAVE,
                fitting(part, what),
                start_to_close_timeout=timedelta(seconds=SAVE_TIMEOUT_SECONDS),
                retry_policy=retry,
            )
            self._saved(part)

    def _parts(self, request: SaveRequest) -> list[SaveRequest]:
        """``request`` cut into saves that each fit in a payload, to be made in order.

        The same text can be in a save several times (a reply in its message,
        its event and the run's output), so a save can be too large when each
        of its events, messages and ledger writes fits. They go first, as many
        to a part as fit (``_units``), with the run's progress as the store
        holds it: until the last part the run's row is as it was, its
        transcript grows. The last part brings the progress now.
        """
        earlier = replace(
            request,
            progress=self._saved_progress or request.progress,
            events=(),
            messages=(),
            outcomes=(),
            intents=(),
            cleared=(),
        )
        units, final = _units(request)
        groups: list[dict[str, list[Any]]] = []
        base, size = payload_size(earlier), PAYLOAD_LIMIT_BYTES + 1  # no group yet: the first unit opens one
        for unit in units:
            grows = sum(payload_size(item) + 8 for _, item in unit)  # a separator each, and a margin for the sum
            if size + grows > PAYLOAD_LIMIT_BYTES:
                groups.append({"events": [], "messages": [], "outcomes": [], "intents": [], "cleared": []})
                size = base
            for kind, item in unit:
                groups[-1][kind].append(item)
            size += grows
        parts: list[SaveRequest] = []
        create, events_from, messages_from = request.create, request.events_from, request.messages_from
        for group, into in [*((g, earlier) for g in groups), (final, request)]:
            part = replace(
                into,
                create=create,
                events_from=events_from,
                events=tuple(group["events"]),
                messages_from=messages_from,
                messages=tuple(group["messages"]),
                outcomes=tuple(group["outcomes"]),
                intents=tuple(group["intents"]),
                cleared=tuple(group["cleared"]),
            )
            parts.append(part)
            create, events_from = None, events_from + len(part.events)
            messages_from += len(part.messages)
        return parts

    def _send(self, event: Any) -> Command:
        assert self._machine is not None
        self._command = self._machine.send(event)
        return self._command

    async def _call_model(self, command: CallModel) -> Command:
        assert self._machine is not None and self._principal is not None
        budget = self._machine.state.config.budget
        timeout = DEFAULT_MODEL_TIMEOUT_SECONDS
        if command.deadline_at is not None:
            timeout = min(timeout, max(1.0, command.deadline_at - self._now()))
        self._emit(STEP_STARTED)
        self._announced = set()
        self._step_start = len(self._machine.state.messages)
        save = self._save_request()
        fields = (save, command.step, self._principal, command.deadline_at, budget.counts_tokens)
        choice = command.tool_choice
        request = CallModelRequest(*fields) if choice is None else ChoosingRequest(*fields, choice)
        if payload_size(request) > PAYLOAD_LIMIT_BYTES and workflow.patched(SAVES_IN_PARTS):
            await self._save()  # in parts, before: the model request carries an empty save
            request = replace(request, save=(save := self._save_request()))
        answer: ModelOutcome = await workflow.execute_activity(
            CALL_MODEL,
            fitting(request, "the run's save before the model request"),
            result_type=cast(type, ModelOutcome),  # the converter reads a union (each class in turn)
            start_to_close_timeout=timedelta(seconds=timeout),
            heartbeat_timeout=self._heartbeat,  # a dead worker's request is retried elsewhere within seconds
            retry_policy=RetryPolicy(maximum_attempts=MODEL_ATTEMPTS),
        )
        self._saved(save)
        if isinstance(answer, ModelFailure):
            self._emit(MODEL_REPLIED, error=answer.error, **_answered_by(answer))
            return self._send(ModelFailed(answer.error, self._now()))
        verdicts = answer.verdicts
        if any(isinstance(v, FieldedCall) for v in verdicts) and not workflow.patched(FIELDED_VERDICTS):
            verdicts = tuple(v.as_before() if isinstance(v, FieldedCall) else v for v in verdicts)  # decided so
        self._catalog.load(verdicts)
        if isinstance(answer, DescribedAnswer) and workflow.patched(DESCRIPTIONS_TAINT):
            self._machine.read_descriptions(answer.described_by)  # before its calls are judged
        reply = answer.reply.reply()
        usage = {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens}
        self._emit(
            MODEL_REPLIED,
            finish_reason=reply.finish_reason,
            content=reply.content,
            tool_calls=len(reply.tool_calls),
            usage=usage
            | {"total_tokens": reply.usage.total_tokens}
            | ({"estimated": True} if answer.usage_estimated else {}),
            **_answered_by(answer),
        )
        return self._send(ModelReplied(reply, self._now(), usage_estimated=answer.usage_estimated))

    async def _run_tools(self, command: RunTools) -> Command:
        """Run the step's calls; a side-effecting call that did not report back makes its outcome unknown."""
        assert self._machine is not None
        self._announce(command)
        finished: dict[str, str] = dict(self._finished)
        untrusted: set[str] = set(self._untrusted)
        retried: dict[str, Retried] = dict(self._retried)

        def note(call: PendingCall, outcome: ToolOutcome) -> None:
            if isinstance(outcome, PrincipalRefused):  # asked by the call's activity: it did not run
                finished[call.call_id] = self._refused(call)
                if not call.read_only:  # its intent was saved before the refusal: the call is known never to have run
                    self._cleared.append(call.call_id)
                    self._emit(RECONCILED, **reconciled_event(call, False, None, "resolve_principal"))
                return
            finished[call.call_id] = self._executed(call, outcome.content)
            if outcome.untrusted:
                untrusted.add(call.call_id)
            # The machine counts it against the tool's retries (unless the run was recorded deciding without).
            if isinstance(outcome, RetriedResult) and workflow.patched(RETRIES_COUNTED):
                retried[call.call_id] = Retried(outcome.retry, outcome.limit)

        for batch in command.batches:
            todo = [c for c in batch if c.call_id not in finished]
            if not todo:
                continue
            if todo[0].read_only:
                outcomes = await asyncio.gather(*(self._tool(c) for c in todo))
                for call, outcome in zip(todo, outcomes, strict=True):
                    note(call, outcome)
                continue
            call = todo[0]
            resolution = await self._resolve(call) if workflow.patched(PRINCIPAL_RESOLVED) else None
            if isinstance(resolution, PrincipalRefused):  # before its intent, as the local driver asks
                finished[call.call_id] = self._refused(call)
                continue
            if call.call_id in self._cleared and workflow.patched(CLEARED_BEFORE_INTENT):
                # Run again, found never to have run: its old intent goes first, in a save of its own. A save
                # writes its intents before its clears, and the new intent would be taken for the old one.
                await self._save()
            self._emit(INTENT_RECORDED, **intent_event(call, self._machine.state.provenance_of(call.call_id)))
            await self._save(intents=(call,))  # in the store before the effect can happen
            try:
                outcome = await self._tool(call, None if resolution is None else resolution.principal)
            except ActivityError:
                # Kept for after the reconciliation.
                self._finished, self._untrusted, self._retried = finished, untrusted, retried
                self._emit(RECONCILIATION_NEEDED, ids=[call.call_id])
                return self._send(OutcomeUnknown((call.call_id,), self._now()))
            note(call, outcome)
        self._finished, self._untrusted, self._retried = {}, set(), {}
        return self._send(ToolsFinished(finished, self._now(), frozenset(untrusted), retried))

    def _announce(self, command: RunTools) -> None:
        """An event for each call of the step not announced yet: validated, recovered or refused."""
        assert self._machine is not None
        for p in command.calls:
            if p.call_id in self._announced:
                continue
            self._announced.add(p.call_id)
            if p.execute:
                self._emit(CALL_VALIDATED, **validated_event(p, self._machine.state.provenance_of(p.call_id)))
            elif self._machine.state.executed.get(p.call_id, [None, None])[1] == p.result:
                self._done(p, p.result or "", CALL_RECOVERED)  # reconciled as executed, or a reused call id
            else:
                self._emit(CALL_REJECTED, **rejected_event(p.call_id, p.tool, p.result or "", p.arguments))

    def _announce_cut_off(self) -> None:
        """A refusal event for each call of the last step that the run's end left unannounced (a budget cut it
        off, a loop was detected): the call has its refusal in the transcript; as the local driver at the end."""
        assert self._machine is not None
        messages = self._machine.state.messages
        if self._step_start >= len(messages) or messages[self._step_start].role != "assistant":
            return
        replies = {m.tool_call_id: m.content or "" for m in messages[self._step_start + 1 :]}
        for call in messages[self._step_start].tool_calls:
            content = replies.get(call.id)
            if call.id in self._announced or not content:
                continue
            self._announced.add(call.id)
            self._emit(CALL_REJECTED, **rejected_event(call.id, call.name, content, json_object(call.arguments)))

    def _done(self, call: PendingCall, content: str, kind: str) -> str:
        self._emit(kind, **outcome_event(call, content))
        return content

    def _refused(self, call: PendingCall) -> str:
        """A call the worker's ``resolve_principal`` refused: it did not run, nothing of it is in the ledger, and
        it is reported rejected (as the local driver's ``_invoke``)."""
        content = no_longer_allowed(call.tool)
        self._emit(CALL_REJECTED, **rejected_event(call.call_id, call.tool, content, call.arguments))
        return content

    async def _resolve(self, call: PendingCall) -> Resolution:
        """Whether the run's principal may still make the side-effecting ``call``, and as whom, as the worker's
        resolver says now: a local activity, its answer in the history before the intent."""
        assert self._principal is not None
        resolution: Resolution = await workflow.execute_local_activity(
            RESOLVE,
            ResolveRequest(call.tool, self._principal),
            result_type=cast(type, Resolution),  # the converter reads a union (each class in turn)
            start_to_close_timeout=timedelta(seconds=RESOLVE_TIMEOUT_SECONDS),
            retry_policy=RetryPolicy(maximum_attempts=READ_ONLY_ATTEMPTS),
        )
        return resolution

    def _executed(self, call: PendingCall, content: str) -> str:
        """Log an executed call and its ledger outcome (a side effect's with its own event, as the local driver)."""
        self._done(call, content, CALL_EXECUTED)
        self._outcomes.append((call, content))
        if not call.read_only:
            self._emit(OUTCOME_RECORDED, id=call.call_id, tool=call.tool, digest=digest(content))
        return content

    async def _tool(self, call: PendingCall, runs_for: PrincipalData | None = None) -> ToolOutcome:
        """Run ``call`` on a worker: a read-only one once the worker's resolver allows it (its activity asks), a
        side-effecting one for ``runs_for`` (the principal as ``_resolve`` gave it) or the run's principal."""
        assert self._machine is not None and self._principal is not None
        timeout = self._catalog.timeouts.get(call.call_id) or DEFAULT_TOOL_TIMEOUT_SECONDS
        fields = (
            self._machine.state.run_id,
            call,
            self._principal,
            self._machine.deadline_at,
            self._heartbeat.total_seconds(),
        )
        request = RunToolRequest(*fields)
        if call.read_only:
            request = AskingToolRequest(*fields, ask=True)
        elif runs_for is not None and runs_for != self._principal:  # as resolved; as before when unchanged
            request = ResolvedToolRequest(*fields, runs_for=runs_for)
        # Exactly one attempt for an effect: it is never repeated by a retry; a dead worker shows in a missed heartbeat.
        attempts = READ_ONLY_ATTEMPTS if call.read_only else 1
        result: ToolOutcome = await workflow.execute_activity(
            RUN_TOOL,
            request,
            result_type=cast(type, ToolOutcome),  # the converter reads a union (each class in turn)
            start_to_close_timeout=timedelta(seconds=timeout + TOOL_TIMEOUT_MARGIN_SECONDS),
            heartbeat_timeout=self._heartbeat,
            retry_policy=RetryPolicy(maximum_attempts=attempts),
        )
        return result

    async def _reconcile(self, command: AwaitReconciliation) -> Command:
        """Ask each unknown call's ``reconcile`` hook; without an answer, wait for a ``reconcile`` update."""
        assert self._machine is not None and self._principal is not None
        self._reconciling = True
        try:
            for call in command.calls:
                answer: ReconcileAnswer = await workflow.execute_activity(
                    RECONCILE,
                    ReconcileRequest(self._machine.state.run_id, call, self._principal),
                    result_type=cast(type, ReconcileAnswer),  # the converter reads a union (each class in turn)
                    start_to_close_timeout=timedelta(seconds=DEFAULT_TOOL_TIMEOUT_SECONDS),
                    heartbeat_timeout=self._heartbeat,  # a worker that dies while its hook decides is replaced soon
                    retry_policy=RetryPolicy(maximum_attempts=READ_ONLY_ATTEMPTS),
                )
                if isinstance(answer, UnreconciledWithin):  # a person's result for it is cut to it (``reconcile``)
                    self._bounds[call.call_id] = answer.max_result_chars
                elif isinstance(answer, ReconciledExecuted | ReconciledNotExecuted) and (
                    self._machine.status is Status.AWAITING_RECONCILIATION
                ):
                    result = answer.result if isinstance(answer, ReconciledExecuted) else None
                    self._settle(call, answer.executed, result, "reconcile hook")
        finally:
            self._reconciling = False
        assert self._command is not None
        if self._machine.status is Status.AWAITING_RECONCILIATION:
            reason = "waiting for reconciliation: the outcome of a call is unknown"
            return await self._pause(self._command, reason)
        return self._command

    def _settle(self, call: PendingCall, executed: bool, result: str | None, by: str) -> None:
        """Record what became of a call with an unknown outcome; the ledger write rides on the next save."""
        self._send(Reconciled(call.call_id, executed, self._now(), result))
        if executed and result is not None:
            self._outcomes.append((call, result))
        elif not executed:
            self._cleared.append(call.call_id)
        self._emit(RECONCILED, **reconciled_event(call, executed, result, by))

    def _summary(self) -> dict[str, Any]:
        assert self._machine is not None
        s = self._machine.state
        return {
            "run_id": s.run_id,
            "status": s.status.value,
            "output": s.output,
            "reason": s.reason,
            "steps": s.steps,
            "tool_calls": s.tool_calls,
            "usage": [s.usage.input_tokens, s.usage.output_tokens],
        }

    # -- updates: validators refuse before anything enters history --

    @workflow.update(name="decide")
    def decide(self, decision: Decision) -> str:
        """Approve or deny one call waiting for approval; the run's status after it."""
        assert self._machine is not None
        call = next(p for p in self._machine.state.pending if p.call_id == decision.call_id)
        self._send(
            ApprovalDecided(decision.call_id, decision.fingerprint, decision.approved, self._now(), decision.reason)
        )
        self._emit(
            APPROVAL_DECIDED,
            id=call.call_id,
            tool=call.tool,
            approved=decision.approved,
            reason=decision.reason,
            by=decision.by or "update",
            fingerprint=decision.fingerprint,
        )
        return self._machine.status.value

    def _waiting_in(self, status: Status) -> Run:
        """The run's machine when it is in ``status``; else an update validator's refusal (nothing enters history)."""
        machine = self._machine
        if machine is None or machine.status is not status:
            now = "starting" if machine is None else machine.status.value
            raise ApplicationError(f"the run is {now}, not {status.value}", type="NotWaiting")
        return machine

    @staticmethod
    def _storable(what: str, *words: str | None) -> None:
        """An update validator's refusal of words the run store cannot keep (a lone UTF-16 surrogate): taken, they
        would fail every save after them."""
        if not all(nesting.utf8(w) for w in words if w is not None):
            raise ApplicationError(f"{what} is {nesting.NotText()}", type="NotWaiting")

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        self._storable("the decision's reason or decider", decision.reason, decision.by)
        machine = self._waiting_in(Status.AWAITING_APPROVAL)
        call = next((p for p in machine.state.undecided() if p.call_id == decision.call_id), None)
        if call is None:
            raise ApplicationError(f"call {decision.call_id} is not waiting for approval", type="NotWaiting")
        if call.fingerprint != decision.fingerprint:
            raise ApplicationError(
                f"call {decision.call_id}: the decision is for other arguments (fingerprint mismatch)",
                type="NotWaiting",
            )

    @workflow.update(name="reconcile")
    def reconcile(self, answer: Reconciliation) -> str:
        """Say what became of a call whose outcome is unknown; the run's status after it."""
        assert self._machine is not None
        result = None
        if answer.executed and answer.result is not None:
            # Cut to the tool's bound as a result it returned is (``toolbox.result_envelope``), as the local driver
            # cuts a person's result; a result within it, and every result before this, is taken whole.
            value = json.loads(answer.result)
            bound = self._bounds.get(answer.call_id, envelope.DEFAULT_MAX_RESULT_CHARS)
            result, cut = envelope.ok(value), envelope.ok_within(value, bound)
            if cut != result and workflow.patched(RECONCILED_CUT):
                result = cut
        call = next(p for p in self._machine.state.pending if p.call_id == answer.call_id)
        self._settle(call, answer.executed, result, answer.by or "update")
        return self._machine.status.value

    @reconcile.validator
    def _validate_reconcile(self, answer: Reconciliation) -> None:
        self._storable("who reconciled", answer.by)
        machine = self._waiting_in(Status.AWAITING_RECONCILIATION)
        if answer.call_id not in machine.state.unknown:
            raise ApplicationError(f"call {answer.call_id} has no unknown outcome", type="NotWaiting")
        if answer.executed:
            if answer.result is None:
                raise ApplicationError("an executed call needs its result as JSON text", type="NotWaiting")
            try:  # what `tether reconcile --executed` accepts: no deeper than the gate, text that can be stored
                nesting.loads(answer.result, nesting.MAX_DEPTH)
            except ValueError as exc:
                why = f"an executed call's result must be JSON: {exc}"
                raise ApplicationError(why, type="NotWaiting") from None

    # -- queries --

    def _phase(self, status: Status) -> str:
        """What the run is doing: ``waiting`` for a person (an approval, or a reconciliation no hook could
        decide), ``reconciling`` (its reconcile hooks are deciding), ``running``, or ``finished``."""
        if status.terminal:
            return "finished"
        if status is Status.AWAITING_RECONCILIATION and self._reconciling:
            return "reconciling"
        if status in (Status.AWAITING_APPROVAL, Status.AWAITING_RECONCILIATION):
            return "waiting"
        return "running"

    @workflow.query(name="status")
    def status(self) -> dict[str, Any]:
        """The run's status, its ``phase`` (``_phase``), steps, output and reason."""
        machine = self._machine
        if machine is None:
            return {"status": Status.READY.value, "phase": "running", "steps": 0, "output": None, "reason": None}
        s = machine.state
        phase = self._phase(s.status)
        return {"status": s.status.value, "phase": phase, "steps": s.steps, "output": s.output, "reason": s.reason}

    @workflow.query(name="pending")
    def pending(self) -> list[dict[str, Any]]:
        """The calls waiting for a person: for approval, or with an unknown outcome no hook could decide."""
        machine = self._machine
        if machine is None or self._phase(machine.status) != "waiting":
            return []
        if machine.status is Status.AWAITING_APPROVAL:
            return [p.to_dict() | {"waiting_for": "approval"} for p in machine.state.undecided()]
        if machine.status is Status.AWAITING_RECONCILIATION:
            unknown = set(machine.state.unknown)
            return [
                p.to_dict() | {"waiting_for": "reconciliation"} for p in machine.state.pending if p.call_id in unknown
            ]
        return []


def _units(request: SaveRequest) -> tuple[list[list[tuple[str, Any]]], dict[str, list[Any]]]:
    """What ``request`` holds, as units that must not be cut (a ledger write goes with the event that logs it: the
    store dates it by that event) in order, and what must go in its last part: the intents, each from its event on
    (its ledger row holds its provenance, read from the progress now), and the writes no event logs."""
    logged_by: dict[tuple[str, str], int] = {}  # (kind of ledger write, call id) -> index of its event
    for index, (kind, data, _, _) in enumerate(request.events):
        if kind == INTENT_RECORDED:
            logged_by["intents", data["id"]] = index
        elif kind in (OUTCOME_RECORDED, RECONCILED, CALL_EXECUTED):
            logged_by["outcomes", data["id"]] = index
        if kind == RECONCILED and not data["executed"]:
            logged_by["cleared", data["id"]] = index
    end = len(request.events)
    writes: dict[int, list[tuple[str, Any]]] = {}
    for call, result in request.outcomes:
        writes.setdefault(logged_by.get(("outcomes", call.call_id), end), []).append(("outcomes", (call, result)))
    for call in request.intents:
        writes.setdefault(logged_by.get(("intents", call.call_id), end), []).append(("intents", call))
    for call_id in request.cleared:
        writes.setdefault(logged_by.get(("cleared", call_id), end), []).append(("cleared", call_id))
    last = min((logged_by.get(("intents", c.call_id), end) for c in request.intents), default=end)
    units = [[("events", e), *writes.get(i, [])] for i, e in enumerate(request.events[:last])]
    units += [[("messages", m)] for m in request.messages]
    final: dict[str, list[Any]] = {"events": list(request.events[last:]), "messages": []}
    final |= {"outcomes": [], "intents": [], "cleared": []}
    for index in range(last, end + 1):
        for kind, write in writes.get(index, []):
            final[kind].append(write)
    return units, final


def _answered_by(answer: ModelOutcome) -> dict[str, str]:
    """The ``model`` of a ``model_replied`` event; a history recorded before workers named it has none."""
    if isinstance(answer, NamedAnswer):
        return {"model": answer.answered_by}
    return {"model": answer.model} if isinstance(answer, NamedFailure) else {}
