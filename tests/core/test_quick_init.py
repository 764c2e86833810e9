"""``quick_init``: the records a run makes many of get a faster ``__init__`` that behaves as the dataclass's own."""

from __future__ import annotations

import copy
import inspect
import pickle
from dataclasses import FrozenInstanceError, dataclass, field, replace

import pytest

from tether.core import machine, messages
from tether.core.quick import quick_init
from tether.models.base import ModelRequest
from tether.tools.context import ToolContext
from tether.tools.toolbox import ToolResult

QUICK = [
    messages.ToolCall,
    messages.Message,
    messages.Usage,
    messages.WireToolCall,
    messages.ModelReply,
    machine.Begin,
    machine.ModelReplied,
    machine.ToolsFinished,
    machine.Accepted,
    machine.PendingCall,
    machine.CallModel,
    machine.RunTools,
    machine.Finish,
    ModelRequest,
    ToolResult,
    ToolContext,
]


@quick_init
@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Plain:  # the same fields, with the dataclass's own __init__
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_records_a_run_makes_take_the_same_parameters_as_their_dataclass(cls: type) -> None:
    assert cls.__init__.__module__ == cls.__module__  # rewritten (a class it cannot rewrite keeps the dataclass's)
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
    parameters = inspect.signature(cls).parameters
    expected = [f.name for f in cls.__dataclass_fields__.values()]
    assert list(parameters) == expected


def test_a_quick_init_behaves_as_the_dataclass_init() -> None:
    assert inspect.signature(Sample).parameters.keys() == inspect.signature(Plain).parameters.keys()
    for args, kwargs in [(("a",), {}), (("a", 2), {}), (("a",), {"tags": ["x"]}), ((), {"name": "a", "count": 3})]:
        quick, plain = Sample(*args, **kwargs), Plain(*args, **kwargs)
        assert (quick.name, quick.count, quick.tags) == (plain.name, plain.count, plain.tags)
    assert Sample("a").tags is not Sample("a").tags  # a fresh default from the factory each time
    assert Sample("a", 1) == Sample("a", 1) != Sample("a", 2)
    assert hash(messages.Usage(1, 2)) == hash(messages.Usage(1, 2))
    for bad in [(), ("a", 1, [], 4)]:
        with pytest.raises(TypeError):
            Sample(*bad)
    with pytest.raises(TypeError):
        Sample("a", colour="red")  # type: ignore[call-arg]


def test_a_quick_record_is_still_frozen_and_copies_as_before() -> None:
    usage = messages.Usage(3, 4)
    with pytest.raises(FrozenInstanceError):
        usage.input_tokens = 5  # type: ignore[misc]
    assert replace(usage, output_tokens=9) == messages.Usage(3, 9)
    assert pickle.loads(pickle.dumps(usage)) == usage
    assert copy.deepcopy(usage) == usage
    call = messages.ToolCall("c1", "multiply", '{"a": 1}')
    message = messages.Message("assistant", None, (call,))
    assert messages.Message.from_dict(message.to_dict()) == message
    assert messages.ModelReply(1, "stop").usage == messages.Usage()


def test_a_class_quick_init_cannot_rewrite_faithfully_keeps_its_own_init() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    own = Checked.__init__
    assert quick_init(Checked).__init__ is own
    with pytest.raises(ValueError):
        Checked(-1)

    @dataclass(frozen=True)
    class NoSlots:
        value: int

    assert quick_init(NoSlots).__init__ is NoSlots.__dict__["__init__"]
