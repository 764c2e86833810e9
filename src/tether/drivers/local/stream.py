"""What a run is doing, as typed events: ``async for event in agent.stream(prompt)``.

Every event carries ``at`` (the agent's clock), ``run_id``, ``step`` and
``model``; call events carry the tool and its arguments, redacted (keys like
password or token). In the order a step produces them::

    StepStarted
    TextDelta*  ToolCallDelta*          as the model's reply streams in
    CallValidated | CallRefused         per call, after the host's checks
    ApprovalNeeded                      a call that waits for a decision
    CallStarted  CallFinished           per executed call (with its duration)
    StepFinished                        with the step's usage
    HandedOff                           a transfer ran: another agent answers from the next step on
    ...
    RunFinished                         always last, with the RunResult

``ToolCallDelta.arguments_delta`` is the model's raw text as it arrives
(a partial JSON string cannot be redacted); the checked, redacted
arguments come with ``CallValidated``. For a run with a store, events are
delivered only once checkpointed, so they may arrive in bursts, never out
of order. In a run whose agent has handoffs, every event also names the
``agent`` answering (else ``agent`` is None), and ``model`` is that
agent's model.

A call of a sub-agent tool (``Agent.as_tool``) streams its child run's
events too, in place, each with the child's ``run_id`` (``model`` still
names the streaming agent's model): the child's steps start and finish
within the parent's call, and the parent's step finishes after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.core.events import (
    APPROVAL_REQUESTED,
    CALL_FINISHED,
    CALL_REJECTED,
    CALL_STARTED,
    CALL_VALIDATED,
    HANDOFF,
    MODEL_REPLIED,
    RUN_FINISHED,
    RUN_PAUSED,
    STEP_STARTED,
    TEXT,
    TOOL_CALL_DELTA,
    RunEvent,
)
from tether.core.messages import Usage
from tether.core.redact import redact

if TYPE_CHECKING:
    from tether.core.report import RunResult

__all__ = [
    "ApprovalNeeded",
    "CallFinished",
    "CallRefused",
    "CallStarted",
    "CallValidated",
    "HandedOff",
    "RunFinished",
    "StepFinished",
    "StepStarted",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEvent:
    """What every stream event carries: when, which run, which step, which model (and which agent)."""

    at: float
    run_id: str
    step: int
    model: str
    agent: str | None = None  # the agent answering, in a run whose agent has handoffs


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(StreamEvent):
    """A step began: the model is asked for a reply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(StreamEvent):
    """A piece of the answer's text, as the model streams it."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta(StreamEvent):
    """A piece of a tool call's arguments, as the model streams them (before any gate has judged the call)."""

    index: int  # the call's position in the reply
    call_id: str | None  # in the first delta of a call
    tool: str | None  # in the first delta of a call
    arguments_delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _CallEvent(StreamEvent):
    call_id: str
    tool: str
    arguments: dict[str, Any] | None  # redacted; None when they did not decode


@dataclass(frozen=True, slots=True, kw_only=True)
class CallValidated(_CallEvent):
    """A call passed every gate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRefused(_CallEvent):
    """A gate refused a call: ``code`` is the envelope's error code."""

    code: str  # invalid_json, unknown_tool, invalid_arguments, ... (DESIGN.md §4)
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalNeeded(_CallEvent):
    """A call waits for approval; the run pauses unless an approver decides it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallStarted(_CallEvent):
    """A call started running."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallFinished(_CallEvent):
    """A call finished: ``outcome`` is ``ok`` or an error code; ``duration`` in seconds."""

    outcome: str  # "ok" or an error code
    duration: float  # seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFinished(StreamEvent):
    """A step ended: the model's finish reason and the tokens the step used."""

    finish_reason: str | None
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class HandedOff(StreamEvent):
    """A transfer call ran: ``to_agent`` (also the event's ``agent``) answers from the next step on."""

    call_id: str
    from_agent: str
    to_agent: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(StreamEvent):
    """The run ended; the last event of every stream."""

    result: RunResult


class Translator:
    """Turns a driver's events into typed stream events, handing each to ``put``."""

    def __init__(
        self,
        model: str,
        arguments: Mapping[str, dict[str, Any] | None],
        clock: Callable[[], float],
        put: Callable[[StreamEvent], None],
        agent: str | None = None,
    ) -> None:
        """``arguments``: the driver's decoded arguments by call id (filled as calls are judged); ``agent``: the
        one answering, in a run with handoffs."""
        self.model = model
        self.agent = agent
        self.arguments = arguments
        self.clock = clock
        self.put = put
        self._step_ends: dict[str, RunEvent] = {}  # run id -> the model reply of its current step (children too)
        self._run_id: str | None = None  # the streaming run's: its first event's

    def _base(self, event: RunEvent) -> dict[str, Any]:
        return {"at": event.at, "run_id": event.run_id, "step": event.step, "model": self.model, "agent": self.agent}

    def _call(self, event: RunEvent) -> dict[str, Any]:
        call_id = event.data.get("id", "")
        arguments = event.data.get("arguments")
        if arguments is None:
            arguments = self.arguments.get(call_id)
        return {
            **self._base(event),
            "call_id": call_id,
            "tool": event.data.get("tool", ""),
            "arguments": None if arguments is None else redact(arguments),
        }

    def feed(self, event: RunEvent) -> None:
        kind, data = event.kind, event.data
        if self._run_id is None:
            self._run_id = event.run_id
        if kind == STEP_STARTED:
            self.close_step(event.at, event.run_id)
            self.put(StepStarted(**self._base(event)))
        elif kind == TEXT:
            self.put(TextDelta(**self._base(event), text=data["text"]))
        elif kind == TOOL_CALL_DELTA:
            self.put(
                ToolCallDelta(
                    **self._base(event),
                    index=data["index"],
                    call_id=data["id"],
                    tool=data["tool"],
                    arguments_delta=data["arguments"],
                )
            )
        elif kind == MODEL_REPLIED:
            self._step_ends[event.run_id] = event
        elif kind in (RUN_FINISHED, RUN_PAUSED) and event.run_id != self._run_id:
            self.close_step(event.at, event.run_id)  # a child run's last step ends with it
        elif kind == CALL_VALIDATED:
            self.put(CallValidated(**self._call(event)))
        elif kind == CALL_REJECTED:
            code, message = _error_of(data.get("result", ""))
            self.put(CallRefused(**self._call(event), code=code, message=message))
        elif kind == APPROVAL_REQUESTED:
            self.put(ApprovalNeeded(**self._call(event)))
        elif kind == CALL_STARTED:
            self.put(CallStarted(**self._call(event)))
        elif kind == CALL_FINISHED:
            self.put(CallFinished(**self._call(event), outcome=data["outcome"], duration=data["duration"]))
        elif kind == HANDOFF:
            self.close_step(event.at)  # the step that is ending was the former agent's
            self.model, self.agent = data["model"], data["to"]
            self.put(HandedOff(**self._base(event), call_id=data["id"], from_agent=data["from"], to_agent=data["to"]))

    def close_step(self, at: float | None = None, run_id: str | None = None) -> None:
        """The StepFinished of the step that is ending, once its calls are done (at ``at``, else now): of run
        ``run_id``'s, else of every run's."""
        ends = [self._step_ends.pop(run_id, None)] if run_id is not None else list(self._step_ends.values())
        if run_id is None:
            self._step_ends.clear()
        for end in ends:
            if end is None:
                continue
            usage = end.data.get("usage") or {}
            answered = end.data.get("model", self.model)  # which model answered: a FallbackModel's member
            self.put(
                StepFinished(
                    **{**self._base(end), "at": self.clock() if at is None else at, "model": answered},
                    finish_reason=end.data.get("finish_reason"),
                    usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
                )
            )


def _error_of(envelope: str) -> tuple[str, str]:
    import json

    try:
        error = json.loads(envelope)["error"]
        return str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return "unknown", ""
