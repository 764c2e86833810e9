"""What is not text never reaches the store: a lone UTF-16 surrogate, NaN; and a failed checkpoint loses nothing.

A lone surrogate (``"\\ud800"`` in JSON) decodes to a Python string that no
UTF-8 store, hash or terminal takes: written from a model's reply it
crashed the run mid-checkpoint, leaving a gap in its audit log. From a model
it is the model's error (its reply, or its arguments: ``invalid_json``);
from a tool (a file name read with ``surrogateescape``) each lone one is
made U+FFFD. NaN and Infinity are no JSON: a tool returning one failed.
Real HTTP to the FakeServer, a real SQLite file, its audit check.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from tether import Agent, OpenAIChatModel, SQLiteStore, Status, tool
from tether.core.errors import StoreError
from tether.store import SQLStore
from tether.store.dialects.sqlite import SQLiteDialect
from tether.testing import FakeServer, raw
from tether.testing.fake_server import text, tool_calls

done: list[str] = []


@tool
def note(text: str) -> str:
    """Write a note (a side effect)."""
    done.append(text)
    return "noted"


@tool(read_only=True)
def listing() -> str:
    """A directory's names: one was not UTF-8, read with surrogateescape."""
    return "report-\udcff.txt"


@tool(read_only=True)
def ratio() -> dict[str, float]:
    """A division by zero, in floats."""
    return {"ratio": math.nan, "most": math.inf}


async def drive(tmp_path: Path, script: list[Any], store: SQLStore | None = None) -> tuple[Any, SQLStore]:
    done.clear()
    store = store or SQLiteStore(tmp_path / "runs.db")
    with FakeServer(script) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", max_retries=0)
        agent = Agent(model, [note, listing, ratio], store=store)
        try:
            result = await agent.run("go")
        finally:
            await agent.aclose()
    return result, store


def tool_results(result: Any) -> list[str]:
    return [m.content for m in result.state.messages if m.role == "tool"]


async def test_a_reply_holding_a_lone_surrogate_is_the_models_error(tmp_path: Path) -> None:
    body = (
        '{"choices": [{"message": {"role": "assistant", "content": "half \\ud800 a pair"}, "finish_reason": "stop"}]}'
    )
    result, store = await drive(tmp_path, [raw(body)])
    assert result.status is Status.MODEL_ERROR and "lone UTF-16 surrogate" in (result.reason or "")
    assert store.verify(result.run_id) == []


async def test_arguments_holding_a_lone_surrogate_are_invalid_json_and_nothing_runs(tmp_path: Path) -> None:
    script = [tool_calls([("c1", "note", '{"text": "half \\udc80"}')]), text("I could not.")]
    result, store = await drive(tmp_path, script)
    assert result.status is Status.COMPLETED and done == []
    [refused] = tool_results(result)
    assert '"invalid_json"' in refused and "lone UTF-16 surrogate" in refused
    assert store.verify(result.run_id) == []


async def test_a_pair_of_surrogates_is_one_character(tmp_path: Path) -> None:
    script = [tool_calls([("c1", "note", '{"text": "smile \\ud83d\\ude00"}')]), text("Noted.")]
    result, store = await drive(tmp_path, script)
    assert result.status is Status.COMPLETED and done == ["smile \U0001f600"]
    assert store.verify(result.run_id) == []


async def test_a_tools_lone_surrogate_is_made_a_replacement_character(tmp_path: Path) -> None:
    result, store = await drive(tmp_path, [tool_calls([("c1", "listing", "{}")]), text("One file.")])
    assert result.status is Status.COMPLETED
    assert tool_results(result) == ['{"ok": true, "result": "report-\ufffd.txt"}']
    assert store.verify(result.run_id) == []


async def test_a_tool_returning_nan_failed(tmp_path: Path) -> None:
    result, store = await drive(tmp_path, [tool_calls([("c1", "ratio", "{}")]), text("It failed.")])
    [failed] = tool_results(result)
    assert '"tool_failed"' in failed and "not JSON" in failed
    assert store.verify(result.run_id) == []


class Failing(SQLStore):
    """A store whose disk refuses one checkpoint (the one holding the call's intent), then recovers."""

    refused = False

    def checkpoint(self, state: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("intents") and not self.refused:
            self.refused = True
            raise StoreError("disk full")
        super().checkpoint(state, *args, **kwargs)


async def test_a_checkpoint_that_fails_leaves_its_events_for_the_next_one(tmp_path: Path) -> None:
    """The run stops at the failure; what it saves as it stops has every event before it: no gap in the log."""
    store = Failing(SQLiteDialect(tmp_path / "runs.db"))
    script = [tool_calls([("c1", "note", '{"text": "hi"}')]), text("Noted.")]
    with contextlib.suppress(StoreError):
        await drive(tmp_path, script, store)
    [summary] = store.list_runs()
    kinds = [e.kind for e in store.events(summary.run_id)]
    assert done == []  # the intent was never on disk: the effect never happened
    assert kinds[:4] == ["run_started", "step_started", "model_replied", "call_validated"], kinds
    assert store.verify(summary.run_id) == []


async def test_a_prompt_or_turn_that_is_not_text_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    """The store could not write it: the run failed as a bare UnicodeEncodeError at its first checkpoint."""
    import pytest

    from tether.core.errors import ConfigurationError

    store = SQLiteStore(tmp_path / "runs.db")
    with FakeServer([text("fine")]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), [note], store=store)
        with pytest.raises(ConfigurationError, match="lone surrogate"):
            await agent.run("hello \ud800")
        conversation = agent.conversation()
        with pytest.raises(ConfigurationError, match="lone surrogate"):
            await conversation.send("hi \udc80")
        assert store.list_runs() == [] and server.requests == []
        answered = await conversation.send("hi")  # the conversation goes on, its refused turn not in it
    assert answered.status is Status.COMPLETED and [r.turn for r in store.list_runs()] == [1]
