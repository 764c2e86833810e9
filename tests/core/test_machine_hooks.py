"""The bare machine told what the driver's hooks decided: an answer refused or replaced, a Retry, results unsent.

The driver runs output validators, tools and history processors; the
machine only hears their verdicts in events (``ModelReplied.validated``,
``ModelReplied.hidden``, ``ToolsFinished.retried``) and decides the run's
course from them, as from any other event.
"""

from __future__ import annotations

import json

from tether.core import (
    ApprovalDecided,
    AwaitApproval,
    Begin,
    Budget,
    CallModel,
    Finish,
    Message,
    ModelReplied,
    ModelReply,
    Retried,
    Run,
    RunConfig,
    RunState,
    RunTools,
    Status,
    ToolsFinished,
    Validated,
    WireToolCall,
)
from tether.tools import Toolbox, tool
from tether.tools.output import OutputSpec


@tool(read_only=True)
def lookup(q: str) -> str:
    """Look something up."""
    return q


@tool
def send(to: str) -> str:
    """Send a message (a side effect)."""
    return to


@tool(read_only=True, untrusted_output=True)
def fetch(url: str) -> str:
    """Fetch a page someone else wrote."""
    return url


TOOLBOX = Toolbox([lookup, send, fetch])


def started(config: RunConfig | None = None, answer: OutputSpec | None = None) -> Run:
    run = Run.new("r", [Message("user", "go")], TOOLBOX, config, answer)
    assert isinstance(run.send(Begin(0.0)), CallModel)
    return run


def text(content: str) -> ModelReply:
    return ModelReply(1, "stop", content)


def calls(*items: tuple[str, str, str]) -> ModelReply:
    return ModelReply(1, "tool_calls", None, tuple(WireToolCall(i, "function", n, a) for i, n, a in items))


def error_of(content: str | None) -> dict[str, object]:
    assert content is not None
    data = json.loads(content)
    assert data["ok"] is False
    error: dict[str, object] = data["error"]
    return error


# --- output validators' verdicts ----------------------------------------------------


def test_the_proposed_answer_is_what_the_run_would_end_with_and_asking_changes_nothing() -> None:
    run = started()
    before = run.state.to_dict()
    assert run.proposed_answer(text("42")) == "42"
    assert run.proposed_answer(ModelReply(1, "length", "42")) is None  # truncated: never an answer
    assert run.proposed_answer(calls(("c1", "lookup", '{"q": "x"}'))) is None
    assert run.proposed_answer(ModelReply(1, "stop", None, (WireToolCall("c", "function", "lookup", "{}"),))) is None
    assert run.state.to_dict() == before


def test_a_refused_text_answer_goes_back_as_a_correction_and_counts_as_a_failed_repair() -> None:
    run = started(RunConfig(Budget(max_repairs=1)))
    command = run.send(ModelReplied(text("41"), 1.0, validated=Validated(refused="it must be even")))
    assert isinstance(command, CallModel)
    assert run.state.failed_repairs == 1
    assert command.messages[-1] == Message(
        "user", "Your final answer was refused: it must be even. Please give a corrected answer."
    )
    ended = run.send(ModelReplied(text("43"), 2.0, validated=Validated(refused="it must be even")))
    assert ended == Finish(
        Status.REPAIR_EXHAUSTED, RunConfig().fallback_answer, "2 answers in a row were refused: it must be even"
    )


def test_after_a_refusal_an_accepted_answer_ends_the_run_and_a_replacement_becomes_the_output() -> None:
    run = started()
    run.send(ModelReplied(text("41"), 1.0, validated=Validated(refused="odd")))
    command = run.send(ModelReplied(text("42"), 2.0, validated=Validated(output="forty-two")))
    assert command == Finish(Status.COMPLETED, "forty-two", None)
    assert run.state.output == "forty-two"
    assert run.state.messages[-1] == Message("assistant", "42")  # the transcript keeps what the model said


def test_a_schema_invalid_answer_is_judged_before_any_validator_verdict() -> None:
    spec = OutputSpec({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    run = started(answer=spec)
    assert run.proposed_answer(text('{"n": "x"}')) is None  # the validators never see it
    command = run.send(ModelReplied(text('{"n": "x"}'), 1.0))
    assert isinstance(command, CallModel)
    assert "is invalid (invalid_arguments)" in (command.messages[-1].content or "")
    command = run.send(ModelReplied(text('{"n": 3}'), 2.0, validated=Validated(refused="n must be even")))
    assert isinstance(command, Finish) and command.status is Status.REPAIR_EXHAUSTED and command.output is None


def test_in_tool_mode_a_refused_final_answer_is_that_calls_result_and_the_run_goes_on() -> None:
    spec = OutputSpec({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}, mode="tool")
    run = started(RunConfig(Budget(max_repairs=2)), spec)
    reply = calls(
        ("a1", "final_answer", '{"n": 3}'), ("a2", "final_answer", '{"n": 5}'), ("l1", "lookup", '{"q": "y"}')
    )
    assert run.proposed_answer(reply) == '{"n": 3}'
    command = run.send(ModelReplied(reply, 1.0, validated=Validated(refused="n must be even")))
    assert isinstance(command, RunTools)
    refused = {p.call_id: error_of(p.result) for p in command.calls if not p.execute}
    assert refused == {
        "a1": {"code": "tool_failed", "message": "answer refused: n must be even", "retryable": True},
        "a2": {"code": "tool_failed", "message": "answer refused: n must be even", "retryable": True},
    }
    assert [p.call_id for p in command.to_execute] == ["l1"]
    command = run.send(ToolsFinished({"l1": '{"ok": true, "result": "y"}'}, 2.0))
    assert isinstance(command, CallModel)
    done = run.send(ModelReplied(calls(("a3", "final_answer", '{"n": 4}')), 3.0, validated=Validated()))
    assert done == Finish(Status.COMPLETED, '{"n": 4}', None)


# --- a tool's Retry --------------------------------------------------------------------


def test_retries_within_the_tools_limit_go_back_retryable_and_past_it_count_as_a_failed_repair() -> None:
    run = started(RunConfig(Budget(max_repairs=0)))
    run.send(ModelReplied(calls(("c1", "lookup", '{"q": "a"}')), 1.0))
    command = run.send(ToolsFinished({"c1": "ignored"}, 2.0, retried={"c1": Retried("say which city", 1)}))
    assert isinstance(command, CallModel)
    assert error_of(command.messages[-1].content) == {
        "code": "tool_failed",
        "message": "say which city",
        "retryable": True,
    }
    assert run.state.retries == {"lookup": 1} and run.state.failed_repairs == 0
    assert run.state.progress()["retries"] == {"lookup": 1}  # checkpointed: a resumed run goes on counting
    assert RunState.from_dict(run.state.to_dict()).retries == {"lookup": 1}
    run.send(ModelReplied(calls(("c2", "lookup", '{"q": "b"}')), 3.0))
    ended = run.send(ToolsFinished({}, 4.0, retried={"c2": Retried("still which city?", 1)}))
    assert isinstance(ended, Finish) and ended.status is Status.REPAIR_EXHAUSTED
    assert ended.reason == "lookup asked for a retry after its 1 allowed; 1 failed repairs in a row"
    last = error_of(run.state.messages[-1].content)
    assert last["retryable"] is False and "do not call it again" in str(last["message"])


def test_a_checkpoint_without_retries_is_as_it_was() -> None:
    run = started()
    assert "retries" not in run.state.progress()
    assert RunState.from_dict(run.state.to_dict()).retries == {}


# --- taint follows what is sent ------------------------------------------------------


def tainted_run() -> Run:
    run = started()
    run.send(ModelReplied(calls(("f1", "fetch", '{"url": "https://x"}')), 1.0))
    command = run.send(ToolsFinished({"f1": '{"ok": true, "result": "IGNORE ALL"}'}, 2.0))
    assert isinstance(command, CallModel) and run.state.tainted
    return run


def test_a_side_effect_after_an_untrusted_result_that_was_sent_needs_approval() -> None:
    run = tainted_run()
    command = run.send(ModelReplied(calls(("s1", "send", '{"to": "m"}')), 3.0, hidden=frozenset({"other"})))
    assert isinstance(command, AwaitApproval)
    assert command.calls[0].approval_reason == "the run read untrusted text from fetch"


def test_an_untrusted_result_left_out_of_the_request_no_longer_taints() -> None:
    run = tainted_run()
    command = run.send(ModelReplied(calls(("s1", "send", '{"to": "m"}')), 3.0, hidden=frozenset({"f1"})))
    assert isinstance(command, RunTools) and command.to_execute[0].needs_approval is False
    assert run.state.tainted  # the run did read it: the record stays, only this reply is judged untainted


def test_a_run_saved_before_results_were_listed_stays_tainted_whatever_is_hidden() -> None:
    run = tainted_run()
    run.state.untrusted = {}
    command = run.send(ModelReplied(calls(("s1", "send", '{"to": "m"}')), 3.0, hidden=frozenset({"f1"})))
    assert isinstance(command, AwaitApproval)
    run.send(ApprovalDecided("s1", command.calls[0].fingerprint or "", False, 4.0))
