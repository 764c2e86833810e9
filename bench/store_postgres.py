"""The PostgreSQL run store against the SQLite one, in the same run on the same machine.

    python bench/store_postgres.py [--quick] [--json]

Starts a throwaway PostgreSQL 15 (``tests/store/postgres_server.py``: Debian's
``postgresql-15`` on a free loopback port, removed afterwards) and measures,
with an in-process ``ScriptedModel`` (no HTTP: this is about the store):

- **per run**: runs of model → one side-effecting call → model, every gate
  on, each run a checkpoint per event plus the intent (fsynced on both
  stores: ``synchronous=FULL`` on SQLite, ``synchronous_commit=on`` on
  Postgres). SQLite and Postgres batches alternate; the ratio is the median
  per-run wall time Postgres / SQLite.
- **per step**: one run of ``STEPS`` steps, each a read-only call, on each
  store; each step is timed from one ``step_started`` to the next, and the
  median of steps 91-99 over the median of steps 2-10 says whether a step
  costs the same at step 100 as at step 1 (≈ 1.0x: the transcript and the
  event log are appended, never rewritten).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))

from postgres_server import start

from tether.core.budget import Budget
from tether.core.events import RunEvent
from tether.drivers.local.runner import Agent
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import open_store
from tether.tools import tool

STEPS = 100


@tool(read_only=True)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(read_only=False)
def transfer(amount: int) -> str:
    """Move money (a side effect)."""
    return f"moved {amount}"


async def one_run(store: Any) -> float:
    model = ScriptedModel([reply_calls(("c1", "transfer", '{"amount": 5}')), reply_text("done")])
    began = time.perf_counter()
    result = await Agent(model, [transfer], store=store).run("move 5")
    assert result.status.value == "completed", result
    return time.perf_counter() - began


async def per_run(stores: dict[str, Any], batches: int, size: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in stores}
    for store in stores.values():  # warm up: first connections, first pages
        await one_run(store)
    for _ in range(batches):
        for name, store in stores.items():
            times[name] += [await one_run(store) for _ in range(size)]
    return {name: statistics.median(values) for name, values in times.items()}


async def per_step(store: Any) -> tuple[float, float]:
    replies = [reply_calls((f"c{i}", "lookup", json.dumps({"key": str(i)}))) for i in range(1, STEPS)]
    model = ScriptedModel([*replies, reply_text("done")])
    starts: list[float] = []

    def heard(event: RunEvent) -> None:
        if event.kind == "step_started":
            starts.append(time.perf_counter())

    agent = Agent(model, [lookup], store=store, budget=Budget(max_steps=STEPS, max_tool_calls=1000))
    result = await agent.run("look up every key", on_event=heard)
    assert result.status.value == "completed", result
    steps = [b - a for a, b in itertools.pairwise(starts)]  # steps[i]: step i+1's duration
    return statistics.median(steps[1:10]), statistics.median(steps[-9:])


async def main_async(quick: bool) -> dict[str, Any]:
    server = start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stores = {"sqlite": open_store(str(Path(tmp) / "bench.db")), "postgres": open_store(server.url())}
            try:
                run = await per_run(stores, batches=3 if quick else 6, size=5 if quick else 15)
                steps = {name: await per_step(store) for name, store in stores.items()}
            finally:
                for store in stores.values():
                    store.close()
    finally:
        server.stop()
    return {
        "per_run_ms": {name: round(value * 1000, 2) for name, value in run.items()},
        "per_run_ratio_postgres_over_sqlite": round(run["postgres"] / run["sqlite"], 2),
        "per_step_ms_early_late": {name: [round(a * 1000, 2), round(b * 1000, 2)] for name, (a, b) in steps.items()},
        "per_step_growth": {name: round(b / a, 2) for name, (a, b) in steps.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs: a smoke test, noisier")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    result = asyncio.run(main_async(args.quick))
    if args.json:
        print(json.dumps(result))
        return
    run = result["per_run_ms"]
    print(f"per run (model, side-effecting call, model): sqlite {run['sqlite']} ms, postgres {run['postgres']} ms")
    print(f"  postgres / sqlite: {result['per_run_ratio_postgres_over_sqlite']}x")
    for name, (early, late) in result["per_step_ms_early_late"].items():
        growth = result["per_step_growth"][name]
        print(f"per step, {name}: steps 2-10 {early} ms, steps 91-99 {late} ms: {growth}x")


if __name__ == "__main__":
    main()
