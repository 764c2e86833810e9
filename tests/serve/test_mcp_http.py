"""A served agent as one MCP tool over streamable HTTP: ``tether serve agent.py:agent --auth keys --mcp``.

Everything is real: the CLI in its own process, API keys made with
``tether keys create``, the MCP SDK's own streamable HTTP client. Alice's
key calls the agent and gets its answer; a call that needs approval tells
her the run waits and where an approver decides, and Bob (approver role)
decides it over the HTTP API. Bob's own client, which can be asked (MCP
elicitation), approves or declines the call it is shown, bound to its
fingerprint; left unanswered past ``--elicitation-seconds``, the question is
taken back and the call waits for a decision over HTTP. Without a key, or
with a wrong one, nothing is served. A body tether does not read (a key
twice, not JSON) is a 400 JSON-RPC error, and nothing comes of it: no run,
no decision; such an answer to an approval question ends the question at
once, as if its time were up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_helpers import never_answering
from serve_harness import Client, Served, free_port, wait_listening
from test_serve_cli import SRC, made_key

from tether.serve.mcp_http import MAX_SESSIONS_PER_PRINCIPAL

Elicit = Any  # an elicitation callback of the SDK's ClientSession


@contextmanager
def served_with_keys(served: Served, *options: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``tether serve agent.py:agent --auth keys --mcp [OPTIONS]`` on a free port, and the keys of alice, bob
    (approver)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_BASE_URL": served.model.base_url, "OPENAI_API_KEY": "sk-x"}
    env |= {"REFUNDS_LOG": str(served.refunds)}
    db = Path(str(served.db))
    keys = {"alice": made_key(db, env, "alice")["key"], "bob": made_key(db, env, "bob", "approver")["key"]}
    port = free_port()
    command = ["serve", f"{served.agent_py}:agent", "--auth", "keys", "--mcp", "--db", str(db), "--port", str(port),
               *options]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_listening(process, port), process.stderr.read().decode() if process.stderr else ""
        yield f"http://127.0.0.1:{port}", keys
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@asynccontextmanager
async def mcp_session(base: str, key: str, elicit: Elicit | None = None) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        await session.initialize()
        yield session


def answering(approve: bool) -> tuple[Elicit, list[types.ElicitRequestParams]]:
    asked: list[types.ElicitRequestParams] = []

    async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"approve": approve})

    return elicit, asked


async def test_an_mcp_client_calls_the_agent_with_an_api_key_and_learns_where_a_call_waits(
    served: Served, session: aiohttp.ClientSession
) -> None:
    with served_with_keys(served) as (base, keys):
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                      "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient() as http:
            for sent in (headers, {**headers, "Authorization": "Bearer tk_not-a-key"}):
                refused = await http.post(f"{base}/mcp", json=initialize, headers=sent)
                assert refused.status_code == 401, refused.text
                assert refused.headers["content-type"].startswith("application/problem+json")

        async with mcp_session(base, keys["alice"]) as alice:
            [tool] = (await alice.list_tools()).tools
            assert tool.name == "agent" and tool.input_schema["required"] == ["prompt"]
            answer = await alice.call_tool("agent", {"prompt": "say: hello"})
            assert not answer.is_error, answer
            assert answer.content[0].type == "text" and answer.content[0].text == "You said hello"
            assert answer.structured_content is not None and answer.structured_content["status"] == "completed"

            bad = await alice.call_tool("agent", {"prompt": 5})
            assert bad.is_error and bad.content[0].type == "text"
            assert bad.content[0].text.startswith("invalid_arguments:")

            waiting = await alice.call_tool("agent", {"prompt": "Please refund order A7."})  # no approver role
            assert not waiting.is_error, waiting
            assert waiting.structured_content is not None
            run_id = waiting.structured_content["run_id"]
            assert waiting.structured_content["status"] == "awaiting_approval"
            [call] = waiting.structured_content["waiting"]
            assert call["arguments"]["api_token"] != "sk-live-secret-123456789012345678"  # redacted
            assert waiting.content[0].type == "text"
            assert f"POST /runs/{run_id}/approvals/{call['call_id']}" in waiting.content[0].text
        assert served.refunds_made() == []

        api = Client(base, session)
        [item] = (await api.call("GET", "/approvals", keys["bob"])).body["approvals"]
        assert (item["run_id"], item["fingerprint"]) == (run_id, call["fingerprint"])
        decision = {"approve": True, "fingerprint": item["fingerprint"]}
        decided = await api.call("POST", f"/runs/{run_id}/approvals/{call['call_id']}", keys["bob"], decision)
        assert decided.status == 200, decided.body
        done = await api.settled(keys["alice"], run_id)
        assert (done["status"], done["output"]) == ("completed", "Refunded 42 on order A7.")
        assert served.refunds_made() == ["A7 42"]


@pytest.mark.parametrize("approve", [True, False])
async def test_an_approver_whose_client_can_be_asked_decides_the_call_it_is_shown(
    served: Served, session: aiohttp.ClientSession, approve: bool
) -> None:
    elicit, asked = answering(approve)
    with served_with_keys(served) as (base, keys):
        async with mcp_session(base, keys["bob"], elicit) as bob:
            result = await bob.call_tool("agent", {"prompt": "Please refund order A7."})
        assert not result.is_error, result
        assert result.structured_content is not None and result.structured_content["status"] == "completed"
        run_id = result.structured_content["run_id"]
        view = (await Client(base, session).call("GET", f"/runs/{run_id}", keys["bob"])).body
    [question] = asked
    assert "refund" in question.message and "fingerprint" in question.message
    assert "sk-live-secret" not in question.message  # the arguments are shown redacted
    [refund] = [c for step in view["steps"] for c in step["calls"] if c["tool"] == "refund"]
    assert refund["executed"] is approve
    assert served.refunds_made() == (["A7 42"] if approve else [])
    if not approve:
        assert refund["outcome"] == "denied"


async def test_a_question_the_approver_never_answers_is_taken_back_and_the_call_waits_for_a_decision(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """Bob's client can be asked and never answers: after --elicitation-seconds (it waited forever) the question
    is taken back, nothing is decided, and the result says where the call waits; Bob then decides it over HTTP."""
    elicit, asked, taken_back = never_answering()

    with served_with_keys(served, "--elicitation-seconds", "0.5") as (base, keys):
        with anyio.fail_after(30):
            async with mcp_session(base, keys["bob"], elicit) as bob:
                waiting = await bob.call_tool("agent", {"prompt": "Please refund order A7."})
                await taken_back.wait()
        assert len(asked) == 1
        assert not waiting.is_error, waiting
        assert waiting.structured_content is not None
        run_id = waiting.structured_content["run_id"]
        assert waiting.structured_content["status"] == "awaiting_approval"
        [call] = waiting.structured_content["waiting"]
        assert waiting.content[0].type == "text"
        assert f"POST /runs/{run_id}/approvals/{call['call_id']}" in waiting.content[0].text

        api = Client(base, session)
        view = (await api.call("GET", f"/runs/{run_id}", keys["bob"])).body
        assert view["status"] == "awaiting_approval" and [c["call_id"] for c in view["pending_approvals"]] == [
            call["call_id"]
        ]
        assert served.refunds_made() == []
        decision = {"approve": True, "fingerprint": call["fingerprint"]}
        decided = await api.call("POST", f"/runs/{run_id}/approvals/{call['call_id']}", keys["bob"], decision)
        assert decided.status == 200, decided.body
        done = await api.settled(keys["bob"], run_id)
        assert (done["status"], done["output"]) == ("completed", "Refunded 42 on order A7.")
        assert served.refunds_made() == ["A7 42"]


@pytest.mark.parametrize("flag", ["--mcp", "--a2a"])
def test_the_protocol_flags_are_for_a_served_agent_only(flag: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "tether", "serve", flag], capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "name the agent to serve: tether serve PATH_OR_MODULE:AGENT" in done.stderr


async def test_an_mcp_session_belongs_to_the_caller_that_opened_it(served: Served) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                  "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    with served.process("mcp") as (_, base):
        async with httpx.AsyncClient() as http:
            as_alice = {**accept, "Authorization": "Bearer alice"}
            opened = await http.post(f"{base}/mcp", json=initialize, headers=as_alice)
            assert opened.status_code == 200, opened.text
            session_id = opened.headers["mcp-session-id"]
            for who, status in (("carol", 404), ("alice", 200)):
                sent = {**accept, "Authorization": f"Bearer {who}", "Mcp-Session-Id": session_id}
                reply = await http.post(f"{base}/mcp", json=listing, headers=sent)
                assert reply.status_code == status, (who, reply.text)


async def test_one_caller_cannot_hold_every_session_the_process_has(served: Served) -> None:
    """The SDK caps a process's sessions, not a caller's: one that opened them all would shut out every other."""
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
                  "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    with served.process("mcp") as (_, base):
        async with httpx.AsyncClient() as http:

            async def opened(who: str) -> httpx.Response:
                return await http.post(
                    f"{base}/mcp", json=initialize, headers={**accept, "Authorization": f"Bearer {who}"}
                )

            for _ in range(MAX_SESSIONS_PER_PRINCIPAL):
                assert (await opened("carol")).status_code == 200
            refused = await opened("carol")
            assert refused.status_code == 429 and "MCP sessions open" in refused.text, refused.text
            assert (await opened("alice")).status_code == 200  # another caller is not shut out


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
              "capabilities": {"elicitation": {}}, "clientInfo": {"name": "probe", "version": "1"}}}  # fmt: skip


async def raw_session(http: httpx.AsyncClient, base: str, key: str) -> dict[str, str]:
    """Open an MCP session over plain HTTP (a client that declares elicitation); the headers each POST in it
    sends."""
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {key}",
               "Content-Type": "application/json"}  # fmt: skip
    opened = await http.post(f"{base}/mcp", json=INITIALIZE, headers=headers)
    assert opened.status_code == 200, opened.text
    headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    ready = await http.post(f"{base}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                            headers=headers)  # fmt: skip
    assert ready.status_code == 202, ready.text
    return headers


async def sse_messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE answer, as they come."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line.removeprefix("data:").strip():
            yield json.loads(line.removeprefix("data:"))


def refused(ident: int | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


async def test_a_body_tether_does_not_read_is_a_json_rpc_error_and_starts_no_run(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """The SDK reads a body keeping the last of duplicate keys: {"prompt": "say: hi", "prompt": "Please refund..."}
    ran the refund desk on a prompt a reviewer of the first key never saw. Each body is answered 400 with its
    JSON-RPC error, no run starts, no model is asked, and the session goes on."""
    call = (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "agent",'
            b' "arguments": {"prompt": "say: hi", "prompt": "Please refund order A7."}}}')  # fmt: skip
    not_json = "Parse error: the message is not JSON: Expecting value at character 0, near 'hello'"
    bodies = [
        (call, refused(7, -32602, "Invalid params: duplicate key 'prompt' in params.arguments")),
        (b"hello", refused(None, -32700, not_json)),
        (
            call.replace(b'"say: hi", "prompt"', b'NaN, "n"'),
            refused(None, -32700, "Parse error: NaN is not valid JSON"),
        ),
        (call.replace(b'"id": 7', b'"id": 7, "id": 8'), refused(None, -32600, "Invalid Request: duplicate key 'id'")),
    ]
    with served_with_keys(served) as (base, keys):
        async with httpx.AsyncClient(timeout=30) as http:
            headers = await raw_session(http, base, keys["alice"])
            for body, answer in bodies:
                reply = await http.post(f"{base}/mcp", content=body, headers=headers)
                assert (reply.status_code, reply.headers["content-type"]) == (400, "application/json"), reply.text
                assert reply.json() == answer
            api = Client(base, session)
            assert (await api.call("GET", "/runs", keys["alice"])).body["runs"] == []
            assert served.model.requests == []

            fine = call.replace(b'"say: hi", "prompt": "Please refund order A7."', b'"say: hi"')
            async with http.stream("POST", f"{base}/mcp", content=fine, headers=headers) as reply:
                assert reply.status_code == 200
                answer = [message async for message in sse_messages(reply)][-1]
        assert answer["id"] == 7 and answer["result"]["structuredContent"]["output"] == "You said hi"
        assert len((await api.call("GET", "/runs", keys["alice"])).body["runs"]) == 1


async def test_an_approval_answer_holding_approve_twice_decides_nothing_and_ends_the_question_at_once(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """Bob's client answers the approval question with {"approve": false, "approve": true}: read last-wins, that
    was an approval and the refund was made. It is a 400 JSON-RPC error (a response has no id to echo), and the
    question ends at once, unanswered, as when its time is up: the call's result says where an approver decides
    (not after --elicitation-seconds: a minute here, the wait for the result 20 seconds), nothing is decided, and
    Bob's decision over HTTP then takes effect once."""
    with served_with_keys(served, "--elicitation-seconds", "60") as (base, keys):
        async with httpx.AsyncClient(timeout=30) as http:
            headers = await raw_session(http, base, keys["bob"])
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "agent", "arguments": {"prompt": "Please refund order A7."}}}  # fmt: skip
            with anyio.fail_after(20):
                async with http.stream("POST", f"{base}/mcp", json=call, headers=headers) as reply:
                    assert reply.status_code == 200
                    messages = sse_messages(reply)
                    question = await anext(messages)
                    assert question["method"] == "elicitation/create", question
                    content = '{"action": "accept", "content": {"approve": false, "approve": true}}'
                    answer = f'{{"jsonrpc": "2.0", "id": {json.dumps(question["id"])}, "result": {content}}}'
                    answered = await http.post(f"{base}/mcp", content=answer, headers=headers)
                    assert (answered.status_code, answered.headers["content-type"]) == (400, "application/json")
                    assert answered.json() == refused(
                        None, -32600, "Invalid Request: duplicate key 'approve' in result.content"
                    )
                    rest = [message async for message in messages]
        assert not any(m.get("method") == "notifications/cancelled" for m in rest)  # ended, not taken back
        [result] = [m for m in rest if m.get("id") == 2]
        waiting = result["result"]["structuredContent"]
        assert waiting["status"] == "awaiting_approval", result
        [call_waiting] = waiting["waiting"]
        run_id, call_id = waiting["run_id"], call_waiting["call_id"]
        assert f"POST /runs/{run_id}/approvals/{call_id}" in result["result"]["content"][0]["text"]
        api = Client(base, session)
        view = (await api.call("GET", f"/runs/{run_id}", keys["bob"])).body
        assert [c["tool"] for c in view["pending_approvals"]] == ["refund"]  # nothing decided
        assert served.refunds_made() == []

        decision = {"approve": True, "fingerprint": call_waiting["fingerprint"]}
        decided = await api.call("POST", f"/runs/{run_id}/approvals/{call_id}", keys["bob"], decision)
        assert decided.status == 200, decided.body
        done = await api.settled(keys["bob"], run_id)
        assert (done["status"], done["output"]) == ("completed", "Refunded 42 on order A7.")
        again = await api.call("POST", f"/runs/{run_id}/approvals/{call_id}", keys["bob"], decision)
        assert again.status == 409, again.body
        assert served.refunds_made() == ["A7 42"]
