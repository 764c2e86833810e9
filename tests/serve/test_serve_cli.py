"""The command a new user types: ``tether serve agent.py:agent --auth keys``, with keys from ``tether keys create``.

Everything is real: the CLI in its own process, API keys in the run store,
the 20-line agent.py, the model a FakeServer, an HTTP client. Alice starts a
run; Bob, whose key holds the approver role, approves it from his own key;
his key revoked, he is refused at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
from serve_harness import Client, Served, free_port, wait_listening

from tether.serve.launch import MAX_HEAD_BYTES

SRC = Path(__file__).resolve().parents[2] / "src"


def tether(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, timeout=60)


def made_key(db: Path, env: dict[str, str], principal: str, *roles: str) -> dict[str, str]:
    options = [opt for role in roles for opt in ("--roles", role)]
    made = tether("keys", "create", "--principal", principal, *options, "--db", str(db), "--json", env=env)
    assert made.returncode == 0, made.stderr
    return dict(json.loads(made.stdout))


async def test_tether_serve_with_api_keys_runs_asks_and_takes_an_approvers_decision(
    served: Served, session: aiohttp.ClientSession
) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_BASE_URL": served.model.base_url, "OPENAI_API_KEY": "sk-x"}
    env |= {"REFUNDS_LOG": str(served.refunds)}
    db = Path(str(served.db))
    alice = made_key(db, env, "alice")
    bob = made_key(db, env, "bob", "approver")
    port = free_port()
    command = ["serve", f"{served.agent_py}:agent", "--auth", "keys", "--db", str(db), "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_listening(process, port), process.stderr.read().decode() if process.stderr else ""
        api = Client(f"http://127.0.0.1:{port}", session)
        assert (await api.call("GET", "/runs", None)).status == 401
        assert (await api.call("GET", "/runs", "tk_not-a-key")).status == 401

        run_id = await api.start(alice["key"], "Please refund order A7.")
        assert (await api.settled(alice["key"], run_id))["status"] == "awaiting_approval"
        assert served.refunds_made() == []
        [item] = (await api.call("GET", "/approvals", bob["key"])).body["approvals"]
        assert (item["owner"], item["tool"], item["decidable"]) == ("alice", "refund", True)
        call = f"/runs/{run_id}/approvals/{item['call_id']}"
        decision = {"approve": True, "fingerprint": item["fingerprint"]}
        assert (await api.call("POST", call, alice["key"], decision)).status == 403  # no approver role
        assert (await api.call("POST", call, bob["key"], decision)).status == 200
        done = await api.settled(alice["key"], run_id)
        assert (done["status"], done["output"]) == ("completed", "Refunded 42 on order A7.")
        assert served.refunds_made() == ["A7 42"]

        revoked = tether("keys", "revoke", bob["key_id"], "--db", str(db), env=env)
        assert revoked.returncode == 0, revoked.stderr
        assert (await api.call("GET", "/approvals", bob["key"])).status == 401  # at once, no restart
        assert (await api.call("GET", f"/runs/{run_id}", alice["key"])).status == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()
    assert bob["key"] not in db.read_bytes().decode("latin-1")  # the store keeps a hash, never the key


async def head_sent(port: int, head: bytes) -> bytes:
    """What the server answers a request ``head`` (read until it closes the connection, or 10 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


async def test_an_oversized_request_head_is_refused_before_anyone_is_asked_who_sends_it(
    served: Served, session: aiohttp.ClientSession
) -> None:
    """A header larger than the server takes is a 400, buffered no further, even with no credentials."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_BASE_URL": served.model.base_url, "OPENAI_API_KEY": "sk-x"}
    port = free_port()
    command = ["serve", f"{served.agent_py}:agent", "--auth", "keys", "--db", str(served.db), "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_listening(process, port), process.stderr.read().decode() if process.stderr else ""
        big = b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES * 4) + b"\r\n\r\n"
        answer = await head_sent(port, big)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:200]
        # Cut off mid-header, it is refused as soon as the limit is passed, not once the header ends.
        endless = b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES * 4)
        answer = await head_sent(port, endless)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert (await Client(f"http://127.0.0.1:{port}", session).call("GET", "/runs", None)).status == 401
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()
