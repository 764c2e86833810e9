"""Does a durable run cost more in a big store? Run ids in creation order against random ones.

    python bench/store_size.py [--runs 20000] [--batch 300] [--rounds 6]

A SQLite store's tables are b-trees keyed by run id (the runs, their
messages, events and ledger rows). tether's run ids are version-7 UUIDs
(``tether.drivers.ids``): time-ordered, so each new run's rows go to the end
of those trees, on pages the previous run left in the cache. The baseline,
measured in the same process, is the random version-4 ids tether made
before: each run's rows land on pages anywhere in the file, so the cost per
run grows with the file.

Two stores, one per id scheme, each filled with ``--runs`` runs (one
side-effecting ``multiply`` call and an answer each, from an in-process
``ScriptedModel``: this is about the store, not the network), are timed at
the start (after a short warm-up) and once full, in alternating batches of
``--batch`` runs, CPU and wall per run. Printed: each scheme's cost when
full over its cost when empty, and time-ordered over random when full,
medians over rounds with their spread. A benchmark informs, it does not pass
or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tether.drivers.local.runner as runner
from tether import Agent, SQLiteStore, tool
from tether.drivers.ids import new_id
from tether.models.scripted import ScriptedModel, reply_calls, reply_text

PROMPT = "What is 248 times 15?"


def random_id() -> str:
    """The ids tether made before: a version-4 UUID's hex, random throughout."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


SCHEMES: dict[str, Callable[[], str]] = {"random (v4)": random_id, "time-ordered (v7)": new_id}


async def multiply(a: int, b: int) -> int:
    return a * b


class Replies(ScriptedModel):
    """The call, then the answer, for as many runs as asked: the script is made again as it runs out."""

    def __init__(self) -> None:
        super().__init__([])

    async def complete(self, request: Any) -> Any:
        last = request.messages[-1]
        if last.role == "tool":
            return reply_text("It is 3720.")
        return reply_calls(("call_1", "multiply", '{"a": 248, "b": 15}'))


def agent(path: Path) -> Agent[Any, Any]:
    return Agent(Replies(), [tool(read_only=False)(multiply)], store=SQLiteStore(path))


async def batch(made: Agent[Any, Any], scheme: Callable[[], str], runs: int) -> tuple[float, float]:
    """CPU and wall per run of ``runs`` runs whose ids ``scheme`` makes."""
    runner.new_id = scheme  # the agent's runs take their ids from here
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(runs):
        result = await made.run(PROMPT)
        assert result.output == "It is 3720.", result.output
    return (time.process_time() - cpu) / runs, (time.perf_counter() - wall) / runs


async def timed(agents: dict[str, Agent[Any, Any]], runs: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in agents}
    for round_ in range(rounds):
        order = list(agents) if round_ % 2 == 0 else list(reversed(agents))
        for name in order:
            figures[name].append(await batch(agents[name], SCHEMES[name], runs))
    return figures


def median_ratio(tops: list[tuple[float, float]], bottoms: list[tuple[float, float]], i: int) -> str:
    ratios = [top[i] / bottom[i] for top, bottom in zip(tops, bottoms, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs in each store once full")
    parser.add_argument("--batch", type=int, default=300, help="runs per timed batch")
    parser.add_argument("--rounds", type=int, default=6)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        agents = {name: agent(Path(folder) / f"{i}.db") for i, name in enumerate(SCHEMES)}
        for name, made in agents.items():
            await batch(made, SCHEMES[name], 50)  # warm-up
        empty = await timed(agents, options.batch, options.rounds)
        for name, made in agents.items():
            started = time.perf_counter()
            await batch(made, SCHEMES[name], options.runs)
            print(f"filled {name}: {options.runs} runs in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        full = await timed(agents, options.batch, options.rounds)
        sizes = {name: os.path.getsize(Path(folder) / f"{i}.db") for i, name in enumerate(SCHEMES)}
    print(f"per durable run, {options.rounds} alternating rounds of {options.batch} runs; median (min-max):")
    print(f"  {'run ids':<20} {'full/empty cpu':>22} {'full/empty wall':>22} {'file':>8}")
    for name in SCHEMES:
        cpu, wall = median_ratio(full[name], empty[name], 0), median_ratio(full[name], empty[name], 1)
        print(f"  {name:<20} {cpu:>22} {wall:>22} {sizes[name] / 1e6:>6.0f} MB")
    for when, figures in (("empty", empty), ("full", full)):
        ordered, random = figures["time-ordered (v7)"], figures["random (v4)"]
        print(
            f"  {when}, time-ordered / random: cpu {median_ratio(ordered, random, 0)},"
            f" wall {median_ratio(ordered, random, 1)}"
        )
    print(f"  (full: {options.runs + 50 + 2 * options.rounds * options.batch} runs in each store)")


if __name__ == "__main__":
    asyncio.run(main())
