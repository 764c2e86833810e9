"""A served agent for real: ``tether.serve.app`` under uvicorn in a process of its own, and a client for it.

``AGENT_PY`` is the 20-line agent a new user writes (a read-only tool and a
tool needing approval); ``refund_desk`` is its model, for a ``FakeServer``
the served process reaches through ``OPENAI_BASE_URL``. Callers prove who
they are with ``HeaderAuth``: ``Authorization: Bearer <principal>:<role,role>``
(a test authenticator; the real ones plug into the same seam).
``python serve_harness.py TARGET DB PORT [PROTOCOLS]`` serves TARGET with it (``PROTOCOLS``: ``a2a``, ``mcp``,
comma-separated); with ``SERVE_TEMPORAL=HOST:PORT`` and ``SERVE_TASK_QUEUE`` its runs are Temporal workflows.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from starlette.requests import Request

from tether.serve.problems import Problem
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls
from tether.tools.context import Principal

HERE = Path(__file__).resolve().parent
LIVE = frozenset({"ready", "awaiting_model", "awaiting_tools"})

AGENT_PY = '''
import os
from tether import Agent, OpenAIChatModel, tool

@tool(read_only=True)
def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up."""
    return {"order_id": order_id, "status": "delivered", "total": 42}

@tool(approval=True)
def refund(order_id: str, amount: int, api_token: str = "") -> str:
    """Refund an order; a person approves it first."""
    with open(os.environ["REFUNDS_LOG"], "a") as log:
        log.write(f"{order_id} {amount}\\n")
    return f"refunded {amount} on order {order_id}"

agent = Agent(OpenAIChatModel("fake-model"), [lookup_order, refund], system="You handle refunds.")
'''


class HeaderAuth:
    """``Authorization: Bearer alice:approver,ops`` is the principal alice with roles approver and ops."""

    async def authenticate(self, request: Request) -> Principal:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        name, _, roles = value.partition(":")
        if scheme != "Bearer" or not name:
            raise Problem(
                401, "say who you are: Authorization: Bearer <principal>", headers={"WWW-Authenticate": "Bearer"}
            )
        return Principal(name, roles=frozenset(r for r in roles.split(",") if r))


def refund_desk(request: dict[str, Any]) -> ReplySpec:
    """Look the order up, refund it (a call needing approval), say so; ``say: X`` is answered ``You said X``,
    ``take your time`` after a minute."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "user" and last["content"].startswith("say: "):
        return text("You said " + last["content"].removeprefix("say: "))
    if last["role"] == "user" and last["content"] == "take your time":
        return text("too late", latency=60)
    n = len(messages)
    if last["role"] == "user":
        return tool_calls([(f"call_lookup_{n}", "lookup_order", json.dumps({"order_id": "A7"}))])
    if last["role"] == "tool" and last["tool_call_id"].startswith("call_lookup"):
        arguments = {"order_id": "A7", "amount": 42, "api_token": "sk-live-secret-123456789012345678"}
        return tool_calls([(f"call_refund_{n}", "refund", json.dumps(arguments))])
    return text("Refunded 42 on order A7.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(process: subprocess.Popen[bytes], port: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)


@dataclass
class Served:
    agent_py: Path
    db: Path | str
    refunds: Path
    model: FakeServer

    def refunds_made(self) -> list[str]:
        return self.refunds.read_text().splitlines() if self.refunds.exists() else []

    @contextmanager
    def process(
        self, *protocols: str, env: dict[str, str] | None = None
    ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
        """The agent served by a process of its own (with ``protocols``: a2a, mcp; ``env`` added to its
        environment, e.g. ``TETHER_MAX_*`` limits); stopped (SIGTERM) at the end unless already gone."""
        port = free_port()
        env = {**os.environ, "OPENAI_BASE_URL": self.model.base_url, "OPENAI_API_KEY": "sk-test",
               "REFUNDS_LOG": str(self.refunds), "TETHER_LOG_LEVEL": "warning", **(env or {})}  # fmt: skip
        command = [sys.executable, str(HERE / "serve_harness.py"), f"{self.agent_py}:agent", str(self.db), str(port)]
        command += [",".join(protocols)] if protocols else []
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert wait_listening(process, port), process.stderr.read().decode() if process.stderr else ""
            yield process, f"http://127.0.0.1:{port}"
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
            if process.stderr is not None:
                process.stderr.close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0]


@dataclass
class Client:
    base: str
    session: aiohttp.ClientSession

    async def call(
        self, method: str, path: str, who: str | None, body: Any = None, headers: dict[str, str] | None = None
    ) -> Reply:
        sent = dict(headers or {})
        if who is not None:
            sent["Authorization"] = f"Bearer {who}"
        async with self.session.request(method, self.base + path, json=body, headers=sent) as resp:
            raw = await resp.text()
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw
            return Reply(resp.status, dict(resp.headers), parsed)

    async def start(self, who: str, prompt: str) -> str:
        reply = await self.call("POST", "/runs", who, {"prompt": prompt})
        assert reply.status == 202, reply.body
        return str(reply.body["run_id"])

    async def settled(self, who: str, run_id: str, seconds: float = 30) -> dict[str, Any]:
        """The run's view once it has left the live statuses (finished, or waiting for a person)."""
        deadline = time.monotonic() + seconds
        while True:
            reply = await self.call("GET", f"/runs/{run_id}", who)
            assert reply.status == 200, reply.body
            if reply.body["status"] not in LIVE:
                return dict(reply.body)
            assert time.monotonic() < deadline, f"run {run_id} still {reply.body['status']}"
            await asyncio.sleep(0.05)

    async def events(
        self, who: str, run_id: str, last_event_id: str | None = None
    ) -> list[tuple[str, str | None, dict[str, Any]]]:
        """The run's SSE stream until the server ends it: (event, id, data) per event."""
        headers = {"Authorization": f"Bearer {who}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        out: list[tuple[str, str | None, dict[str, Any]]] = []
        fields: dict[str, str] = {}
        url = f"{self.base}/runs/{run_id}/events"
        async with self.session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    continue
                if line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                    continue
                if fields:
                    out.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
                    fields = {}
        return out


def main(argv: list[str]) -> None:
    import uvicorn

    from tether.serve import app
    from tether.serve.launch import HTTP_SERVER
    from tether.serve.target import load_agent

    target, db, port, *rest = argv
    protocols = rest[0].split(",") if rest else []
    engine: dict[str, Any] = {}
    if temporal := os.environ.get("SERVE_TEMPORAL"):
        engine = {"engine": "temporal", "temporal": temporal, "task_queue": os.environ["SERVE_TASK_QUEUE"]}
    served = app(load_agent(target), authenticator=HeaderAuth(), store=db, a2a="a2a" in protocols,
                 mcp="mcp" in protocols, **engine)  # fmt: skip
    uvicorn.run(served, host="127.0.0.1", port=int(port), log_level="warning", **HTTP_SERVER)  # as `tether serve`


if __name__ == "__main__":
    main(sys.argv[1:])
