"""One Agent across event loops and concurrent runs, run_sync, ``async with``: real HTTP, real subprocesses."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether import Agent, OpenAIChatModel, Status, TetherError, load_toolset
from tether.testing import SCENARIOS, FakeServer

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = """
import asyncio
from tether import Agent, OpenAIChatModel, load_toolset
from tether.testing import SCENARIOS, FakeServer

with FakeServer(SCENARIOS["multiply"]) as server:
    agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), load_toolset("calc"))
    print(agent.run_sync("What is 248 times 15?").output)
    print(agent.run_sync("again").output)
    print(asyncio.run(agent.run("and with asyncio.run")).status)
    print(asyncio.run(agent.run("twice")).status)

    async def many() -> list[str]:
        results = await asyncio.gather(*(agent.run(f"run {i}") for i in range(20)))
        return sorted({r.status.value for r in results})

    print(asyncio.run(many()))
"""


def run_script(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    # -W default shows every ResourceWarning (an unclosed session), which a plain run would hide.
    return subprocess.run(
        [sys.executable, "-W", "default", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )


def test_a_script_uses_one_agent_from_several_event_loops_without_warnings(tmp_path: Path) -> None:
    done = run_script(SCRIPT, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "248 × 15 = 3720",
        "248 × 15 = 3720",
        "completed",
        "completed",
        "['completed']",
    ]
    assert "Unclosed" not in done.stderr
    assert "never retrieved" not in done.stderr
    assert done.stderr == ""


async def test_async_with_closes_the_client_of_the_loop() -> None:
    async with FakeServer(SCENARIOS["multiply"]) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, load_toolset("calc")) as agent:
            result = await agent.run("What is 248 times 15?")
            sessions = [session for session, _ in model._sessions.values()]
        assert result.status is Status.COMPLETED
        assert len(sessions) == 1 and sessions[0].closed
        assert model._sessions == {}


async def test_run_sync_inside_a_running_loop_names_the_fix() -> None:
    agent = Agent(OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k"))
    with pytest.raises(TetherError, match=r"await agent.run"):
        agent.run_sync("hi")


def test_run_sync_in_a_thread_of_its_own_while_another_loop_runs() -> None:
    """Two threads, two loops, one Agent: each gets its own client."""
    with FakeServer(SCENARIOS["multiply"]) as server:
        agent = Agent(OpenAIChatModel("m", base_url=server.base_url, api_key="k"), load_toolset("calc"))

        async def in_loop() -> Status:
            result = await asyncio.to_thread(agent.run_sync, "from a thread")
            other = await agent.run("from the loop")
            await agent.aclose()
            assert other.status is Status.COMPLETED
            return result.status

        assert asyncio.run(in_loop()) is Status.COMPLETED
