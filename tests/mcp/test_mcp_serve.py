"""``tether mcp serve`` as MCP clients see it: the SDK's own client over stdio, a real server process.

The server acts for one principal: tools it may not use are neither listed
nor callable. A tool that needs approval is offered only to a client that can
be asked (MCP elicitation), whose user then approves or declines each such
call with its exact arguments; a question nobody answers in time denies the
call. A tether result reaches a client once, never as ``{"result": {"result":
...}}``.
"""

from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import ClientRequestContext
from mcp_helpers import never_answering

from tether import Agent, OpenAIChatModel
from tether.core.errors import ConfigurationError
from tether.core.nesting import MAX_DEPTH
from tether.mcp import MCPToolset
from tether.mcp.lines import MAX_MESSAGE_CONTAINERS, MAX_MESSAGE_DEPTH
from tether.mcp.server import MAX_MESSAGE_BYTES
from tether.testing.fake_server import FakeServer, text, tool_calls

TOOLS = '''
import json
import os

from tether import ToolContext, tool


def _log(name, arguments):
    with open(os.environ["SERVE_TEST_LOG"], "a") as handle:
        handle.write(json.dumps({"tool": name, "arguments": arguments}) + "\\n")


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(read_only=True)
def record() -> dict:
    """An object that happens to have one field named result."""
    return {"result": 7}


@tool(scopes={"admin"})
def reset(confirm: bool, context: ToolContext) -> str:
    """Reset everything (admins only)."""
    _log("reset", {"confirm": confirm})
    return f"reset by {context.principal.id}"


@tool(approval=True)
def transfer(amount: int, to: str) -> dict:
    """Move money."""
    _log("transfer", {"amount": amount, "to": to})
    return {"moved": amount, "to": to}


@tool(approval=lambda arguments: arguments["amount"] > 100)
def pay(amount: int) -> str:
    """Pay; large amounts need approval."""
    _log("pay", {"amount": amount})
    return f"paid {amount}"
'''

Elicit = Any  # an elicitation callback of the SDK's ClientSession


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "serve_tools.py"
    path.write_text(TOOLS)
    return path


def effects(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "effects.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@asynccontextmanager
async def session(
    tools_file: Path, *options: str, elicit: Elicit | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "SERVE_TEST_LOG": str(tools_file.with_name("effects.jsonl")),
        **(env or {}),
    }
    argv = ["-m", "tether", "mcp", "serve", "--tools", str(tools_file), *options]
    parameters = StdioServerParameters(command=sys.executable, args=argv, env=env)
    async with stdio_client(parameters) as (read, write), ClientSession(read, write, elicitation_callback=elicit) as s:
        await s.initialize()
        yield s


async def listed(s: ClientSession) -> list[str]:
    return sorted(t.name for t in (await s.list_tools()).tools)


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    block = result.content[0]
    assert block.type == "text"
    return block.text


async def test_by_default_only_tools_needing_no_scope_and_no_approval_are_offered(
    tools_file: Path, tmp_path: Path
) -> None:
    async with session(tools_file) as s:
        assert await listed(s) == ["add", "record"]
        for name, arguments in (("reset", {"confirm": True}), ("transfer", {"amount": 5, "to": "bob"})):
            refused = error_text(await s.call_tool(name, arguments))
            assert refused == f"unknown_tool: no tool named {name!r}; available: add, record"
        assert (await s.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    assert effects(tmp_path) == []


async def test_the_principal_and_its_scopes_decide_what_is_offered(tools_file: Path, tmp_path: Path) -> None:
    async with session(tools_file, "--principal", "alice", "--scope", "admin") as s:
        assert await listed(s) == ["add", "record", "reset"]
        done = await s.call_tool("reset", {"confirm": True})
        assert not done.is_error and done.structured_content == {"result": "reset by alice"}
    async with session(tools_file, "--principal", "bob", "--scope", "support") as s:
        assert await listed(s) == ["add", "record"]
    assert effects(tmp_path) == [{"tool": "reset", "arguments": {"confirm": True}}]


def answering(action: str, approve: bool | None = None) -> tuple[Elicit, list[types.ElicitRequestParams]]:
    """An elicitation callback that answers every question with ``action``, and the questions it was asked."""
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        content = {"approve": approve} if approve is not None else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return elicit, asked


async def test_a_client_that_can_be_asked_approves_each_call_with_its_exact_arguments(
    tools_file: Path, tmp_path: Path
) -> None:
    elicit, asked = answering("accept", approve=True)
    async with session(tools_file, elicit=elicit) as s:
        assert await listed(s) == ["add", "pay", "record", "transfer"]
        done = await s.call_tool("transfer", {"amount": 250, "to": "carol"})
        assert not done.is_error, done
        assert done.structured_content == {"moved": 250, "to": "carol"}
        small = await s.call_tool("pay", {"amount": 5})  # the predicate says no approval: nobody is asked
        assert small.structured_content == {"result": "paid 5"}
        bad = await s.call_tool("transfer", {"amount": "250", "to": "carol"})  # refused before anyone is asked
        assert error_text(bad).startswith("invalid_arguments: amount: expected integer")
    assert len(asked) == 1
    question = asked[0]
    assert isinstance(question, types.ElicitRequestFormParams)
    assert question.message.startswith('Approve transfer with exactly these arguments? {"amount": 250, "to": "carol"}')
    assert question.requested_schema["required"] == ["approve"]
    assert effects(tmp_path) == [
        {"tool": "transfer", "arguments": {"amount": 250, "to": "carol"}},
        {"tool": "pay", "arguments": {"amount": 5}},
    ]


@pytest.mark.parametrize(
    ("action", "approve", "said"),
    [
        ("decline", None, "the user declined it"),
        ("accept", False, "the user declined it"),
        ("cancel", None, "the user cancelled the question"),
    ],
)
async def test_a_declined_call_is_denied_and_never_runs(
    tools_file: Path, tmp_path: Path, action: str, approve: bool | None, said: str
) -> None:
    elicit, asked = answering(action, approve)
    async with session(tools_file, elicit=elicit) as s:
        for name, arguments in (("transfer", {"amount": 1, "to": "dave"}), ("pay", {"amount": 500})):
            refused = error_text(await s.call_tool(name, arguments))
            assert refused == f"denied: {name} needs approval and {said}"
    assert len(asked) == 2
    assert effects(tmp_path) == []


async def test_a_question_nobody_answers_denies_the_call_when_its_time_is_up(tools_file: Path, tmp_path: Path) -> None:
    """A client that can be asked and never answers: the call is denied after TETHER_ELICITATION_SECONDS (it
    waited forever), the client is told the question is cancelled, and the session goes on."""
    elicit, asked, taken_back = never_answering()
    with anyio.fail_after(20):
        async with session(tools_file, elicit=elicit, env={"TETHER_ELICITATION_SECONDS": "0.5"}) as s:
            refused = error_text(await s.call_tool("transfer", {"amount": 9, "to": "erin"}))
            assert refused == "denied: transfer needs approval and the user did not answer within 0.5 seconds"
            await taken_back.wait()
            assert (await s.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    assert len(asked) == 1
    assert effects(tmp_path) == []


@pytest.mark.parametrize("given", ["0", "inf", "soon"])
def test_an_elicitation_time_that_is_no_number_of_seconds_is_a_usage_error(tools_file: Path, given: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "tether", "mcp", "serve", "--tools", str(tools_file)]
    for how in (["--elicitation-seconds", given], []):
        done = subprocess.run(
            [*argv, *how], env={**env, "TETHER_ELICITATION_SECONDS": given}, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert "Invalid value for '--elicitation-seconds'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_server_whose_questions_could_never_end_is_refused(bad: float) -> None:
    from tether.mcp.server import mcp_server

    with pytest.raises(ConfigurationError, match="elicitation_seconds must be a number of seconds above 0"):
        mcp_server([], elicitation_seconds=bad)


def test_the_help_states_the_default_elicitation_time() -> None:
    from tether.mcp.server import DEFAULT_ELICITATION_SECONDS

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "tether", "mcp", "serve", "--help"]
    shown = " ".join(subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60).stdout.split())
    assert f"[env: TETHER_ELICITATION_SECONDS; default: {DEFAULT_ELICITATION_SECONDS:g}]" in shown


def test_a_tether_result_reaches_an_mcp_client_once(tools_file: Path) -> None:
    """The MCP guide's chain: tether's tools served over MCP, and offered to a run by tether's MCP client."""
    server_command = f"{sys.executable} -m tether mcp serve --tools {tools_file}"
    env = {"PYTHONPATH": os.pathsep.join(sys.path), "SERVE_TEST_LOG": str(tools_file.with_name("effects.jsonl"))}
    script = [tool_calls([("c1", "add", '{"a": 248, "b": 15}'), ("c2", "record", "{}")]), text("263")]
    with MCPToolset.stdio(server_command, env=env, read_only=True) as served, FakeServer(script) as server:
        result = Agent(OpenAIChatModel("fake", base_url=server.base_url, api_key="x"), [*served]).run_sync("add")
    assert result.status.value == "completed"
    sent = {m["tool_call_id"]: json.loads(m["content"]) for m in server.requests[-1]["messages"] if m["role"] == "tool"}
    assert sent["c1"] == {"ok": True, "result": 263}  # was {"ok": true, "result": {"result": 263}}
    assert sent["c2"] == {"ok": True, "result": {"result": 7}}  # an object is the tool's own result: kept


def test_a_client_line_past_the_bound_ends_the_server_naming_it(tools_file: Path) -> None:
    """A client writing one endless line (64 MiB and on, no newline): the server reads at most
    ``MAX_MESSAGE_BYTES`` of it, then exits 1 saying why, instead of holding the line in memory."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "tether", "mcp", "serve", "--tools", str(tools_file)]
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert server.stdin is not None and server.stderr is not None
    chunk, written = b"x" * (1024 * 1024), 0
    try:
        while written < 4 * MAX_MESSAGE_BYTES:
            server.stdin.write(chunk)
            server.stdin.flush()
            written += len(chunk)
    except BrokenPipeError:
        pass  # the server stopped reading: what the fix does
    try:
        code = server.wait(timeout=30)
    finally:
        server.kill()
        server.wait()
    assert written < 2 * MAX_MESSAGE_BYTES  # not read on past the bound (the pipe holds a little more)
    assert code == 1
    said = server.stderr.read().decode()
    assert f"the client's message is larger than {MAX_MESSAGE_BYTES} bytes; not read" in said
    assert "Traceback" not in said


class RawClient:
    """``tether mcp serve`` spoken to line by line: the lines a client writes, raw, and the server's answers."""

    def __init__(self, tools_file: Path, *options: str, env: dict[str, str] | None = None) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
            "SERVE_TEST_LOG": str(tools_file.with_name("effects.jsonl")),
            **(env or {}),
        }
        argv = [sys.executable, "-m", "tether", "mcp", "serve", "--tools", str(tools_file), *options]
        self.server = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.answers: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.server.stdout is not None
        for line in self.server.stdout:
            self.answers.put(line)

    def send(self, line: str | bytes) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write((line.encode() if isinstance(line, str) else line) + b"\n")
        self.server.stdin.flush()

    def answer(self, timeout: float = 15) -> dict[str, Any]:
        try:
            answered: dict[str, Any] = json.loads(self.answers.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"the server did not answer within {timeout} seconds")
        return answered

    def initialize(self, capabilities: dict[str, Any] | None = None) -> None:
        params = {"protocolVersion": "2025-06-18", "capabilities": capabilities or {}, "clientInfo": CLIENT}
        self.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
        assert "result" in self.answer()
        self.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server.poll() is None:  # a test that failed before ``close``
            self.server.kill()
            self.server.wait()

    def close(self) -> tuple[int, str]:
        """Close stdin as a client leaving does: the exit code and what the server wrote on stderr."""
        assert self.server.stdin is not None and self.server.stderr is not None
        self.server.stdin.close()
        try:
            code = self.server.wait(timeout=30)
        finally:
            self.server.kill()
        return code, self.server.stderr.read().decode()


CLIENT = {"name": "raw", "version": "1"}


def refused(ident: int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def call(ident: int, name: str, arguments: str) -> str:
    """A ``tools/call`` line whose arguments are written as given (JSON a client's ``json.dumps`` cannot write)."""
    params = f'{{"name": "{name}", "arguments": {arguments}}}'
    return f'{{"jsonrpc": "2.0", "id": {ident}, "method": "tools/call", "params": {params}}}'


def answered_call(answer: dict[str, Any], ident: int) -> dict[str, Any]:
    assert answer["id"] == ident and "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def test_a_line_that_is_no_message_is_answered_and_the_session_goes_on(tools_file: Path) -> None:
    """The SDK drops a line it cannot read without a word, and the client that sent a request on it waits
    forever: each gets its JSON-RPC error, quoting at most 100 characters of the line, and the next line is read."""
    with RawClient(tools_file) as client:
        client.initialize()
        lines = [
            (
                "this is not json",
                refused(
                    None,
                    -32700,
                    "Parse error: the message is not JSON: Expecting value at character 0, near 'this is not json'",
                ),
            ),
            (
                '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"',
                refused(None, -32700, "Parse error: the message is not JSON: Expecting ',' delimiter at its end"),
            ),
            (call(3, "add", '{"a": NaN, "b": 1}'), refused(None, -32700, "Parse error: NaN is not valid JSON")),
            (
                call(5, "add", '{"a": 1e400, "b": 1}'),
                refused(None, -32700, "Parse error: number 1e400 is out of range"),
            ),
            (
                "[]",
                refused(
                    None,
                    -32600,
                    "Invalid Request: a message is one JSON object, not an array (a batch is not accepted)",
                ),
            ),
            (
                '{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": 5}',
                refused(4, -32600, 'Invalid Request: its "params" must be an object, not integer'),
            ),
            (
                '{"jsonrpc": "2.0", "id": true, "method": "tools/list"}',
                refused(None, -32600, 'Invalid Request: its "id" must be a string or an integer, not boolean'),
            ),
            (
                call(5, "add", '{"a": "\\ud800", "b": 1}'),
                refused(5, -32600, "Invalid Request: it holds a lone UTF-16 surrogate, which is not text"),
            ),
        ]
        for line, answer in lines:
            client.send(line)
            assert client.answer() == answer
        latin1 = b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"\xff": 1}}'
        client.send(latin1)
        byte = latin1.index(b"\xff")
        assert client.answer() == refused(None, -32700, f"Parse error: the message is not UTF-8 (at byte {byte})")
        client.send("x" * 1_000_000)  # the answer quotes 100 characters of it, not the line
        message = client.answer()["error"]["message"]
        assert message == f"Parse error: the message is not JSON: Expecting value at character 0, near {'x' * 100!r}…"
        client.send("")  # a blank line is no message: nothing to answer
        client.send(call(7, "add", '{"a": 2, "b": 3}'))
        assert answered_call(client.answer(), 7)["structuredContent"] == {"result": 5}
        code, said = client.close()
        assert code == 0 and "Traceback" not in said


def test_a_key_twice_is_refused_naming_it_and_the_tool_does_not_run(tools_file: Path, tmp_path: Path) -> None:
    """``{"confirm": false, "confirm": true}`` is not last-wins: what the client's user reviewed and what runs
    could differ. A request is answered naming the key, with its id when that is unambiguous; a notification is
    dropped (nothing to answer), said on stderr without the line."""
    with RawClient(tools_file, "--principal", "alice", "--scope", "admin") as client:
        client.initialize()
        client.send(call(2, "reset", '{"confirm": false, "confirm": true}'))
        assert client.answer() == refused(2, -32602, "Invalid params: duplicate key 'confirm' in params.arguments")
        client.send(call(3, "reset", '{"options": [{"x": 1}, {"confirm": true, "confirm": true}]}'))
        assert client.answer() == refused(
            3, -32602, "Invalid params: duplicate key 'confirm' in params.arguments.options[1]"
        )
        client.send(
            '{"jsonrpc": "2.0", "id": 4, "id": 5, "method": "tools/call", "params": {"name": "reset", '
            '"arguments": {"confirm": true}}}'
        )
        assert client.answer() == refused(None, -32600, "Invalid Request: duplicate key 'id'")
        client.send(
            '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "requestId": 2}}'
        )
        client.send(call(6, "reset", '{"confirm": true}'))
        assert answered_call(client.answer(), 6)["structuredContent"] == {"result": "reset by alice"}
        code, said = client.close()
        assert effects(tmp_path) == [{"tool": "reset", "arguments": {"confirm": True}}]  # the last call's only
        assert code == 0
        assert "tether mcp serve dropped a notification: Invalid params: duplicate key 'requestId' in params" in said


def test_an_approval_answer_holding_a_key_twice_approves_nothing(tools_file: Path, tmp_path: Path) -> None:
    """The user's answer to "Approve transfer?" with ``{"approve": false, "approve": true}``: not an approval. A
    response is never answered: it is dropped, and the question ends at once, unanswered (not when its time is
    up: the bound here is a minute, the wait for the answer 15 seconds)."""
    with RawClient(tools_file, env={"TETHER_ELICITATION_SECONDS": "60"}) as client:
        client.initialize({"elicitation": {}})
        client.send(call(2, "transfer", '{"amount": 5, "to": "bob"}'))
        asked = client.answer()
        assert asked["method"] == "elicitation/create"
        accepted = '{"action": "accept", "content": {"approve": false, "approve": true}}'
        client.send(f'{{"jsonrpc": "2.0", "id": {json.dumps(asked["id"])}, "result": {accepted}}}')
        result = answered_call(client.answer(), 2)
        assert result["isError"] is True
        assert (
            result["content"][0]["text"] == "denied: transfer needs approval and the client did not give it (MCPError)"
        )
        _, said = client.close()
        assert effects(tmp_path) == []
        assert "tether mcp serve dropped a response: Invalid Request: duplicate key 'approve' in result.content" in said


def test_a_line_of_too_many_arrays_is_answered_before_it_is_decoded(tools_file: Path) -> None:
    """Bytes bound a line's text, not what it takes decoded: 16 MiB of ``[],`` is 5.6 million lists, built by the
    check and again by the SDK. Past ``MAX_MESSAGE_CONTAINERS`` the line is refused unread; at it, it is read."""
    with RawClient(tools_file) as client:
        client.initialize()
        # The message's, its params' and its arguments' objects, a's list, and the lists in it: one past the bound.
        inner = MAX_MESSAGE_CONTAINERS - 3
        client.send(call(2, "add", '{"a": [' + "[]," * (inner - 1) + '[]], "b": 1}'))
        assert client.answer() == refused(
            None, -32700, f"Parse error: the message holds more than {MAX_MESSAGE_CONTAINERS} JSON arrays and objects"
        )
        client.send(call(3, "add", '{"a": [' + "[]," * (inner - 2) + '[]], "b": 1, "c": "[[[[{{{{"}'))  # at it
        said_to_model = answered_call(client.answer(), 3)["content"][0]["text"]
        assert said_to_model.startswith("invalid_arguments")  # read, then refused by the tool's check
        client.send(call(4, "add", '{"a": 2, "b": 3}'))
        assert answered_call(client.answer(), 4)["structuredContent"] == {"result": 5}
        code, said = client.close()
        assert code == 0 and "Traceback" not in said


def test_a_line_nested_90000_deep_is_answered_without_a_crash(tools_file: Path) -> None:
    """Nesting past ``MAX_MESSAGE_DEPTH``: past Python's recursion limit (the decoder stops), and short of it
    (the SDK would drop it past 200 levels); a call's arguments are bounded by ``MAX_DEPTH`` after that."""
    with RawClient(tools_file) as client:
        client.initialize()
        too_deep = refused(
            None, -32700, f"Parse error: the message is nested more than {MAX_MESSAGE_DEPTH} levels deep"
        )
        for depth in (90_000, 300):  # 90,000: under MAX_MESSAGE_CONTAINERS, which is checked first
            client.send("[" * depth + "]" * depth)
            assert client.answer() == too_deep
            client.send(call(2, "add", '{"a": ' * depth + "1" + "}" * depth))
            assert client.answer() == too_deep
        client.send(call(3, "add", '{"a": ' * 80 + "1" + "}" * 80))
        said_to_model = answered_call(client.answer(), 3)["content"][0]["text"]
        assert said_to_model == f"invalid_json: arguments are nested more than {MAX_DEPTH} levels deep"
        client.send(call(4, "add", '{"a": 2, "b": 3}'))
        assert answered_call(client.answer(), 4)["structuredContent"] == {"result": 5}
        code, said = client.close()
        assert code == 0 and "Traceback" not in said
