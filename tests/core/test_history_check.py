"""A message history from outside is checked before any request: each malformed shape, named by its first bad one."""

from __future__ import annotations

from typing import Any

import pytest

from tether.core.errors import ConfigurationError
from tether.core.history import MessageHistory, check_history, given_history, untrusted_results
from tether.core.messages import Message, ToolCall

CALL = ToolCall("c1", "add", '{"a": 1, "b": 2}')
CALL2 = ToolCall("c2", "add", '{"a": 3, "b": 4}')
GOOD = [
    Message("system", "be brief"),
    Message("user", "1+2 and 3+4?"),
    Message("assistant", None, (CALL, CALL2)),
    Message("tool", '{"ok": true, "result": 3}', tool_call_id="c1"),
    Message("tool", '{"ok": true, "result": 7}', tool_call_id="c2"),
    Message("assistant", "3 and 7"),
]
PROMPT = [Message("user", "and 5+6?")]


def test_a_well_formed_history_and_prompt_pass() -> None:
    check_history([*GOOD, *PROMPT], len(GOOD))
    assert given_history(GOOD, PROMPT) == GOOD


def test_histories_tether_itself_writes_pass() -> None:
    """A repair's correction (two user messages in a row), a run ended after its tool results, an empty answer."""
    check_history([Message("user", "x"), Message("assistant", "bad"), Message("user", "fix it"), *PROMPT], 3)
    check_history([Message("user", "x"), Message("assistant", None, (CALL,)), GOOD[3], *PROMPT], 4)
    check_history([Message("user", "x"), Message("assistant", None), *PROMPT], 2)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        (
            [Message("user", "x"), Message("assistant", None, (CALL, CALL2)), GOOD[3]],
            r"message_history\[1\].*c2.*no tool",
        ),
        ([Message("user", "x"), Message("assistant", None, (CALL,))], r"message_history\[1\].*'c1'.*no tool"),
        (
            [Message("user", "x"), Message("assistant", None, (CALL, CALL2)), GOOD[3], Message("user", "?"), GOOD[4]],
            r"message_history\[1\] \(assistant\) calls add \(id 'c2'\), and no tool message answers it before "
            r"message_history\[3\]",
        ),
        ([Message("user", "x"), GOOD[3]], r"message_history\[1\] \(tool\) answers the call 'c1', which the assistant"),
        (
            [Message("user", "x"), Message("assistant", None, (CALL,)), GOOD[3], GOOD[3]],
            r"message_history\[3\] \(tool\) answers the call 'c1' a second time",
        ),
        (
            [Message("user", "x"), Message("assistant", "a"), Message("assistant", "b")],
            r"message_history\[2\] \(assistant\) follows an assistant answer",
        ),
        ([Message("user", "x"), Message("system", "late")], r"message_history\[1\] \(system\) comes after"),
        ([Message("robot", "x")], r"message_history\[0\] has the role 'robot'"),  # type: ignore[arg-type]
        ([Message("user", None)], r"message_history\[0\] \(user\) has no content"),
        ([Message("user", 42)], r"message_history\[0\] \(user\) has content of type int"),  # type: ignore[arg-type]
        ([Message("tool", "r")], r"message_history\[0\] \(tool\) has no tool_call_id"),
        ([Message("user", "x", tool_call_id="c1")], r"message_history\[0\] \(user\) has a tool_call_id"),
        ([Message("user", "x", (CALL,))], r"message_history\[0\] \(user\) carries tool calls"),
        (
            [Message("user", "x"), Message("assistant", None, (CALL, CALL))],
            r"message_history\[1\] \(assistant\) has two tool calls with the id 'c1'",
        ),
        ([Message("assistant", None, (ToolCall("", "add", "{}"),))], r"message_history\[0\].*without an id"),
        ([Message("assistant", None, (ToolCall("c", "", "{}"),))], r"message_history\[0\].*without a name"),
        ([Message("assistant", None, (ToolCall("c", "add", {}),))], r"not a JSON string"),  # type: ignore[arg-type]
        ([{"role": "user", "content": "x"}], r"message_history\[0\] is a dict, not a Message.*messages_adapter"),
        ([Message("assistant", None, ({"id": "c"},))], r"has a tool call of type dict"),  # type: ignore[arg-type]
        ([Message("user", "x"), Message("system", "late"), GOOD[3]], r"message_history\[1\] \(system\) comes after"),
    ],
)
def test_each_malformed_history_is_refused_naming_its_first_bad_message(history: list[Any], expected: str) -> None:
    with pytest.raises(ConfigurationError, match=expected):
        given_history(history, PROMPT)


def test_a_bad_prompt_message_after_a_good_history_is_named_as_the_prompts() -> None:
    with pytest.raises(ConfigurationError, match=r"the prompt's message 1 \(tool\) answers the call 'zz'"):
        given_history(GOOD, [Message("user", "x"), Message("tool", "r", tool_call_id="zz")])


@pytest.mark.parametrize("history", ["hello", b"bytes", 42, None])
def test_a_history_that_is_not_a_list_is_refused(history: Any) -> None:
    with pytest.raises(ConfigurationError, match="message_history must be a list of Message"):
        given_history(history, PROMPT)


def test_a_message_history_keeps_only_the_marks_of_results_it_holds() -> None:
    history = MessageHistory(GOOD, {"c1": "fetch_page", "gone": "fetch_page"})
    assert history == GOOD and isinstance(history, list)
    assert history.untrusted == {"c1": "fetch_page"}
    assert untrusted_results(history) == {"c1": "fetch_page"}


def test_a_history_without_marks_counts_every_tool_result_as_untrusted() -> None:
    """Who wrote a plain list's tool results cannot be told: each of them taints."""
    assert untrusted_results(list(GOOD)) == {"c1": "add", "c2": "add"}
    assert untrusted_results(MessageHistory(GOOD)) == {}
