"""The in-memory hot path stays lean: calls per run with every gate on, and the shortcuts keep the gates' meaning.

Counted, not timed: cProfile counts every function call (Python and
builtin) of a run driven by a ``ScriptedModel`` (no wire), which is the same
number on every machine for the same code. The bound is what the run cost
after issue 19's work, with a little room; a change that adds work to every
run shows here first (``bench/calls.py`` lists where the calls go).
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import logging
import pstats

from tether import Agent, ScriptedModel, tool
from tether.core import PendingCall
from tether.models.scripted import reply_calls, reply_text
from tether.tools import Toolbox

RUNS = 20


async def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def calls_per_run(agent: Agent, runs: int = RUNS) -> tuple[float, float]:
    """All calls per run, and those of tether's own functions, over ``runs`` runs after a warm-up."""

    async def drive() -> pstats.Stats:
        for _ in range(3):
            assert (await agent.run("What is 248 times 15?")).output == "3720"
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(runs):
            await agent.run("What is 248 times 15?")
        profile.disable()
        return pstats.Stats(profile)

    logger = logging.getLogger("tether")
    level = logger.level
    logger.setLevel(logging.WARNING)  # as by default: a test before this one may have turned the run log on
    try:
        raw = asyncio.run(drive()).stats  # type: ignore[attr-defined]
    finally:
        logger.setLevel(level)
    total = sum(entry[1] for entry in raw.values())
    own = sum(entry[1] for key, entry in raw.items() if "/tether/" in key[0])
    return total / runs, own / runs


def scripted(runs: int) -> ScriptedModel:
    replies = []
    for _ in range(runs):
        replies += [reply_calls(("c1", "multiply", '{"a": 248, "b": 15}')), reply_text("3720")]
    return ScriptedModel(replies)


def test_an_in_memory_run_with_every_gate_on_stays_within_its_calls() -> None:
    agent = Agent(scripted(RUNS + 3), [tool(read_only=True)(multiply)])
    total, own = calls_per_run(agent)
    print(f"calls per run: {total:.1f}, in tether's code: {own:.1f}")
    assert total <= 265  # 333 before issue 19's hot-path work, 256 after (275 had crept in, then won back)
    assert own <= 128  # 149 before, 134 after, 120 since the driver's state is an attribute


async def test_an_async_tool_that_waits_is_still_held_to_its_timeout() -> None:
    seen: list[str] = []

    @tool(read_only=True, timeout=0.05)
    async def slow(n: int) -> int:
        """Waits far longer than its timeout after some work of its own."""
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return n

    content = await Toolbox([slow]).invoke(PendingCall("c1", "slow", {"n": 1}, "fp", execute=True), "run")
    assert json.loads(content)["error"]["code"] == "timeout"
    assert seen == ["started", "cancelled"]  # the cancellation reached the tool's own await


async def test_an_async_tool_that_waits_briefly_returns_its_result() -> None:
    @tool(read_only=True)
    async def twice(n: int) -> int:
        """Yields to the loop a few times, then answers."""
        for _ in range(3):
            await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        return 2 * n

    content = await Toolbox([twice]).invoke(PendingCall("c1", "twice", {"n": 21}, "fp", execute=True), "run")
    assert json.loads(content) == {"ok": True, "result": 42}


def test_plain_arguments_pass_unchanged_and_others_go_through_pydantic() -> None:
    @tool
    def plain(a: int, b: str, c: bool = False) -> str:
        """Plain fields."""
        return f"{a}{b}{c}"

    @tool
    def typed(x: float, when: int = 3) -> float:
        """A float field: pydantic makes 2 into 2.0."""
        return x

    assert plain.plain_fields == {"a": int, "b": str, "c": bool}
    assert plain.bind({"a": 1, "b": "x", "c": True}, None) == {"a": 1, "b": "x", "c": True}  # type: ignore[arg-type]
    assert plain.bind({"a": 1, "b": "x"}, None) == {"a": 1, "b": "x", "c": False}  # type: ignore[arg-type]
    assert typed.plain_fields is None
    bound = typed.bind({"x": 2}, None)  # type: ignore[arg-type]
    assert bound == {"x": 2.0, "when": 3} and type(bound["x"]) is float
