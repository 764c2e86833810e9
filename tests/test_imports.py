"""What the agent's import path loads: no run store, no sqlite3, no tracing SDK, no pydantic or jsonschema.

Each check starts a fresh interpreter, so nothing another test imported counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tether.testing import FakeServer
from tether.testing.fake_server import multiply

# Modules of tether an agent without sub-agent tools or sink-naming tools never needs (issue 19: import time).
LAZY = ("tether.core.provenance", "tether.drivers.local.subagents", "tether.models.fallback", "tether.models.scripted")
# Modules a run needs and building an agent does not: the state machine (most of the core's import cost), the
# messages and history, what a run reports, its tracing and the reading of a model's reply. The first run imports
# them (issue 19: `from tether import Agent, OpenAIChatModel, tool` against `import aiohttp`).
RUN_ONLY = (
    "tether.core.history",
    "tether.core.machine",
    "tether.core.messages",
    "tether.core.report",
    "tether.drivers.tracing",
    "tether.models.stream",
)
HEAVY = ("sqlite3", "_sqlite3", "pydantic", "pydantic_core", "jsonschema", "opentelemetry", "psycopg", "llama_cpp")
HEAVY += ("re2",)  # runs MCP servers' patterns (tether.tools.linear): loaded by an MCP toolset only


def loaded_after(code: str) -> list[str]:
    probe = (
        code
        + "\nimport json, sys\n"
        + f"heavy = {HEAVY!r}\n"
        + "print(json.dumps(sorted({m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('tether.store')"
        + f" or m.startswith('opentelemetry.sdk') or m in {LAZY + RUN_ONLY!r}}})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    found: list[str] = json.loads(done.stdout.splitlines()[-1])
    return found


def test_importing_what_an_agent_needs_loads_nothing_heavy() -> None:
    assert loaded_after("from tether import Agent, OpenAIChatModel, tool") == []


def test_an_in_memory_run_loads_no_store_and_no_tracing_sdk() -> None:
    code = """
import asyncio
from tether import Agent, ScriptedModel, tool_from_schema
from tether.models.scripted import reply_calls, reply_text

schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"], "additionalProperties": False}
multiply = tool_from_schema("multiply", schema, lambda a, b: a * b, read_only=True, inline=True)
model = ScriptedModel([reply_calls(("c1", "multiply", '{"a": 248, "b": 15}')), reply_text("3720")])
assert asyncio.run(Agent(model, [multiply]).run("248 * 15?")).output == "3720"
"""
    found = loaded_after(code)
    assert [m for m in found if m.startswith(("tether.store", "sqlite3", "_sqlite3", "opentelemetry.sdk"))] == []
    # no sub-agent tool, no sinks, no fallback chain: none of theirs is loaded (the ScriptedModel's own is)
    assert [m for m in found if m in LAZY] == ["tether.models.scripted"]
    # the probe sees them once a run needs them (a scripted model reads no HTTP reply: no stream)
    assert [m for m in found if m in RUN_ONLY] == sorted(set(RUN_ONLY) - {"tether.models.stream"})
    assert "pydantic" not in found  # a raw-schema tool with a JSON-native result needs no pydantic


def test_building_an_agent_and_its_tools_loads_nothing_only_a_run_needs() -> None:
    code = """
from tether import Agent, OpenAIChatModel, tool

@tool
def add(a: int, b: int) -> int:
    '''Add two numbers.'''
    return a + b

Agent(OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="k"), [add], instructions="Add.")
"""
    assert [m for m in loaded_after(code) if m in RUN_ONLY] == []


def test_the_http_client_is_imported_by_the_first_request_not_with_the_model() -> None:
    # aiohttp costs more to import than the rest of the agent's path: a process that builds an agent, or a CLI
    # command that sends no request, does without it; the first request imports it (off the event loop).
    with FakeServer(multiply) as server:
        before, output, after = _first_request(server.base_url)
    assert (before, after) == ("False", "True")
    assert "3720" in output


def _first_request(base_url: str) -> list[str]:
    code = f"""
import asyncio, sys
from tether import Agent, OpenAIChatModel, tool

@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    '''Multiply two integers.'''
    return a * b

agent = Agent(OpenAIChatModel("fake", base_url={base_url!r}, api_key="k"), [multiply])
print("aiohttp" in sys.modules)
print(asyncio.run(agent.run("What is 248 times 15?")).output)
print("aiohttp" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.splitlines()[-3:]


def test_first_requests_made_at_once_share_one_client_and_each_is_sent_once() -> None:
    # The first requests wait for the import together: none may make a second client, whose guard would close the
    # first one's connection under a request in flight (a retry: one request sent twice).
    with FakeServer(multiply) as server:
        code = f"""
import asyncio, warnings
from tether import OpenAIChatModel
from tether.core.messages import Message
from tether.models.base import ModelRequest

async def main():
    model = OpenAIChatModel("fake", base_url={server.base_url!r}, api_key="k", max_retries=0)
    request = ModelRequest([Message("user", "What is 248 times 15?")])
    replies = await asyncio.gather(*(model.complete(request) for _ in range(4)))
    print(len(model._sessions), [r.finish_reason for r in replies])
    await model.aclose()

warnings.simplefilter("error")
asyncio.run(main())
"""
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
        sent = len(server.requests)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0].startswith("1 ") and sent == 4, (done.stdout, sent)
