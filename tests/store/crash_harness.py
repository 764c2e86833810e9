"""``tether`` exactly as installed, except that it SIGKILLs itself at one run event.

    CRASH_AT=intent_recorded python crash_harness.py run "..." --tools crash_tools --db run.db ...

The arguments are the ``tether`` command's own. ``tether run`` passes its
renderer as the driver's ``on_event``; the driver checkpoints each event
before ``on_event`` hears of it, so killing inside the renderer dies right
after the event named by ``$CRASH_AT`` was committed, and before anything
that follows it.

- ``CRASH_AT=tool`` names no event: ``crash_tools`` itself dies inside the
  tool, right after the effect.
- ``CRASH_AT=record_outcome`` dies as soon as the checkpoint carrying a
  side effect's outcome in the ledger is committed, before any other.
- ``CRASH_LEASE_SECONDS`` shortens the run's lease (default 30 s), standing
  in for a tool that runs longer than the lease.

Everything ``tether resume`` needs (the stored setup: model, base URL,
toolsets) is recorded by the real ``tether run`` code.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from tether.cli import render
from tether.cli import run as cli_run
from tether.cli.main import main
from tether.store import SQLiteStore, SQLStore

CRASH_AT = os.environ.get("CRASH_AT", "")


class CrashingRenderer(render.Renderer):
    def __call__(self, event: Any) -> None:
        super().__call__(event)
        if event.kind == CRASH_AT:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


cli_run.Renderer = CrashingRenderer  # type: ignore[misc]  # what `tether run` renders with

if CRASH_AT == "record_outcome":
    # Right after the checkpoint carrying a side effect's outcome commits, before any checkpoint that follows it.
    commit = SQLStore.checkpoint

    def checkpoint(self: SQLStore, state: Any, events: Any = (), outcomes: Any = (), **kwargs: Any) -> None:
        commit(self, state, events, outcomes, **kwargs)
        if any(not call.read_only for call, _ in outcomes):
            os.kill(os.getpid(), signal.SIGKILL)

    SQLStore.checkpoint = checkpoint  # type: ignore[method-assign]

if lease := os.environ.get("CRASH_LEASE_SECONDS"):

    def open_store(db: str | None, log_content: bool = False) -> SQLStore:
        return SQLiteStore(db, log_content=log_content, lease_seconds=float(lease))

    cli_run.open_store = open_store

if __name__ == "__main__":
    sys.argv = ["tether", *sys.argv[1:]]
    main()
