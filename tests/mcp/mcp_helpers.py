"""Starting the test MCP servers, telling whether a server process is still around, and a guarded child."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

SERVER = Path(__file__).with_name("mcp_server.py")
HOSTILE = Path(__file__).with_name("hostile_server.py")


def server_argv(mode: str, *extra: str) -> list[str]:
    return [sys.executable, str(SERVER), mode, *extra]


def hostile_argv(mode: str, *extra: str) -> list[str]:
    return [sys.executable, str(HOSTILE), mode, *extra]


def our_servers(server: Path = SERVER) -> list[tuple[int, str]]:
    """Our child processes running ``server`` (a test server), zombies included: ``(pid, state)``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and str(server).encode() in cmdline:
            found.append((int(entry.name), state))
    return found


def gone(pid: int) -> bool:
    """True once ``pid`` no longer exists, not even as an unreaped zombie."""
    return not Path(f"/proc/{pid}").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "MCP_TEST_LOG": str(log)}
    process = subprocess.Popen(server_argv("http", str(port)), env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the MCP test server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the MCP test server did not start listening")


def run_guarded(code: str, *args: str, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter with ``args``; what it printed.

    For a check that froze the host before it was fixed (Python's ``re``
    holds the GIL while it backtracks, so no timeout inside the process
    ever fires): a child still running after ``timeout`` seconds is killed
    and the test fails, rather than hanging the suite.
    """
    try:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the host froze: the check still ran after {timeout}s")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def never_answering() -> tuple[Any, list[Any], anyio.Event]:
    """An elicitation callback for the SDK's ``ClientSession`` that never answers; the questions it was asked; an
    event set once the server took one back (cancelled it)."""
    asked: list[Any] = []  # the SDK's ElicitRequestParams
    taken_back = anyio.Event()

    async def elicit(context: Any, params: Any) -> Any:
        asked.append(params)
        try:
            await anyio.sleep_forever()
        finally:
            taken_back.set()  # the server said the question is cancelled: the client forgets it
        raise AssertionError("unreachable")

    return elicit, asked, taken_back
