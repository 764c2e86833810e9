"""A power cut must not lose the intent of a side effect that already happened.

A process crash loses no commit (the WAL is in the kernel's hands), but a
power cut loses what the disk has not been told to keep. So before a
side-effecting tool starts, every write to the run store's WAL must have
been followed by an fsync of it. The test watches the real system calls of
a real run under ``strace``: the tool marks its start by opening a file,
and everything written to the WAL before that open must have been synced
before it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from tether import Agent, tool
    from tether.models.scripted import ScriptedModel, reply_calls, reply_text
    from tether.store import SQLiteStore

    db, marker = sys.argv[1], sys.argv[2]

    @tool(read_only=True)
    def lookup(key: str) -> str:
        "Look a key up."
        return key

    @tool
    def transfer(amount: int) -> str:
        "Move money."
        open(marker, "w").close()  # the side effect starts here
        return "moved"

    step = reply_calls(("c1", "lookup", '{"key": "a"}'), ("c2", "transfer", '{"amount": 5}'))
    model = ScriptedModel([step, reply_text("ok")])
    result = asyncio.run(Agent(model, [lookup, transfer], store=SQLiteStore(db)).run("go"))
    print(result.status.value)
    """
)


def test_the_intent_is_on_disk_before_the_side_effect_starts(tmp_path: Path) -> None:
    db, marker, trace = tmp_path / "runs.db", tmp_path / "effect-started", tmp_path / "trace.txt"
    done = traced(SCRIPT, db, marker, trace)
    assert done.returncode == 0 and done.stdout.strip() == "completed", done

    wal_writes, unsynced = wal_before(trace, db, marker)
    assert wal_writes > 0, "no write to the WAL was seen"
    assert not unsynced, "the WAL held writes not yet synced when the side effect started"


def traced(script: str, db: Path, marker: Path, trace: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run with ``db`` and ``marker`` under strace, its opens, writes and syncs written to ``trace``."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is missing (apt-get install strace): cannot watch the fsyncs")
    done = subprocess.run(
        [strace, "-f", "-y", "-qq", "-o", str(trace), "-e", "trace=openat,pwrite64,write,fsync,fdatasync",
         sys.executable, "-c", script, str(db), str(marker)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    return done


def wal_before(trace: Path, db: Path, marker: Path) -> tuple[int, bool]:
    """How many writes the WAL of ``db`` had before ``marker`` was opened, and whether some were not yet synced."""
    wal = re.escape(f"{db}-wal>")
    unsynced = False
    wal_writes = 0
    for line in trace.read_text().splitlines():
        if re.search(rf"\bp?write(64)?\(\d+<{wal}", line):
            unsynced, wal_writes = True, wal_writes + 1
        elif re.search(rf"\bf(data)?sync\(\d+<{wal}", line) and "= 0" in line:
            unsynced = False
        elif "openat(" in line and str(marker) in line:
            return wal_writes, unsynced
    raise AssertionError(f"{marker} was never opened")


ACCEPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tether.models.scripted import ScriptedModel, reply_text
    from tether.serve.service import RunService, open_run_store
    from tether.serve.settings import Settings
    from tether.serve.runs import Caller
    from tether.tools.context import Principal

    db, marker = sys.argv[1], sys.argv[2]
    settings = Settings(run_db=Path(db), model_factory=lambda: ScriptedModel([reply_text("ok")]))

    async def main():
        store = open_run_store(settings)
        service = RunService(settings, store, [])
        caller = Caller(Principal("u1"))
        await service.start(caller, "hello", caller.principal)
        open(marker, "w").close()  # where POST /api/runs answers 202
        await service.aclose()
        store.close()

    asyncio.run(main())
    print("accepted")
    """
)


def test_a_run_the_service_accepts_is_on_disk_before_the_202(tmp_path: Path) -> None:
    db, marker, trace = tmp_path / "runs.db", tmp_path / "answered", tmp_path / "trace.txt"
    done = traced(ACCEPT, db, marker, trace)
    assert done.returncode == 0 and done.stdout.strip() == "accepted", done
    wal_writes, unsynced = wal_before(trace, db, marker)
    assert wal_writes > 0, "no write to the WAL was seen"
    assert not unsynced, "the WAL held the new run unsynced when the service answered 202"
