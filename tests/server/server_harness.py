"""The service, for real: uvicorn on a free port in a background thread, and a client for it.

``run_uvicorn(settings)`` serves one app; ``Api`` is an aiohttp client that
signs in as the seed users (password ``<username>-pass``), starts runs,
waits for them and reads their event streams.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn

from tether.models.openai_chat import OpenAIChatModel
from tether.testing.fake_server import FakeServer
from tickets_app.app import create_app
from tickets_app.settings import Settings

REPO = Path(__file__).resolve().parents[2]
# This checkout's tether and its ticket example, whatever is installed: for the processes the tests start.
PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO / "examples" / "tickets")])
SECRET = "test-secret-" + "x" * 60  # 64+ bytes: also long enough for HS512
LIVE = frozenset({"ready", "awaiting_model", "awaiting_tools"})


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: Any

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";")[0]


@dataclass
class Api:
    base: str
    model: FakeServer
    settings: Settings
    session: aiohttp.ClientSession
    tokens: dict[str, str] = field(default_factory=dict)

    async def call(
        self, method: str, path: str, *, user: str | None = None, token: str | None = None, json_body: Any = None
    ) -> Response:
        headers = {}
        if user is not None:
            token = await self.token(user)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.request(method, self.base + path, json=json_body, headers=headers) as resp:
            text = await resp.text()
            try:
                body: Any = json.loads(text)
            except ValueError:
                body = text
            return Response(resp.status, dict(resp.headers), body)

    async def token(self, username: str) -> str:
        if username not in self.tokens:
            resp = await self.call("POST", "/api/auth/token", json_body={"username": username,
                                                                          "password": f"{username}-pass"})  # fmt: skip
            assert resp.status == 200, resp.body
            self.tokens[username] = resp.body["access_token"]
        return self.tokens[username]

    async def start(self, user: str, prompt: str) -> str:
        resp = await self.call("POST", "/api/runs", user=user, json_body={"prompt": prompt})
        assert resp.status == 202, resp.body
        return str(resp.body["run_id"])

    async def wait(self, user: str, run_id: str, timeout: float = 15.0) -> dict[str, Any]:
        """Poll until the run leaves the live statuses; its view."""
        deadline = time.monotonic() + timeout
        while True:
            resp = await self.call("GET", f"/api/runs/{run_id}", user=user)
            assert resp.status == 200, resp.body
            if resp.body["status"] not in LIVE:
                return dict(resp.body)
            assert time.monotonic() < deadline, f"run {run_id} still {resp.body['status']}"
            await asyncio.sleep(0.02)

    async def events(self, user: str, run_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
        """The SSE stream until the server ends it: (event, id, data) per event."""
        token = await self.token(user)
        headers = {"Authorization": f"Bearer {token}"}
        out: list[tuple[str, str | None, dict[str, Any]]] = []
        fields: dict[str, str] = {}
        url = f"{self.base}/api/runs/{run_id}/events"
        async with self.session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=20)) as resp:
            assert resp.status == 200
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(process: subprocess.Popen[bytes], port: int, seconds: float = 60) -> bool:
    """Wait until ``process`` (a ``tether serve``) accepts connections on ``port``; False if it exited or timed out."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.2)


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def run_uvicorn(settings: Settings) -> Iterator[str]:
    """The app served on 127.0.0.1 in a thread with its own event loop; its origin."""
    sock = _free_socket()
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def fake_model_factory(server: FakeServer) -> Callable[[], OpenAIChatModel]:
    return lambda: OpenAIChatModel("fake-model", base_url=server.base_url, api_key="test-key", max_retries=0)
