"""The machine alone with an output type: the final answer is judged like a call, repairs share one budget."""

from __future__ import annotations

import pydantic

from tether.core import Begin, Budget, CallModel, Finish, Message, ModelReplied, ModelReply, Run, RunConfig, Status
from tether.core.machine import RunState
from tether.tools import Toolbox
from tether.tools.output import OutputSpec


class Answer(pydantic.BaseModel):
    n: int


def reply(content: str, finish: str = "stop") -> ModelReply:
    return ModelReply(choices=1, finish_reason=finish, content=content)


def started(spec: OutputSpec, max_repairs: int = 1) -> Run:
    config = RunConfig(budget=Budget(max_repairs=max_repairs))
    run = Run.new("r", [Message("user", "go")], Toolbox([]), config, spec)
    assert isinstance(run.send(Begin(0.0)), CallModel)
    return run


def test_an_invalid_answer_goes_back_to_the_model_as_a_host_message() -> None:
    run = started(OutputSpec(Answer))
    command = run.send(ModelReplied(reply('{"n": "1"}'), 1.0))

    assert isinstance(command, CallModel)
    assert run.status is Status.AWAITING_MODEL
    assert run.state.failed_repairs == 1
    assert command.messages[-1].role == "user"
    assert "n: expected integer, got string" in (command.messages[-1].content or "")


def test_the_repair_budget_runs_out_with_no_output_and_the_state_survives_a_checkpoint() -> None:
    run = started(OutputSpec(Answer), max_repairs=1)
    run.send(ModelReplied(reply("{}"), 1.0))
    restored = Run(RunState.from_dict(run.state.to_dict()), Toolbox([]), OutputSpec(Answer))
    command = restored.send(ModelReplied(reply("[1]"), 2.0))

    assert command == Finish(Status.REPAIR_EXHAUSTED, None, command.reason)
    assert restored.state.output is None


def test_a_valid_answer_completes_with_its_text_and_resets_the_repairs() -> None:
    run = started(OutputSpec(Answer), max_repairs=3)
    run.send(ModelReplied(reply('{"n": 1.5}'), 1.0))
    command = run.send(ModelReplied(reply('{"n": 2}'), 2.0))

    assert command == Finish(Status.COMPLETED, '{"n": 2}', None)
    assert run.state.failed_repairs == 0


def test_without_an_output_type_any_text_is_the_answer() -> None:
    run = Run.new("r", [Message("user", "go")], Toolbox([]))
    run.send(Begin(0.0))
    assert run.send(ModelReplied(reply("not json"), 1.0)) == Finish(Status.COMPLETED, "not json", None)
