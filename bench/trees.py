"""Per-run cost of this tree's tether against another commit's, measured in one run.

    python bench/trees.py --baseline REF [--rounds 5] [--runs 300] [--json]

A restructuring must not make a run cost more. ``REF`` (a commit, a
branch) is checked out with ``git archive`` into a temporary folder; then,
round after round, each tree drives the same runs in a child process of its
own (``PYTHONPATH`` naming its ``src``), the trees taking turns. One run is
two round trips to a fake model server in another process (the model asks
``multiply(248, 15)``, then answers), with the tool side-effecting, in
three setups:

- ``memory``: no store;
- ``sqlite``: ``SQLiteStore`` in a temporary file (the intent fsynced before
  each call);
- ``postgres``: a throwaway PostgreSQL 15 (``tests/store/postgres_server.py``),
  a fresh schema per child.

Printed: each setup's client CPU and wall per run, this tree over the
baseline, the median of the per-round ratios with their spread. The exit
status is always 0: a benchmark informs, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETUPS = ("memory", "sqlite", "postgres")
CHILD = r"""
import asyncio, json, sys, tempfile, time
from pathlib import Path
from tether import Agent, OpenAIChatModel, tool

setup, base_url, runs, db = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


@tool
def multiply(a: int, b: int) -> int:
    "Multiply two integers (side-effecting here, so a durable run records an intent)."
    return a * b


async def main() -> None:
    store = None
    if setup == "sqlite":
        from tether import SQLiteStore
        store = SQLiteStore(Path(db) / "runs.db")
    elif setup == "postgres":
        from tether.store import open_store
        store = open_store(db)
    agent = Agent(OpenAIChatModel("fake", base_url=base_url, api_key="k"), [multiply], store=store)
    for _ in range(20):  # warm up: connections, caches, imports
        await agent.run("What is 248 times 15?")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(runs):
        result = await agent.run("What is 248 times 15?")
        assert result.output and "3720" in result.output, result
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await agent.aclose()
    print(json.dumps({"cpu": cpu / runs, "wall": wall / runs}))


asyncio.run(main())
"""


def fake_server() -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "tether.testing.fake_server", "--port", "0", "--scenario", "multiply"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        raise SystemExit(f"the fake server did not start: {line!r}")
    return process, line.removeprefix("listening on ")


def baseline_tree(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def child(src: Path, setup: str, base_url: str, runs: int, db: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, setup, base_url, str(runs), db],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{setup} on {src} failed:\n{done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit or branch to measure against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setups = args.setups.split(",")
    work = Path(tempfile.mkdtemp(prefix="tether-bench-trees-"))
    server, base_url = fake_server()
    postgres = None
    try:
        trees = {"this": REPO / "src", "baseline": baseline_tree(args.baseline, work)}
        if "postgres" in setups:
            sys.path.insert(0, str(REPO / "tests" / "store"))
            from postgres_server import start

            postgres = start()
        ratios: dict[str, dict[str, list[float]]] = {s: {"cpu": [], "wall": []} for s in setups}
        figures: dict[str, dict[str, list[dict[str, float]]]] = {s: {t: [] for t in trees} for s in setups}
        for round_ in range(args.rounds):
            for setup in setups:
                measured = {}
                for name in sorted(trees, reverse=round_ % 2 == 1):  # who goes first alternates
                    if setup == "postgres":
                        assert postgres is not None
                        db = postgres.schema_url()
                    else:
                        db = tempfile.mkdtemp(dir=work)
                    measured[name] = child(trees[name], setup, base_url, args.runs, db)
                    figures[setup][name].append(measured[name])
                for unit in ("cpu", "wall"):
                    ratios[setup][unit].append(measured["this"][unit] / measured["baseline"][unit])
        summary: dict[str, Any] = {"baseline": args.baseline, "runs": args.runs, "rounds": args.rounds, "setups": {}}
        for setup in setups:
            entry: dict[str, Any] = {}
            for unit in ("cpu", "wall"):
                values = ratios[setup][unit]
                entry[unit] = {
                    "ratio": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                    "this_ms": statistics.median(f[unit] for f in figures[setup]["this"]) * 1000,
                    "baseline_ms": statistics.median(f[unit] for f in figures[setup]["baseline"]) * 1000,
                }
            summary["setups"][setup] = entry
    finally:
        server.terminate()
        server.wait(10)
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"this tree over {args.baseline}, per run ({args.runs} runs a round, {args.rounds} rounds, medians):")
    print(f"{'setup':>9}  {'cpu ms':>13}  {'cpu ratio':>18}  {'wall ms':>13}  {'wall ratio':>18}")
    for setup, entry in summary["setups"].items():
        cells = []
        for unit in ("cpu", "wall"):
            e = entry[unit]
            cells.append(f"{e['this_ms']:6.3f}/{e['baseline_ms']:6.3f}")
            cells.append(f"{e['ratio']:5.2f}x ({e['min']:.2f}-{e['max']:.2f})")
        print(f"{setup:>9}  {cells[0]:>13}  {cells[1]:>18}  {cells[2]:>13}  {cells[3]:>18}")
    print(f"(measured {time.strftime('%Y-%m-%d %H:%M')}; cpu is the client process's, the model server runs apart)")


if __name__ == "__main__":
    main()
