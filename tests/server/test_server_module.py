"""``python -m tether.server``: the service as ``tether serve`` starts it, without the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from server_harness import SECRET, free_port, wait_listening

from tether.cli.common import EXIT_CONFIGURATION
from tether.cli.serve import AGENT_ONLY, serve
from tether.server.launch import parser

SOURCE = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's tether, whatever is installed


def test_the_module_serves_the_api_and_imports_no_part_of_the_cli(tmp_path: Path, tickets_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", "PYTHONPATH": SOURCE}
    command = [sys.executable, "-X", "importtime", "-m", "tether.server", "--port", str(port),
               "--tickets-db", str(tickets_path), "--db", str(tmp_path / "runs.db")]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_listening(process, port), "the service did not start"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=30) as response:
            assert response.status == 200
    finally:
        process.terminate()
        _, imports = process.communicate(timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip() for line in imports.splitlines() if line.startswith("import time:")}
    assert "tether.server.app" in imported  # the probe sees the imports
    assert sorted(m for m in imported if m.startswith("tether.cli")) == []


def test_the_module_refuses_several_workers_on_a_sqlite_file_as_tether_serve_does(
    tmp_path: Path, tickets_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    env.pop("TETHER_RUN_DB", None)
    command = [sys.executable, "-m", "tether.server", "--workers", "2", "--tickets-db", str(tickets_path),
               "--db", str(tmp_path / "runs.db"), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_CONFIGURATION, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: --workers 2 needs a run store several processes can share: --db postgresql://" in done.stderr
    assert not (tmp_path / "runs.db").exists()


def test_the_module_takes_the_options_tether_serve_takes() -> None:
    """Those of the ticket demo: a target and --auth are for a served agent (``tether.serve``)."""
    from_cli = {flag for option in serve.params if option.name not in AGENT_ONLY for flag in option.opts}
    from_module = {flag for action in parser()._actions for flag in action.option_strings} - {"-h", "--help"}

    assert from_module == from_cli
