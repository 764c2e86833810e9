"""What tether costs over a hand-written loop on the same HTTP client.

    python bench/run.py [--quick] [--json]

Every number is a ratio measured in this run: machines are noisy, so
absolute times mean little and are shown only for orientation. The fake
model server runs as a separate process, so its CPU never counts as the
client's. Printed:

- per-run wall and CPU, tether / raw loop: one run is two round trips (the
  model asks ``multiply(248, 15)``, then answers with the result), repeated
  sequentially at zero server latency. Tether and raw batches alternate and
  the medians over batches are compared. Target ≤ 1.3x.
- 500 concurrent runs at 200 ms server latency, wall, tether / raw loop
  (ideal ≈ 0.4 s for both). Target ≤ 1.2x.
- durable per-run wall and CPU, tether / raw loop: the same runs by an
  agent with ``store=SQLiteStore(...)`` (a checkpoint after every event),
  in the same alternating batches. Target ≤ 2x. Also durable / in-memory
  tether, for orientation. Durable batches alternate with the other two.
- interpreter start with ``import tether`` (and with what ``tether run``
  needs) against ``python -c pass``: the difference in ms and the ratio.
- a 200-step durable run (and the same in memory): median step time of the
  last 20 tool steps over the first 20. Target ≤ 1.2x; on a miss the calls
  that grew are profiled and listed. See ``bench/durable.py``.

Tether runs "in memory, every gate on": a default ``Agent`` over
``OpenAIChatModel`` with the ``calc`` toolset; "durable" is the same agent
with a store in a temporary directory, one database for all its runs. The
raw loop is the least a careful user would write on the same
``aiohttp.ClientSession``. All keep one client for all runs, as a real
caller would. The exit status is always 0: a benchmark informs, it does not
pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from durable import bench_long, close_agent, durable_agent, print_long, verdict

from tether.drivers.local.runner import Agent
from tether.models.openai_chat import OpenAIChatModel
from tether.toolsets import calc, load_toolset

PROMPT = "What is 248 times 15?"
ANSWER = "3720"
BANNER = "listening on "

CONCURRENT = 500
SLOW_LATENCY = 0.2  # seconds: 2 round trips make the ideal concurrent wall 0.4 s

RunOnce = Callable[[], Awaitable[str]]
Drive = Callable[[RunOnce, int], Awaitable[None]]


@contextlib.contextmanager
def fake_server(latency: float) -> Iterator[str]:
    """A ``multiply`` fake server in its own process; yields its base URL."""
    command = [sys.executable, "-m", "tether.testing.fake_server", "--port", "0"]
    command += ["--scenario", "multiply", "--latency", str(latency)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith(BANNER):
            raise RuntimeError(f"fake server did not start (exit {process.poll()}): {line!r}")
        yield line.removeprefix(BANNER)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def tether_runner(agent: Agent) -> RunOnce:
    async def once() -> str:
        result = await agent.run(PROMPT)
        return result.output or ""

    return once


def raw_runner(session: aiohttp.ClientSession, base_url: str) -> RunOnce:
    """Post, read the tool call, call the function, post again, read the answer."""
    url = f"{base_url}/chat/completions"
    tools = [t.spec() for t in calc.TOOLS]
    functions = {t.name: t.function for t in calc.TOOLS}

    async def once() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        body = {"model": "fake", "messages": messages, "tools": tools}
        async with session.post(url, json=body) as response:
            message = (await response.json())["choices"][0]["message"]
        messages.append(message)
        for call in message["tool_calls"]:
            function = call["function"]
            result = await functions[function["name"]](**json.loads(function["arguments"]))
            content = json.dumps({"ok": True, "result": result})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        async with session.post(url, json=body) as response:
            return str((await response.json())["choices"][0]["message"]["content"])

    return once


async def timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall and process-CPU seconds of ``await work()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return time.perf_counter() - wall, time.process_time() - cpu


async def sequential(once: RunOnce, n: int) -> None:
    for _ in range(n):
        await once()


async def concurrent(once: RunOnce, n: int) -> None:
    await asyncio.gather(*(once() for _ in range(n)))


async def compare(runners: dict[str, RunOnce], drive: Drive, n: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per batch of ``n`` runs, over ``rounds`` alternating batches."""
    for name, once in runners.items():
        output = await once()  # warm-up; also: never time a path that gives a wrong answer
        if ANSWER not in output:
            raise RuntimeError(f"{name} answered {output!r}, expected {ANSWER}")
        await drive(once, n)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    order = list(runners)
    for _ in range(rounds):
        for name in order:
            samples[name].append(await timed(functools.partial(drive, runners[name], n)))
        order.reverse()  # neither side always goes first
    return {
        name: {
            "wall": statistics.median(s[0] for s in pairs),
            "cpu": statistics.median(s[1] for s in pairs),
        }
        for name, pairs in samples.items()
    }


async def bench_runs(
    base_url: str, drive: Drive, n: int, rounds: int, durable_db: Path | None = None
) -> dict[str, dict[str, float]]:
    """Tether against the raw loop; with ``durable_db``, also a durable agent storing runs there."""
    agents = {"tether": Agent(fake_model(base_url), load_toolset("calc"))}
    if durable_db is not None:
        agents["durable"] = durable_agent(fake_model(base_url), durable_db)
    # Unlimited connections like tether's own session, or 500 runs would queue behind 100.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer x"}) as session:
        try:
            runners = {name: tether_runner(agent) for name, agent in agents.items()}
            runners["raw"] = raw_runner(session, base_url)
            return await compare(runners, drive, n, rounds)
        finally:
            for agent in agents.values():
                await close_agent(agent)


def fake_model(base_url: str) -> OpenAIChatModel:
    return OpenAIChatModel("fake", base_url=base_url, api_key="x")


IMPORTS = {
    "import tether": "import tether",
    "import the local driver + models.openai_chat": "import tether.drivers.local.runner, tether.models.openai_chat",
}


def bench_imports(repeats: int) -> dict[str, dict[str, float]]:
    """Median wall seconds of ``python -c CODE`` in fresh processes, interleaved with ``-c pass``."""
    codes = {"bare": "pass", **IMPORTS}
    times: dict[str, list[float]] = {label: [] for label in codes}
    with tempfile.TemporaryDirectory() as cache:
        # An installed package has its .pyc files; this environment may forbid writing them
        # (PYTHONDONTWRITEBYTECODE), so compile once into a private cache, never into src/.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for round_ in range(repeats + 1):  # round 0 fills the cache and is not counted
            for label, code in codes.items():
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], check=True, env=env)
                if round_:
                    times[label].append(time.perf_counter() - start)
    bare = statistics.median(times.pop("bare"))
    out = {"bare": {"seconds": bare}}
    for label, samples in times.items():
        seconds = statistics.median(samples)
        out[label] = {"seconds": seconds, "extra_ms": (seconds - bare) * 1000, "ratio": seconds / bare}
    return out


class Row(NamedTuple):
    label: str
    compared: str  # "a/b"
    target: float | None  # None: for orientation only
    a: tuple[str, float]  # (side, seconds)
    b: tuple[str, float]
    unit: str = "ms"

    @property
    def ratio(self) -> float:
        return self.a[1] / self.b[1]

    def line(self) -> str:
        scale = 1e3 if self.unit == "ms" else 1
        judged = "(for orientation)" if self.target is None else verdict(self.ratio, self.target)
        (a, a_seconds), (b, b_seconds) = self.a, self.b
        return (
            f"  {self.label:20s} {self.compared:17s} = {self.ratio:.2f}x  {judged:24s}"
            f"  {a} {a_seconds * scale:.3f} {self.unit}, {b} {b_seconds * scale:.3f} {self.unit}"
        )


def table(per_run: dict[str, dict[str, float]], conc: dict[str, dict[str, float]]) -> dict[str, Row]:
    t, d, r = per_run["tether"], per_run["durable"], per_run["raw"]
    walls = ("tether", conc["tether"]["wall"]), ("raw", conc["raw"]["wall"])
    return {
        "per_run_wall": Row("per-run wall", "tether/raw", 1.3, ("tether", t["wall"]), ("raw", r["wall"])),
        "per_run_cpu": Row("per-run CPU", "tether/raw", 1.3, ("tether", t["cpu"]), ("raw", r["cpu"])),
        "concurrent_wall": Row(f"{CONCURRENT} concurrent wall", "tether/raw", 1.2, *walls, unit="s"),
        "durable_wall": Row("durable per-run wall", "tether/raw", 2.0, ("durable", d["wall"]), ("raw", r["wall"])),
        "durable_cpu": Row("durable per-run CPU", "tether/raw", 2.0, ("durable", d["cpu"]), ("raw", r["cpu"])),
        "durable_vs_memory_wall": Row(
            "durable per-run wall", "durable/in-memory", None, ("durable", d["wall"]), ("in-memory", t["wall"])
        ),
        "durable_vs_memory_cpu": Row(
            "durable per-run CPU", "durable/in-memory", None, ("durable", d["cpu"]), ("in-memory", t["cpu"])
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs: a smoke test, noisier numbers")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    runs, rounds, gathers, repeats, long_repeats = (60, 3, 1, 5, 2) if args.quick else (300, 6, 5, 11, 5)
    batch = runs // rounds

    with tempfile.TemporaryDirectory() as tmp:
        with fake_server(0.0) as fast_url, fake_server(SLOW_LATENCY) as slow_url:
            seq = asyncio.run(bench_runs(fast_url, sequential, batch, rounds, durable_db=Path(tmp) / "bench.db"))
            conc = asyncio.run(bench_runs(slow_url, concurrent, CONCURRENT, gathers))
        imports = bench_imports(repeats)
        long = bench_long(Path(tmp), long_repeats)

        # Sequential batches become per-run numbers; a concurrent batch's wall is the number itself.
        per_run = {side: {k: v / batch for k, v in seq[side].items()} for side in seq}
        rows = table(per_run, conc)
        print(f"{runs} sequential runs per side in {rounds} alternating batches, medians;", end=" ")
        print(f"{gathers} alternating gathers of {CONCURRENT} runs at {SLOW_LATENCY}s latency, median")
        print("durable: the same sequential runs with store=SQLiteStore(...), a checkpoint after every event")
        print("\n".join(row.line() for row in rows.values()))
        bare_ms = imports["bare"]["seconds"] * 1000
        print(f"interpreter start, median of {repeats} fresh processes (python -c pass: {bare_ms:.0f} ms)")
        for label in IMPORTS:
            cost = imports[label]
            print(f"  {label:42s} +{cost['extra_ms']:4.0f} ms = {cost['ratio']:.2f}x bare start")
        print_long(long, long_repeats, Path(tmp))  # profiles into tmp on a miss
    if args.json:
        ratios = {key: row.ratio for key, row in rows.items()}
        numbers = {"ratios": ratios, "per_run": per_run, "concurrent": conc, "imports": imports, "long_run": long}
        print(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
