"""``tether serve agent.py:agent --auth keys --mcp --workers 2`` on PostgreSQL: MCP without sticky routing.

Two uvicorn processes take connections from one port, and nothing sends a
client back to the process it reached first. Each request here is a
connection of its own (``Connection: close``), so one client's initialize,
tool listing and calls land on both processes; every one must succeed. The
agent's one tool answers with the pid of the process driving the run, which
shows that both processes answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from serve_harness import free_port, wait_listening
from test_serve_cli import SRC, tether

from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from postgres_server import PostgresServer, running

AGENT_PY = '''
import os
from tether import Agent, OpenAIChatModel, tool

@tool(read_only=True)
def whoami() -> int:
    """The pid of the process driving this run."""
    return os.getpid()

agent = Agent(OpenAIChatModel("fake-model"), [whoami], system="Say who you are.")
'''
SESSIONS_AT_ONCE = 6
ROUNDS = 8  # at most; the test stops once both processes have answered


def who_answers(request: dict[str, Any]) -> ReplySpec:
    last = request["messages"][-1]
    if last["role"] == "user":
        return tool_calls([("call_whoami", "whoami", "{}")])
    return text(str(json.loads(last["content"])["result"]))  # the tool's result, as tether gives it the model


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    yield from running()


async def answering_pids(base: str, key: str) -> list[int]:
    """One client: initialize, list the tools, call the agent twice; each request on a connection of its own."""
    headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
    pids = []
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        [tool] = (await session.list_tools()).tools
        assert tool.name == "agent"
        for _ in range(2):
            answer = await session.call_tool("agent", {"prompt": "who are you?"})
            assert not answer.is_error, answer
            assert answer.structured_content is not None and answer.structured_content["status"] == "completed"
            pids.append(int(answer.structured_content["output"]))
    return pids


async def test_mcp_clients_are_answered_by_any_worker_without_sticky_routing(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(AGENT_PY)
    db = postgres_server.schema_url()
    log = tmp_path / "serve.log"
    with FakeServer(who_answers) as model:
        env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-x"}
        env["TETHER_LOG_LEVEL"] = "info"  # uvicorn names each worker's pid as it starts
        made = tether("keys", "create", "--principal", "alice", "--db", db, "--json", env=env)
        assert made.returncode == 0, made.stderr
        key = json.loads(made.stdout)["key"]
        port = free_port()
        command = ["serve", f"{agent_py}:agent", "--auth", "keys", "--mcp", "--db", db, "--port", str(port)]
        with log.open("wb") as written:
            process = subprocess.Popen(
                [sys.executable, "-m", "tether", *command, "--workers", "2"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=written,
            )
        try:
            assert wait_listening(process, port), log.read_text()
            base = f"http://127.0.0.1:{port}"
            workers: set[int] = set()
            for _ in range(100):  # both workers report before the test counts on them
                workers = {int(pid) for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text())}
                if len(workers) == 2:
                    break
                await asyncio.sleep(0.1)
            assert len(workers) == 2, log.read_text()

            answered: set[int] = set()
            for _ in range(ROUNDS):
                rounds = await asyncio.gather(*(answering_pids(base, key) for _ in range(SESSIONS_AT_ONCE)))
                answered |= {pid for pids in rounds for pid in pids}
                if answered == workers:
                    break
            assert answered == workers, (answered, workers)

            async with httpx.AsyncClient() as http:
                refused = await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
                assert refused.status_code == 401, refused.text  # every request passes the authenticator
                stream = await http.get(
                    f"{base}/mcp", headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
                )
                assert stream.status_code == 405, stream.text  # no session, so no stream of one to hold open
        finally:
            process.terminate()
            process.wait(timeout=30)
