"""The activities' typed payloads (``drivers/temporal/payloads.py``) are the wire format recorded histories hold.

Each payload of the recorded run (tests/temporal/histories/) reads into its
type and writes back to the very bytes recorded; each shape the run does not
hold (a refused call, a failed model request, a reconcile hook's answers) is
written with exactly the keys the dicts before them had.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.converter import PayloadConverter

from tether.core.envelope import ErrorCode
from tether.core.machine import PendingCall
from tether.drivers.temporal.payloads import (
    AcceptedCall,
    AskingToolRequest,
    CallModelRequest,
    ChoosingRequest,
    FieldedCall,
    ModelAnswer,
    ModelFailure,
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
    RejectedCall,
    ReplyData,
    Resolution,
    ResolvedToolRequest,
    RetriedResult,
    RunToolRequest,
    SaveRequest,
    ToolOutcome,
    ToolRequest,
    ToolResult,
    TracedCall,
    Unreconciled,
    UnreconciledWithin,
    WireCall,
)
from tether.drivers.temporal.workflow import CALL_MODEL, RECONCILE, RUN_TOOL, SAVE

HISTORY = Path(__file__).parent / "histories" / "order_with_approval.json"
CONVERTER = PayloadConverter.default
# activity -> the type of its input, the type of its result (None: it returns nothing)
TYPES: dict[str, tuple[Any, Any]] = {
    CALL_MODEL: (CallModelRequest, ModelOutcome),
    RUN_TOOL: (ToolRequest, ToolOutcome),
    SAVE: (SaveRequest, None),
    RECONCILE: (ReconcileRequest, ReconcileAnswer),
}


def recorded() -> Iterator[tuple[str, Payload, Payload | None]]:
    """Each activity of the recorded run: its name, its input and its result."""
    history = WorkflowHistory.from_json("recorded-run", json.loads(HISTORY.read_text()))
    scheduled: dict[int, tuple[str, Payload]] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            [payload] = attributes.input.payloads
            scheduled[event.event_id] = (attributes.activity_type.name, payload)
        elif event.HasField("activity_task_completed_event_attributes"):
            done = event.activity_task_completed_event_attributes
            name, payload = scheduled.pop(done.scheduled_event_id)
            [result] = done.result.payloads
            yield name, payload, result if result.data else None
    assert not scheduled


def read(payload: Payload, hint: Any) -> Any:
    return CONVERTER.from_payloads([payload], [hint])[0]


def written(value: Any) -> bytes:
    data: bytes = CONVERTER.to_payloads([value])[0].data
    return data


def test_every_recorded_payload_reads_into_its_type_and_writes_back_the_same_bytes() -> None:
    seen = []
    for name, payload, result in recorded():
        request_type, result_type = TYPES[name]
        request = read(payload, request_type)
        assert isinstance(request, request_type)
        assert name != RUN_TOOL or type(request) is RunToolRequest  # recorded before requests asked the resolver
        assert written(request) == payload.data
        if result_type is None:
            assert result is None
        else:
            assert result is not None
            answer = read(result, result_type)
            assert not isinstance(answer, dict)
            assert written(answer) == result.data
        seen.append(name)

    assert set(seen) == {CALL_MODEL, RUN_TOOL, SAVE}  # no reconcile in this run: its shapes are below
    first = read(next(recorded())[1], CallModelRequest)
    assert first.save.create is not None and first.save.create.principal == PrincipalData("local", ("*",))
    assert isinstance(first.save.events[0][1], dict) and isinstance(first.save.config.budget.max_steps, int)


ACCEPTED = AcceptedCall("price", '{"item": "tea"}', {"item": "tea"}, True, False, False, 30.0)
REJECTED = RejectedCall("nope", "{}", ErrorCode.UNKNOWN_TOOL, "no tool named nope")
REPLY = ReplyData(1, "tool_calls", None, (WireCall("c1", "function", "price", '{"item": "tea"}'),), (10, 5), "m")


@pytest.mark.parametrize(
    ("value", "hint", "wire"),
    [
        (ModelFailure("ModelTimeout: no reply"), ModelOutcome, {"error": "ModelTimeout: no reply"}),
        (
            REJECTED,
            AcceptedCall | RejectedCall,
            {
                "name": "nope",
                "raw_arguments": "{}",
                "accepted": False,
                "code": "unknown_tool",
                "message": "no tool named nope",
            },
        ),
        (Unreconciled(), ReconcileAnswer, {"known": False}),
        (UnreconciledWithin(5_000), ReconcileAnswer, {"known": False, "max_result_chars": 5_000}),
        (ReconciledNotExecuted(), ReconcileAnswer, {"known": True, "executed": False}),
        (
            ReconciledExecuted('{"ok": true}'),
            ReconcileAnswer,
            {"known": True, "executed": True, "result": '{"ok": true}'},
        ),
        (ToolResult("{}", True), ToolResult, {"content": "{}", "untrusted": True}),
    ],
    ids=[
        "model_failure",
        "rejected_call",
        "unreconciled",
        "unreconciled_within",
        "not_executed",
        "executed",
        "untrusted_result",
    ],
)
def test_each_shape_has_exactly_the_keys_it_had_and_reads_back(value: Any, hint: Any, wire: dict[str, Any]) -> None:
    payload = CONVERTER.to_payloads([value])[0]

    assert json.loads(payload.data) == wire
    assert read(payload, hint) == value


def test_a_model_answer_reads_back_each_verdict_as_its_own_class() -> None:
    answer = ModelAnswer(REPLY, False, (ACCEPTED, REJECTED, None))

    back = read(CONVERTER.to_payloads([answer])[0], ModelOutcome)

    assert back == answer
    assert [type(v) for v in back.verdicts] == [AcceptedCall, RejectedCall, type(None)]
    assert back.reply.reply().tool_calls[0].name == "price"


def test_a_reply_carries_what_its_adapter_sends_back() -> None:
    """Reasoning items a Responses reply keeps go through the workflow's history and back into the message."""
    kept = {"openai_responses": {"items": [{"type": "reasoning", "encrypted_content": "gAAA"}], "digest": "d"}}
    reply = ReplyData.of(dataclasses.replace(REPLY.reply(), provider_data=kept))

    back = read(CONVERTER.to_payloads([ModelAnswer(reply, False, ())])[0], ModelOutcome)

    assert isinstance(back, ModelAnswer) and back.reply.reply().provider_data == kept
    plain = read(CONVERTER.to_payloads([ModelAnswer(REPLY, False, ())])[0], ModelOutcome)
    assert type(plain.reply) is ReplyData and "provider_data" not in json.loads(written(REPLY))


def test_payloads_of_earlier_workers_read_with_the_defaults() -> None:
    """A principal without roles, a tool request without a heartbeat: keys earlier workers did not write."""
    call = PendingCall("c1", "price", {"item": "tea"}, "f", read_only=True, execute=True)
    old = {"run_id": "r", "call": call.to_dict(), "principal": {"id": "ann", "scopes": ["*"]}, "deadline_at": None}

    request = read(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(old).encode()), RunToolRequest)

    assert request == RunToolRequest("r", call, PrincipalData("ann", ("*",)), None)
    assert request.heartbeat_seconds is None and request.principal.roles == ()


def test_a_traced_call_reads_back_as_its_own_class_with_its_sinks_and_an_accepted_one_without() -> None:
    traced = TracedCall("send", '{"to": "bob"}', {"to": "bob"}, False, False, False, 30.0, ("to",))
    answer = ModelAnswer(REPLY, False, (traced, ACCEPTED, REJECTED))

    payload = CONVERTER.to_payloads([answer])[0]
    back = read(payload, ModelOutcome)

    assert back == answer
    assert [type(v) for v in back.verdicts] == [TracedCall, AcceptedCall, RejectedCall]
    assert json.loads(payload.data)["verdicts"][0]["sinks"] == ["to"]
    assert "sinks" not in json.loads(payload.data)["verdicts"][1]  # an untraced call's payload is as it always was
    assert back.verdicts[0].verdict().sinks == frozenset({"to"})


def test_a_named_answer_and_failure_read_back_as_their_own_classes_and_the_plain_ones_as_before() -> None:
    """Workers name the model that answered; answers recorded before they did read and write as they were."""
    named = NamedAnswer(REPLY, False, (ACCEPTED,), "gpt-4o-mini")
    failure = NamedFailure("ModelTimeout: no reply", "gpt-4o-mini")

    assert read(CONVERTER.to_payloads([named])[0], ModelOutcome) == named
    assert read(CONVERTER.to_payloads([failure])[0], ModelOutcome) == failure
    plain = ModelAnswer(REPLY, False, (ACCEPTED,))
    back = read(CONVERTER.to_payloads([plain])[0], ModelOutcome)
    assert type(back) is ModelAnswer and back == plain
    assert type(read(CONVERTER.to_payloads([ModelFailure("x")])[0], ModelOutcome)) is ModelFailure


def test_a_request_with_a_tool_choice_reads_back_as_its_own_class_and_one_without_as_before() -> None:
    first = read(next(recorded())[1], CallModelRequest)
    choosing = ChoosingRequest(first.save, 1, first.principal, None, False, "required")
    hint = ChoosingRequest | CallModelRequest

    assert read(CONVERTER.to_payloads([choosing])[0], hint) == choosing
    plain = read(CONVERTER.to_payloads([first])[0], hint)
    assert type(plain) is CallModelRequest and plain == first


def test_a_fielded_call_reads_back_as_its_own_class_with_its_fields_and_principal_sinks() -> None:
    """``trusted_fields`` and ``principal_sinks`` cross in a shape of their own; a traced call's is as it was."""
    fielded = FieldedCall("inbox", "{}", {}, True, False, True, None, None, ("id_",), ())
    deleting = FieldedCall("delete", '{"id": "m1"}', {"id": "m1"}, False, False, False, 5.0, ("id",), (), ("id",))
    traced = TracedCall("send", '{"to": "bob"}', {"to": "bob"}, False, False, False, 30.0, ("to",))
    answer = ModelAnswer(REPLY, False, (fielded, deleting, traced, ACCEPTED))

    payload = CONVERTER.to_payloads([answer])[0]
    back = read(payload, ModelOutcome)

    assert back == answer
    assert [type(v) for v in back.verdicts] == [FieldedCall, FieldedCall, TracedCall, AcceptedCall]
    assert "trusted_fields" not in json.loads(payload.data)["verdicts"][2]
    assert back.verdicts[0].verdict().trusted_fields == ("id_",) and back.verdicts[0].verdict().sinks is None
    assert back.verdicts[1].verdict().principal_sinks == frozenset({"id"})
    # As a workflow before the shape read it (a run decided so replays so): without the fields.
    assert fielded.as_before() == AcceptedCall("inbox", "{}", {}, True, False, True, None)
    assert deleting.as_before() == TracedCall("delete", '{"id": "m1"}', {"id": "m1"}, False, False, False, 5.0, ("id",))


def test_a_retried_result_reads_back_as_its_own_class_and_a_plain_one_as_before() -> None:
    retried = RetriedResult('{"ok": false}', False, "busy, try again", 1)

    assert read(CONVERTER.to_payloads([retried])[0], ToolOutcome) == retried
    plain = read(CONVERTER.to_payloads([ToolResult("{}", True)])[0], ToolOutcome)
    assert type(plain) is ToolResult and plain == ToolResult("{}", True)


def test_requests_that_ask_the_resolver_or_carry_its_answer_and_its_refusal_read_back_as_their_own_classes() -> None:
    """A read-only call's request asks the worker's resolve_principal, a side effect's carries the principal as
    resolved; the refusal is a tool outcome of its own. Requests and results recorded before read as they were."""
    call = PendingCall("c1", "price", {"item": "tea"}, "f", read_only=True, execute=True)
    ann, demoted = PrincipalData("ann", ("read", "write")), PrincipalData("ann", ("read",))
    asking = AskingToolRequest("r", call, ann, None, 3.0, ask=True)
    resolved = ResolvedToolRequest("r", call, ann, None, 3.0, runs_for=demoted)
    plain = RunToolRequest("r", call, ann, None, 3.0)

    for request in (asking, resolved, plain):
        back = read(CONVERTER.to_payloads([request])[0], ToolRequest)
        assert type(back) is type(request) and back == request
    assert "ask" not in json.loads(written(plain)) and "runs_for" not in json.loads(written(plain))
    assert json.loads(written(PrincipalRefused())) == {"refused": True}
    assert read(CONVERTER.to_payloads([PrincipalRefused()])[0], ToolOutcome) == PrincipalRefused()
    assert type(read(CONVERTER.to_payloads([ToolResult("{}", False)])[0], ToolOutcome)) is ToolResult
    for answer in (PrincipalResolved(demoted), PrincipalRefused()):
        assert read(CONVERTER.to_payloads([answer])[0], Resolution) == answer
