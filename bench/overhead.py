"""What tether costs per run over a bare aiohttp loop: in memory, durable on SQLite, durable on PostgreSQL.

    python bench/overhead.py [--rounds 5] [--runs 300] [--concurrent 500] [--fsync-concurrency 64] [--json FILE]

The yardstick of tether's per-run cost. One run is two round trips to a
fake model server in its own process (its CPU never counts): the model asks
``multiply(248, 15)``, the host runs the tool, the model answers. Each setup
drives the same runs:

- ``bare``: the least a careful user writes on one ``aiohttp.ClientSession``
  (post, read the call, run the function, post again, read the answer): no gates;
- ``memory``: ``Agent(OpenAIChatModel(...), [multiply])``, every gate on, no store;
- ``sqlite``: the same with ``store=SQLiteStore(...)`` and a side-effecting
  ``multiply``: an intent made durable (fsynced) before each call;
- ``postgres``: the same on a throwaway PostgreSQL 15 (skipped without one).

Rounds alternate the setups (their order reversed every round); each round
measures ``--runs`` sequential runs (client CPU and wall per run) and a gather
of ``--concurrent`` runs (wall per batch, CPU per run), and every ratio is
taken against ``bare`` in the same round. Printed: one table of the median
ratio per setup with the spread over rounds, the fsyncs per run of each
durable setup at ``--fsync-concurrency`` concurrent runs (counted by strace on
a separate pass, when strace is there: SQLite's ``fdatasync``/``fsync`` in
this process, PostgreSQL's in its server), and interpreter start with
``from tether import Agent, OpenAIChatModel, tool`` against ``import
aiohttp``, then with aiohttp imported too (the agent's path leaves it to the
first request). ``--json FILE`` writes every figure. A benchmark informs, it does
not pass or fail.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "store"))

PROMPT = "What is 248 times 15?"
TARGETS = {  # issue 19's targets, for the verdict column
    ("memory", "cpu"): 1.2,
    ("memory", "concurrent_wall"): 1.05,
    ("sqlite", "wall"): 2.0,
}
WORKLOAD = r"""
import asyncio, json, os, sys, time
import aiohttp

setup, base_url, db, runs, concurrent = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
phase = sys.argv[6]  # "timed" or "fsyncs"


async def multiply(a: int, b: int) -> int:
    return a * b


def bare_runner(session):
    url = f"{base_url}/chat/completions"
    tools = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two integers.",
              "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                             "required": ["a", "b"], "additionalProperties": False}}}]

    async def once():
        messages = [{"role": "user", "content": "What is 248 times 15?"}]
        body = {"model": "fake", "messages": messages, "tools": tools}
        async with session.post(url, json=body) as response:
            message = (await response.json())["choices"][0]["message"]
        messages.append(message)
        for call in message["tool_calls"]:
            result = await multiply(**json.loads(call["function"]["arguments"]))
            content = json.dumps({"ok": True, "result": result})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        async with session.post(url, json=body) as response:
            return (await response.json())["choices"][0]["message"]["content"]

    return once


def tether_runner():
    from tether import Agent, OpenAIChatModel, tool

    store = None
    read_only = setup == "memory"
    if setup == "sqlite":
        from tether import SQLiteStore
        store = SQLiteStore(os.path.join(db, "runs.db"))
    elif setup == "postgres":
        from tether import open_store
        store = open_store(db)
    made = tool(read_only=read_only)(multiply)
    agent = Agent(OpenAIChatModel("fake", base_url=base_url, api_key="k"), [made], store=store)

    async def once():
        result = await agent.run("What is 248 times 15?")
        return result.output

    return agent, once


async def main():
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer k"}) as session:
        agent = None
        if setup == "bare":
            once = bare_runner(session)
        else:
            agent, once = tether_runner()
        for _ in range(20):
            out = await once()
            assert "3720" in str(out), out
        figures = {}
        if phase == "fsyncs":
            open(os.path.join(db if setup == "sqlite" else "/tmp", ".tether-bench-mark"), "w").close()
            await asyncio.gather(*(once() for _ in range(concurrent)))
        else:
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(runs):
                await once()
            figures["cpu"] = (time.process_time() - cpu) / runs
            figures["wall"] = (time.perf_counter() - wall) / runs
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(once() for _ in range(concurrent)))
            figures["concurrent_cpu"] = (time.process_time() - cpu) / concurrent
            figures["concurrent_wall"] = time.perf_counter() - wall
        if agent is not None:
            await agent.aclose()
    print(json.dumps(figures))


asyncio.run(main())
"""


def fake_server() -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "tether.testing.fake_server", "--port", "0", "--scenario", "multiply"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=child_env())
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        raise SystemExit(f"the fake server did not start: {line!r}")
    return process, line.removeprefix("listening on ")


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def workload(setup: str, base_url: str, db: str, runs: int, concurrent: int, *, trace: Path | None = None) -> Any:
    argv = [sys.executable, "-c", WORKLOAD, setup, base_url, db, str(runs), str(concurrent)]
    argv.append("fsyncs" if trace else "timed")
    if trace is not None:
        argv = ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync,openat", "-o", str(trace), *argv]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{setup} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fsyncs_in(trace: Path) -> int:
    """The fsyncs after the workload's mark (the warm-up's are not counted)."""
    lines = trace.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if ".tether-bench-mark" in line), 0)
    return sum(1 for line in lines[start:] if "sync(" in line and "= 0" in line)


def server_fsyncs(postgres: Any) -> Callable[[], int]:
    """A counter of the PostgreSQL server's WAL syncs (``pg_stat_wal``), read before and after a pass."""
    import psycopg

    def read() -> int:
        # A server process reports its counts when it ends or goes idle, up to a second late: read once they
        # have stopped moving, or a pass's syncs are counted in the next one (or not at all).
        last = None
        while True:
            with psycopg.connect(postgres.url(), autocommit=True) as db:
                row = db.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
            count = int(row[0]) if row else 0
            if count == last:
                return count
            last = count
            time.sleep(1.5)

    return read


def import_times(repeats: int) -> dict[str, float]:
    codes = {
        "import aiohttp": "import aiohttp",
        "from tether import Agent, OpenAIChatModel, tool": "from tether import Agent, OpenAIChatModel, tool",
        # aiohttp is imported by an adapter's first request: this is the import and that first request's import
        "import aiohttp; from tether import ...": "import aiohttp; from tether import Agent, OpenAIChatModel, tool",
    }
    times: dict[str, list[float]] = {label: [] for label in codes}
    with tempfile.TemporaryDirectory() as cache:
        env = {**child_env(), "PYTHONPYCACHEPREFIX": cache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for round_ in range(repeats + 1):  # round 0 compiles into the cache
            for label, code in codes.items():
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], check=True, env=env)
                if round_:
                    times[label].append(time.perf_counter() - start)
    return {label: statistics.median(samples) for label, samples in times.items()}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=500)
    parser.add_argument("--fsync-concurrency", type=int, default=64)
    parser.add_argument("--setups", default="bare,memory,sqlite,postgres")
    parser.add_argument("--import-repeats", type=int, default=15)
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args()
    setups = args.setups.split(",")
    work = Path(tempfile.mkdtemp(prefix="tether-bench-overhead-"))
    server, base_url = fake_server()
    postgres = None
    if "postgres" in setups:
        try:
            from postgres_server import Unavailable, start

            postgres = start()
        except (ImportError, Unavailable) as exc:
            print(f"postgres skipped: {exc}")
            setups.remove("postgres")

    def target(setup: str) -> str:
        if setup == "postgres":
            assert postgres is not None
            return str(postgres.schema_url())
        return tempfile.mkdtemp(dir=work)

    try:
        rounds: list[dict[str, Any]] = []
        order = list(setups)
        for _ in range(args.rounds):
            measured = {s: workload(s, base_url, target(s), args.runs, args.concurrent) for s in order}
            rounds.append(measured)
            order.reverse()
        fsyncs: dict[str, float] = {}
        if shutil.which("strace"):
            for setup in ("sqlite", "postgres"):
                if setup not in setups:
                    continue
                trace = work / f"{setup}.strace"
                if setup == "postgres":
                    # The server's WAL syncs during the pass, the warm-up's 20 runs' included (they are sequential,
                    # so at most one each): the concurrent runs' share is bounded above by what is printed.
                    before = server_fsyncs(postgres)()
                    workload(setup, base_url, target(setup), 0, args.fsync_concurrency, trace=trace)
                    count = server_fsyncs(postgres)() - before
                    fsyncs[setup] = max(0, count - 20) / args.fsync_concurrency
                else:
                    workload(setup, base_url, target(setup), 0, args.fsync_concurrency, trace=trace)
                    fsyncs[setup] = fsyncs_in(trace) / args.fsync_concurrency
        imports = import_times(args.import_repeats)
    finally:
        server.terminate()
        server.wait(10)
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(work, ignore_errors=True)

    units = ("cpu", "wall", "concurrent_cpu", "concurrent_wall")
    summary: dict[str, Any] = {"runs": args.runs, "rounds": args.rounds, "concurrent": args.concurrent, "setups": {}}
    for setup in setups:
        entry: dict[str, Any] = {}
        for unit in units:
            entry[unit] = {
                "ms": statistics.median(r[setup][unit] for r in rounds) * 1000,
                **({} if setup == "bare" else {"ratio": spread([r[setup][unit] / r["bare"][unit] for r in rounds])}),
            }
        if setup in fsyncs:
            entry["fsyncs_per_run"] = fsyncs[setup]
        summary["setups"][setup] = entry
    summary["imports"] = imports
    summary["import_ratio"] = imports["from tether import Agent, OpenAIChatModel, tool"] / imports["import aiohttp"]
    summary["import_with_aiohttp_ratio"] = imports["import aiohttp; from tether import ..."] / imports["import aiohttp"]
    summary["fsync_concurrency"] = args.fsync_concurrency

    print(f"per run, over the bare aiohttp loop ({args.runs} sequential runs and {args.concurrent} concurrent,")
    print(f"{args.rounds} alternating rounds; median ratio (min-max over rounds), bare in ms):")
    header = f"{'setup':>9}  " + "  ".join(f"{u.replace('_', ' '):>22}" for u in units) + "   fsyncs/run"
    print(header)
    for setup in setups:
        entry = summary["setups"][setup]
        cells = []
        for unit in units:
            cell = entry[unit]
            if setup == "bare":
                cells.append(f"{cell['ms']:10.3f} ms" + " " * 9)
            else:
                r = cell["ratio"]
                mark = ""
                if (setup, unit) in TARGETS:
                    mark = " ok" if r["median"] <= TARGETS[setup, unit] else " !!"
                cells.append(f"{r['median']:5.2f}x ({r['min']:.2f}-{r['max']:.2f}){mark:3s}")
        fs = f"{entry['fsyncs_per_run']:.3f}" if "fsyncs_per_run" in entry else ""
        print(f"{setup:>9}  " + "  ".join(f"{c:>22}" for c in cells) + f"   {fs}")
    print(
        f"start: from tether import Agent, OpenAIChatModel, tool = {summary['import_ratio']:.2f}x import aiohttp"
        f" ({imports['from tether import Agent, OpenAIChatModel, tool'] * 1000:.0f} ms,"
        f" {imports['import aiohttp'] * 1000:.0f} ms); with aiohttp imported too (as by a first request):"
        f" {summary['import_with_aiohttp_ratio']:.2f}x"
    )
    print(
        f"targets: memory cpu <= {TARGETS['memory', 'cpu']}x, memory concurrent wall <="
        f" {TARGETS['memory', 'concurrent_wall']}x, sqlite wall <= {TARGETS['sqlite', 'wall']}x,"
        f" sqlite fsyncs/run at {args.fsync_concurrency} concurrent <= 0.25, import <= 1.1x"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
