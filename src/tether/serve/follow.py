"""Following a served run for a protocol adapter (A2A, MCP): its view each time its status changes, until it settles.

A run *settles* when it leaves the statuses a driver moves through (``ready``,
``awaiting_model``, ``awaiting_tools``): it has finished, or it waits for a
person (an approval, an unknown outcome). A run driven here is followed by
its live events; one driven by another process sharing the store, by
reading the store every ``POLL_SECONDS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from tether.core.machine import Status
from tether.serve.runs import WAITING_FOR_A_PERSON, AgentRuns, Caller
from tether.serve.service import POLL_SECONDS, StreamEvent

MOVING = frozenset({Status.READY.value, Status.AWAITING_MODEL.value, Status.AWAITING_TOOLS.value})


async def changes(
    runs: AgentRuns, run_id: str, caller: Caller, *, past_a_person: bool = False
) -> AsyncIterator[dict[str, Any]]:
    """The run's view (``AgentRuns.view``) now, then each time its status changes; the last one is settled.

    ``past_a_person``: a run waiting for a person now is followed on once someone has decided (until it
    finishes, or waits again). A run that is not ``caller``'s is the 404 ``Problem`` a missing one is.
    """
    last: str | None = None
    moved = False
    while True:
        live = runs.live.get(run_id)
        queue: asyncio.Queue[StreamEvent | None] | None = None
        if live is not None:  # subscribed before reading the store: no event between the two is missed
            queue = asyncio.Queue()
            live.followers.add(queue)
        try:
            view = await runs.view(run_id, caller)
            if view["status"] != last:
                last = view["status"]
                yield view
            if past_a_person and not moved and view["status"] in WAITING_FOR_A_PERSON:
                await asyncio.sleep(POLL_SECONDS)  # paused, so no events: the store says when it moves
                continue
            moved = True
            if view["status"] not in MOVING:
                if queue is not None and runs.live.get(run_id) is live:
                    # Its drive ends just after the run pauses: waited for, so that a decision taken next is
                    # not refused as one on a run still running.
                    while await queue.get() is not None:
                        pass
                return
            if queue is None:
                await asyncio.sleep(POLL_SECONDS)
                continue
            while (item := await queue.get()) is not None and item.seq is None:
                pass  # streamed text changes no status; a stored event may, and the end of the drive does
        finally:
            if live is not None and queue is not None:
                live.followers.discard(queue)


async def settled(runs: AgentRuns, run_id: str, caller: Caller) -> dict[str, Any]:
    """The run's view once it has finished or waits for a person."""
    view: dict[str, Any] = {}
    async for seen in changes(runs, run_id, caller):
        view = seen
    return view
