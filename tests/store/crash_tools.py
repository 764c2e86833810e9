"""A toolset with a visible side effect, for the crash and approval tests (``--tools crash_tools``).

Each tool appends one line ``idempotency_key<TAB>tool<TAB>ticket`` to the file
named by ``$CRASH_EFFECTS``: the line *is* the effect, so a test counts how
often a call took effect by counting lines with its key.

Switches, read from the environment of the process running the tool:

- ``CRASH_AT=tool``: SIGKILL this process right after the effect, before the
  tool returns (a crash *during* execution).
- ``CRASH_SLOW=SECONDS``: before the effect, write ``$CRASH_EFFECTS.started``
  and wait that long, or until ``$CRASH_EFFECTS.go`` exists (a driver that
  holds its lease inside a slow tool).

``close_ticket`` and ``refund`` have a ``reconcile`` hook that looks for the
call's key in the file; ``close_ticket_by_hand`` has none, so a person must
reconcile it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.tools import Executed, NotExecuted, ToolContext, tool

EFFECTS_ENV = "CRASH_EFFECTS"
CRASH_AT_ENV = "CRASH_AT"
SLOW_ENV = "CRASH_SLOW"


def effects_path() -> Path:
    return Path(os.environ[EFFECTS_ENV])


def result_for(ticket: str) -> str:
    """What the tools return; the reconcile hook reports the same result."""
    return f"closed {ticket}"


def _take_effect(context: ToolContext, tool_name: str, ticket: str) -> str:
    path = effects_path()
    slow = os.environ.get(SLOW_ENV)
    if slow:
        Path(f"{path}.started").write_text(context.idempotency_key, encoding="utf-8")
        until, go = time.monotonic() + float(slow), Path(f"{path}.go")
        while time.monotonic() < until and not go.exists():
            time.sleep(0.05)
    with path.open("a", encoding="utf-8") as effects:
        effects.write(f"{context.idempotency_key}\t{tool_name}\t{ticket}\n")
    if os.environ.get(CRASH_AT_ENV) == "tool":
        os.kill(os.getpid(), signal.SIGKILL)
    return result_for(ticket)


def find_effect(context: ToolContext, arguments: Mapping[str, Any]) -> Executed | NotExecuted:
    """Reconcile hook: the call took effect iff its key is in the effects file."""
    path = effects_path()
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if any(line.split("\t")[0] == context.idempotency_key for line in lines):
        return Executed(result_for(str(arguments["ticket"])))
    return NotExecuted()


@tool(reconcile=find_effect, timeout=None)
def close_ticket(ticket: str, context: ToolContext) -> str:
    """Close a support ticket.

    Args:
        ticket: The ticket id, e.g. T-1.
    """
    return _take_effect(context, "close_ticket", ticket)


@tool(timeout=None)
def close_ticket_by_hand(ticket: str, context: ToolContext) -> str:
    """Close a support ticket (no reconcile hook: a person settles unknown outcomes).

    Args:
        ticket: The ticket id, e.g. T-1.
    """
    return _take_effect(context, "close_ticket_by_hand", ticket)


@tool(approval=True, reconcile=find_effect, timeout=None)
def refund(ticket: str, context: ToolContext) -> str:
    """Refund the order behind a ticket; a person must approve each call.

    Args:
        ticket: The ticket id, e.g. T-9.
    """
    return _take_effect(context, "refund", ticket)
