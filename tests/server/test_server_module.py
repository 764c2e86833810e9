"""``python -m tickets_app``: the ticket example's service, started without tether's CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from server_harness import PYTHONPATH, SECRET, free_port, wait_listening

from tether.cli.common import EXIT_CONFIGURATION


def test_the_module_serves_the_api_and_imports_no_part_of_the_cli(tmp_path: Path, tickets_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", "PYTHONPATH": PYTHONPATH}
    command = [sys.executable, "-X", "importtime", "-m", "tickets_app", "--port", str(port),
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
    assert {"tickets_app.app", "tether.serve.service"} <= imported  # the probe sees the imports
    assert sorted(m for m in imported if m.startswith("tether.cli")) == []


def test_the_module_refuses_several_workers_on_a_sqlite_file(tmp_path: Path, tickets_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("TETHER_RUN_DB", None)
    command = [sys.executable, "-m", "tickets_app", "--workers", "2", "--tickets-db", str(tickets_path),
               "--db", str(tmp_path / "runs.db"), "--port", str(free_port())]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_CONFIGURATION, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: --workers 2 needs a run store several processes can share: --db postgresql://" in done.stderr
    assert not (tmp_path / "runs.db").exists()


def test_seed_and_index_write_the_demo_data_and_say_what_they_wrote(tmp_path: Path) -> None:
    """What ``tether tickets seed`` did; a folder that is not there is an error with its exit code, no traceback."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    db = tmp_path / "tickets.db"
    done = subprocess.run([sys.executable, "-m", "tickets_app", "seed", "--db", str(db)],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"seeded {db}: users alice, bob (customers), carol (agent), dave (admin)" in done.stdout

    from tickets_app.db import TicketsDB

    with TicketsDB(db) as tickets:
        assert tickets.get_user("user-alice") is not None

    missing = tmp_path / "no-such-folder"
    command = [sys.executable, "-m", "tickets_app", "index", str(missing), "--index", str(tmp_path / "kb.npz")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert not (tmp_path / "kb.npz").exists()
