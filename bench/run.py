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
- interpreter start with ``import tether`` (and with what ``tether run``
  needs) against ``python -c pass``: the difference in ms and the ratio.

Tether runs "in memory, every gate on": a default ``Agent`` over
``OpenAIChatModel`` with the ``calc`` toolset. The raw loop is the least a
careful user would write on the same ``aiohttp.ClientSession``. Both keep
one client for all runs, as a real caller would. The exit status is always
0: a benchmark informs, it does not pass or fail.
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
from typing import Any

import aiohttp

from tether.models.openai_chat import OpenAIChatModel
from tether.runner import Agent
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


async def bench_runs(base_url: str, drive: Drive, n: int, rounds: int) -> dict[str, dict[str, float]]:
    agent = Agent(OpenAIChatModel("fake", base_url=base_url, api_key="x"), load_toolset("calc"))
    # Unlimited connections like tether's own session, or 500 runs would queue behind 100.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer x"}) as session:
        try:
            runners = {"tether": tether_runner(agent), "raw": raw_runner(session, base_url)}
            return await compare(runners, drive, n, rounds)
        finally:
            await agent.aclose()


IMPORTS = {
    "import tether": "import tether",
    "import tether.runner + models.openai_chat": "import tether.runner, tether.models.openai_chat",
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


def verdict(ratio: float, target: float) -> str:
    return f"(target ≤{target}x: {'met' if ratio <= target else 'NOT met'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs: a smoke test, noisier numbers")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    runs, rounds, gathers, repeats = (60, 3, 1, 5) if args.quick else (300, 6, 5, 11)
    batch = runs // rounds

    with fake_server(0.0) as fast_url, fake_server(SLOW_LATENCY) as slow_url:
        seq = asyncio.run(bench_runs(fast_url, sequential, batch, rounds))
        conc = asyncio.run(bench_runs(slow_url, concurrent, CONCURRENT, gathers))
    imports = bench_imports(repeats)

    # Sequential batches become per-run numbers; a concurrent batch's wall is the number itself.
    per_run = {side: {k: v / batch for k, v in seq[side].items()} for side in seq}
    rows = {  # key: (label, target, tether, raw, unit, scale)
        "per_run_wall": ("per-run wall", 1.3, per_run["tether"]["wall"], per_run["raw"]["wall"], "ms", 1e3),
        "per_run_cpu": ("per-run CPU", 1.3, per_run["tether"]["cpu"], per_run["raw"]["cpu"], "ms", 1e3),
        "concurrent_wall": (
            f"{CONCURRENT} concurrent wall",
            1.2,
            conc["tether"]["wall"],
            conc["raw"]["wall"],
            "s",
            1,
        ),
    }
    ratios = {key: row[2] / row[3] for key, row in rows.items()}
    print(f"{runs} sequential runs per side in {rounds} alternating batches, medians;", end=" ")
    print(f"{gathers} alternating gathers of {CONCURRENT} runs at {SLOW_LATENCY}s latency, median")
    for key, (label, target, t, r, unit, scale) in rows.items():
        print(
            f"  {label:20s} tether/raw = {ratios[key]:.2f}x  {verdict(ratios[key], target):24s}"
            f"  tether {t * scale:.3f} {unit}, raw {r * scale:.3f} {unit}"
        )
    bare_ms = imports["bare"]["seconds"] * 1000
    print(f"interpreter start, median of {repeats} fresh processes (python -c pass: {bare_ms:.0f} ms)")
    for label in IMPORTS:
        cost = imports[label]
        print(f"  {label:42s} +{cost['extra_ms']:4.0f} ms = {cost['ratio']:.2f}x bare start")
    if args.json:
        numbers = {"ratios": ratios, "per_run": per_run, "concurrent": conc, "imports": imports}
        print(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
