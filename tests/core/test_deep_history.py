"""A stored run whose history holds JSON nested deeper than Python can decode: the machine reads it, never crashes.

Checkpoints written before tether bounded nesting may hold such text (a
tool's result in a tool message); the machine decodes it within
``MAX_REPLY_DEPTH`` and treats deeper text as not decodable.
"""

from __future__ import annotations

from tether.core import CallModel, Compat, Message, Run, RunConfig, RunState, Status, ToolCall
from tether.tools import Toolbox


def test_a_deep_tool_result_in_a_stored_history_is_read_as_not_a_success() -> None:
    deep = '{"ok": true, "result": ' + "[" * 5_000 + "]" * 5_000 + "}"
    messages = [
        Message("user", "hi"),
        Message("assistant", None, (ToolCall("c1", "lookup", "{}"),)),
        Message("tool", deep, tool_call_id="c1"),
    ]
    config = RunConfig(compat=Compat(answer_after_success=True))
    state = RunState("r", config, messages, status=Status.AWAITING_MODEL, steps=1)

    command = Run(state, Toolbox([])).pending_command()

    assert isinstance(command, CallModel)
    assert command.tool_choice is None  # "none" only after a step whose results read as successes
