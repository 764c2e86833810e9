"""Durable mode: what checkpointing every event to a SQLiteStore costs.

    python bench/durable.py [--quick] [--profile]     # the 200-step run, then the fsynced intents

``bench/run.py`` uses this module for two things:

- ``durable_agent``: the same agent as the in-memory one, plus
  ``store=SQLiteStore(...)`` (every gate on, a checkpoint after every event).
  ``run.py`` times it against the raw loop in the same alternating batches.
- ``bench_long``: one run of 200 steps, 199 of them asking for one tool call,
  from an in-process ``ScriptedModel`` (no HTTP: this is about the store's
  per-step cost). Each step is timed from one ``step_started`` event to the
  next, and the median of the last 20 tool steps (180-199) is compared with
  the median of the first 20 after the first (2-21). The final step only
  answers (two checkpoints, not four), so it is left out like step 1. A
  store that costs the same per step at step 200 as at step 1 gives ≈ 1.0x.

When a growth ratio misses its target, ``growth_profile`` profiles one more
run, steps 2-21 and 180-199 separately, and lists the calls whose cumulative
time grew most: the function that grows, not just the fact.

``bench_intents`` prices the one fsync the store makes: the intent of a
side-effecting call commits with ``synchronous=FULL`` so that a power cut
cannot lose it. Runs of ``INTENT_STEPS`` steps, each one side-effecting
call, are timed with that fsync and without it
(``SQLiteStore(durable_intents=False)``), alternating; the ratio is the
median per-call time with / without, and the difference is what one
side-effecting call pays for surviving a power cut. Read-only calls and
every other commit are unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tether.core.budget import Budget
from tether.core.events import RUN_FINISHED, STEP_STARTED, RunEvent
from tether.core.messages import ModelReply
from tether.drivers.local.runner import Agent
from tether.models.base import Model
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.store import RunStore, SQLiteStore
from tether.tools import tool
from tether.toolsets import load_toolset

LONG_STEPS = 200
WINDOW = 20
FIRST = slice(1, 1 + WINDOW)  # steps 2-21 (index 0 is step 1)
LAST = slice(LONG_STEPS - 1 - WINDOW, LONG_STEPS - 1)  # steps 180-199, the last 20 that call a tool
GROWTH_TARGET = 1.2
LONG_ANSWER = "done"

StoreFactory = Callable[[], RunStore | None]


def durable_agent(model: Model, path: Path, budget: Budget | None = None) -> Agent:
    """A default agent over the ``calc`` toolset that checkpoints every event to ``path``."""
    return Agent(model, load_toolset("calc"), budget=budget, store=SQLiteStore(path))


async def close_agent(agent: Agent) -> None:
    await agent.aclose()
    if agent.store is not None:
        agent.store.close()


def long_script() -> list[ModelReply]:
    # A new call every step: the loop gate refuses one call asked for three times in a row.
    steps = [reply_calls((f"call{i}", "multiply", json.dumps({"a": i, "b": 2}))) for i in range(1, LONG_STEPS)]
    return [*steps, reply_text(LONG_ANSWER)]


async def long_run(store: RunStore | None, on_step: Callable[[int], None] | None = None) -> list[float]:
    """Seconds per step of one 200-step run; ``on_step(n)`` is called as step n starts (n = 201: finished)."""
    budget = Budget(max_steps=LONG_STEPS, max_tool_calls=1000)
    agent = Agent(ScriptedModel(long_script()), load_toolset("calc"), budget=budget, store=store)
    starts: list[float] = []

    def on_event(event: RunEvent) -> None:
        if event.kind in (STEP_STARTED, RUN_FINISHED):
            starts.append(time.perf_counter())
            if on_step is not None:
                on_step(len(starts))

    result = await agent.run("Double every number from 1 to 199, one at a time.", on_event=on_event)
    if result.output != LONG_ANSWER or len(starts) != LONG_STEPS + 1:
        raise RuntimeError(f"the {LONG_STEPS}-step run ended {result.status.value}: {result.reason}")
    return [end - start for start, end in itertools.pairwise(starts)]


def bench_long(tmpdir: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Median step seconds in the first and the last window, pooled over ``repeats`` runs per side."""
    store = SQLiteStore(tmpdir / "long.db")
    sides: dict[str, StoreFactory] = {"durable": lambda: store, "in memory": lambda: None}
    windows: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in sides}
    try:
        for factory in sides.values():  # warm-up, not counted
            asyncio.run(long_run(factory()))
        for _ in range(repeats):
            for name, factory in sides.items():
                steps = asyncio.run(long_run(factory()))
                windows[name][0].extend(steps[FIRST])
                windows[name][1].extend(steps[LAST])
    finally:
        store.close()
    out = {}
    for name, (first, last) in windows.items():
        f, la = statistics.median(first), statistics.median(last)
        out[name] = {"first": f, "last": la, "ratio": la / f}
    return out


def growth_profile(store: RunStore | None, top: int = 8) -> list[str]:
    """Lines naming the calls whose cumulative time grew most from steps 2-21 to steps 180-199."""
    first, last = cProfile.Profile(), cProfile.Profile()
    switches = {
        FIRST.start + 1: first.enable,
        FIRST.stop + 1: first.disable,
        LAST.start + 1: last.enable,
        LAST.stop + 1: last.disable,
    }

    def on_step(n: int) -> None:
        if n in switches:
            switches[n]()

    asyncio.run(long_run(store, on_step))
    before, after = _cumulative(first), _cumulative(last)
    growth = sorted(after, key=lambda k: after[k][1] - before.get(k, (0, 0.0))[1], reverse=True)
    shown = growth[:top] + [k for k in growth[top:] if "sqlite3" in k]  # the SQL itself, grown or not
    lines = []
    for key in shown:
        (calls_before, ms_before), (calls_after, ms_after) = before.get(key, (0, 0.0)), after[key]
        lines.append(
            f"    {key:52s} {ms_before:7.1f} ms -> {ms_after:7.1f} ms   calls {calls_before:6d} -> {calls_after:6d}"
        )
    return lines


def _cumulative(profile: cProfile.Profile) -> dict[str, tuple[int, float]]:
    """Calls and cumulative ms of each tether function and sqlite3 method in ``profile``."""
    out: dict[str, tuple[int, float]] = {}
    for (path, line, name), (_, calls_, _, cumulative, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if "/tether/" in path:
            key = f"{path.rpartition('/tether/')[2]}:{line} {name}"
        elif path == "~" and "sqlite3" in name:
            key = name
        else:
            continue
        out[key] = (calls_, cumulative * 1000)
    return out


def verdict(ratio: float, target: float) -> str:
    return f"(target ≤{target}x: {'met' if ratio <= target else 'NOT met'})"


def print_long(long: dict[str, dict[str, float]], repeats: int, tmpdir: Path, profile: bool = False) -> None:
    print(
        f"{LONG_STEPS}-step run (a tool call per step, then the answer), median step time,"
        f" steps {LAST.start + 1}-{LAST.stop} / steps {FIRST.start + 1}-{FIRST.stop}, {repeats} runs per side"
    )
    for name, numbers in long.items():
        ratio = numbers["ratio"]
        print(
            f"  {name + ' last/first':27s}= {ratio:.2f}x  {verdict(ratio, GROWTH_TARGET):24s}"
            f"  first {numbers['first'] * 1e3:.3f} ms, last {numbers['last'] * 1e3:.3f} ms"
        )
    for name, numbers in long.items():
        if profile or numbers["ratio"] > GROWTH_TARGET:
            store = SQLiteStore(tmpdir / "profile.db") if name == "durable" else None
            try:
                lines = growth_profile(store)
            finally:
                if store is not None:
                    store.close()
            print(f"  {name}: calls that grew most (cProfile, cumulative over the {WINDOW} steps, first -> last)")
            print("\n".join(lines))


INTENT_STEPS = 40


@tool
def note(n: int) -> int:
    """A side-effecting call (not marked read_only) that does nothing: only the store's cost is left."""
    return n


async def intent_run(store: RunStore) -> list[float]:
    """Seconds per step of one run whose every step but the last makes one side-effecting call."""
    script = [reply_calls((f"call{i}", "note", json.dumps({"n": i}))) for i in range(1, INTENT_STEPS)]
    budget = Budget(max_steps=INTENT_STEPS, max_tool_calls=1000)
    agent = Agent(ScriptedModel([*script, reply_text(LONG_ANSWER)]), [note], budget=budget, store=store)
    starts: list[float] = []

    def on_event(event: RunEvent) -> None:
        if event.kind in (STEP_STARTED, RUN_FINISHED):
            starts.append(time.perf_counter())

    result = await agent.run("Note every number.", on_event=on_event)
    if result.output != LONG_ANSWER:
        raise RuntimeError(f"the intent run ended {result.status.value}: {result.reason}")
    return [end - start for start, end in itertools.pairwise(starts)][1:-1]  # the tool steps, first left out


def bench_intents(tmpdir: Path, repeats: int) -> dict[str, float]:
    """Median seconds per side-effecting step with the intent fsynced and without, and their ratio."""
    stores = {
        "fsynced": SQLiteStore(tmpdir / "intents-fsynced.db"),
        "not fsynced": SQLiteStore(tmpdir / "intents-plain.db", durable_intents=False),
    }
    steps: dict[str, list[float]] = {name: [] for name in stores}
    try:
        for store in stores.values():  # warm-up, not counted
            asyncio.run(intent_run(store))
        for _ in range(repeats):
            for name, store in stores.items():
                steps[name].extend(asyncio.run(intent_run(store)))
    finally:
        for store in stores.values():
            store.close()
    durable, plain = statistics.median(steps["fsynced"]), statistics.median(steps["not fsynced"])
    return {"fsynced": durable, "not fsynced": plain, "ratio": durable / plain}


def print_intents(numbers: dict[str, float], repeats: int) -> None:
    print(
        f"side-effecting call, intent fsynced / not fsynced, median step time over {repeats} runs"
        f" of {INTENT_STEPS - 2} calls: {numbers['ratio']:.2f}x"
        f"  ({numbers['fsynced'] * 1e3:.3f} ms vs {numbers['not fsynced'] * 1e3:.3f} ms:"
        f" {(numbers['fsynced'] - numbers['not fsynced']) * 1e3:.3f} ms per call for surviving a power cut)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs: a smoke test, noisier numbers")
    parser.add_argument("--profile", action="store_true", help="profile the growth even when the target is met")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        print_long(bench_long(Path(tmp), repeats), repeats, Path(tmp), args.profile)
        print_intents(bench_intents(Path(tmp), repeats), repeats)


if __name__ == "__main__":
    main()
