"""``tether self-check``: the gates, proven offline over real HTTP.

Each scenario scripts tether's own fake OpenAI-compatible server, runs a
real agent against it through the HTTP adapter and checks what the host did:
which calls ran, with which outcome, and how the run ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.core.budget import Budget
from tether.core.machine import Status
from tether.core.report import RunResult
from tether.drivers.local.runner import Agent
from tether.models.openai_chat import OpenAIChatModel
from tether.testing.fake_server import SCENARIOS, FakeServer, ReplySpec, text, tool_calls
from tether.tools import Tool, tool
from tether.toolsets import load_toolset


@dataclass(frozen=True)
class Scenario:
    name: str
    script: list[ReplySpec] | Any
    status: Status
    outcomes: list[tuple[str, bool]]  # (outcome code, executed) of every call, in order
    budget: Budget = field(default_factory=Budget)
    extra: Callable[[RunResult], str | None] | None = None


def _overlap_probe() -> tuple[list[Tool], Callable[[RunResult], str | None]]:
    spans: list[tuple[float, float]] = []

    @tool(read_only=True)
    async def probe(name: str) -> str:
        """Wait a little and report."""
        start = time.perf_counter()
        await asyncio.sleep(0.2)
        spans.append((start, time.perf_counter()))
        return name

    def overlapped(result: RunResult) -> str | None:
        if len(spans) != 2:
            return f"expected 2 probe runs, saw {len(spans)}"
        (_, first_end), (second_start, _) = sorted(spans)
        return None if second_start < first_end else "read-only calls did not overlap in time"

    return [probe], overlapped


def scenarios() -> list[tuple[Scenario, list[Tool]]]:
    calc = load_toolset("calc")
    probe_tools, overlapped = _overlap_probe()
    call = [("c1", "multiply", '{"a": 248, "b": 15}')]
    return [
        (Scenario("multiply", SCENARIOS["multiply"], Status.COMPLETED, [("ok", True)]), calc),
        (
            Scenario(
                "bad JSON",
                [tool_calls([("c1", "multiply", '{"a": 248, "b":')]), text("sorry")],
                Status.COMPLETED,
                [("invalid_json", False)],
            ),
            calc,
        ),
        (
            Scenario(
                "bool argument",
                [tool_calls([("c1", "multiply", '{"a": true, "b": 15}')]), text("sorry")],
                Status.COMPLETED,
                [("invalid_arguments", False)],
            ),
            calc,
        ),
        (
            Scenario(
                "unknown tool",
                [tool_calls([("c1", "rm_rf", "{}")]), text("sorry")],
                Status.COMPLETED,
                [("unknown_tool", False)],
            ),
            calc,
        ),
        (
            Scenario("length", [tool_calls(call, finish_reason="length")], Status.TRUNCATED, []),
            calc,
        ),
        (
            Scenario(
                "max steps",
                [tool_calls(call), tool_calls([("c2", "multiply", '{"a": 1, "b": 2}')])],
                Status.MAX_STEPS,
                [("ok", True), ("budget_exhausted", False)],
                budget=Budget(max_steps=2),
            ),
            calc,
        ),
        (
            Scenario(
                "parallel read-only calls",
                [
                    tool_calls([("c1", "probe", '{"name": "a"}'), ("c2", "probe", '{"name": "b"}')]),
                    text("both"),
                ],
                Status.COMPLETED,
                [("ok", True), ("ok", True)],
                extra=overlapped,
            ),
            probe_tools,
        ),
    ]


async def _check(scenario: Scenario, tools: list[Tool]) -> str | None:
    """Why the scenario failed, or None."""
    with FakeServer(scenario.script) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="self-check", max_retries=0)
        agent = Agent(model, tools, budget=scenario.budget)
        try:
            result = await agent.run("self-check")
        finally:
            await agent.aclose()
    if result.status is not scenario.status:
        return f"status {result.status.value} ({result.reason}), expected {scenario.status.value}"
    seen = [(c.outcome, c.executed) for step in result.steps for c in step.calls]
    if seen != scenario.outcomes:
        return f"calls {seen}, expected {scenario.outcomes}"
    return scenario.extra(result) if scenario.extra else None


async def run_self_check(echo: Callable[[str], Any]) -> bool:
    passed = True
    for scenario, tools in scenarios():
        problem = await _check(scenario, tools)
        echo(f"{'ok  ' if problem is None else 'FAIL'} {scenario.name}" + (f": {problem}" if problem else ""))
        passed = passed and problem is None
    return passed
