"""Throughput of the ticket service with 1, 2 and 4 worker processes on one PostgreSQL run store.

    python bench/serve_workers.py [--runs 200] [--latency 0.05] [--workers 1,2,4] [--json]

Starts a throwaway PostgreSQL 15 (``tests/store/postgres_server.py``), a fake
model server (``tether.testing.FakeServer``, in this process, answering
after ``--latency`` seconds) and, for each worker count, ``python -m tickets_app --db
postgresql://... --workers N`` on a fresh schema; then once ``python -m tickets_app``
on a SQLite file (one process), for reference. Each run is model →
``create_ticket`` (a side effect: an intent fsynced before it, a row in the
tickets database) → model → answer. All runs are posted at once by two
users (the per-user limits lifted); the clock stops when every run is
``completed``. Printed: runs per second for each setup, the CPU each run
cost the service's processes and the PostgreSQL server's (from /proc, while
the runs go: start-up not counted), and the throughput of each setup over
one worker on Postgres.

A benchmark informs, it does not pass or fail; on a machine with fewer
cores than workers the ratios say what the cores allow, not what the
design does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "tickets"))  # tickets_app

from postgres_server import start

from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls
from tickets_app.db import TicketsDB
from tickets_app.seed_data import seed

REPO = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO / "examples" / "tickets")])
SECRET = "bench-" + "s" * 40


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def responder(latency: float) -> Any:
    def respond(request: dict[str, Any]) -> ReplySpec:
        prompt = next(str(m["content"]) for m in request["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in request["messages"]):
            return text(f"opened a ticket for {prompt}", latency=latency)
        arguments = json.dumps({"title": f"ticket for {prompt}", "body": "opened by the bench"})
        return tool_calls([("call-1", "create_ticket", arguments)], latency=latency)

    return respond


async def drive(base: str, runs: int) -> float:
    """Post ``runs`` runs at once (alice and bob in turn); seconds until all are completed."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        auth = {}
        for user in ("alice", "bob"):
            body = {"username": user, "password": f"{user}-pass"}
            async with session.post(f"{base}/api/auth/token", json=body) as r:
                auth[user] = {"Authorization": f"Bearer {(await r.json())['access_token']}"}
        began = time.perf_counter()

        async def post(i: int) -> None:
            async with session.post(
                f"{base}/api/runs", json={"prompt": f"q{i}"}, headers=auth[("alice", "bob")[i % 2]]
            ) as r:
                assert r.status == 202, await r.text()

        await asyncio.gather(*(post(i) for i in range(runs)))
        while True:
            done = 0
            for headers in auth.values():
                async with session.get(f"{base}/api/runs?limit=500", headers=headers) as r:
                    listed = (await r.json())["runs"]
                failed = [
                    x for x in listed if x["status"] not in ("ready", "awaiting_model", "awaiting_tools", "completed")
                ]
                assert not failed, failed[:3]
                done += sum(x["status"] == "completed" for x in listed)
            if done >= runs:
                return time.perf_counter() - began
            await asyncio.sleep(0.05)


def cpu_of(pids: list[int], *, reaped: bool = False) -> float:
    """CPU seconds the processes have used so far (``reaped``: that of their children that have exited)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[13]) + int(fields[14]) if reaped else int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def family(pid: int) -> list[int]:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid, *map(int, children)]


def measure(db: str, workers: int, tickets: Path, model: FakeServer, runs: int, postmaster: int) -> dict[str, float]:
    """Seconds for ``runs`` runs, and the CPU seconds the service's processes and PostgreSQL used meanwhile."""
    port = free_port()
    env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning", "PYTHONPATH": PYTHONPATH,
           "TETHER_MAX_RUNS_PER_USER": "10000", "TETHER_MAX_QUEUED_RUNS_PER_USER": "10000"}  # fmt: skip
    command = [sys.executable, "-m", "tickets_app", "--port", str(port), "--db", db, "--tickets-db", str(tickets),
               "--base-url", model.base_url, "--model", "fake", "--workers", str(workers)]  # fmt: skip
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the service did not start") from None
                time.sleep(0.2)
        time.sleep(1.0 if workers > 1 else 0.0)  # every worker up, not only the first
        service = family(process.pid)
        before = cpu_of(service), cpu_of(family(postmaster)) + cpu_of([postmaster], reaped=True)
        seconds = asyncio.run(drive(f"http://127.0.0.1:{port}", runs))
        after = cpu_of(service), cpu_of(family(postmaster)) + cpu_of([postmaster], reaped=True)
        return {"seconds": seconds, "service": after[0] - before[0], "postgres": after[1] - before[1]}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05, help="the fake model's seconds per reply")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    server = start()
    root = Path(tempfile.mkdtemp(prefix="tether-bench-workers-"))
    results: dict[str, float] = {}
    cpu_ms: dict[str, tuple[float, float]] = {}
    try:
        with TicketsDB(root / "seed.db") as db:
            seed(db)
        with FakeServer(responder(args.latency)) as model:
            setups = [(f"postgres x{n}", server.schema_url(), n) for n in counts]
            setups.append(("sqlite x1", str(root / "runs.db"), 1))
            postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
            for i, (name, db, n) in enumerate(setups):
                tickets = root / f"tickets-{i}.db"
                shutil.copyfile(root / "seed.db", tickets)
                measured = measure(db, n, tickets, model, args.runs, postmaster)
                seconds = measured["seconds"]
                service_ms = measured["service"] * 1000 / args.runs
                postgres_ms = measured["postgres"] * 1000 / args.runs
                results[name] = args.runs / seconds
                cpu_ms[name] = (service_ms, postgres_ms)
                print(
                    f"{name:12} {args.runs} runs in {seconds:6.2f} s: {results[name]:7.1f} runs/s;"
                    f" CPU per run: service {service_ms:5.1f} ms, postgres {postgres_ms:5.1f} ms",
                    flush=True,
                )
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    one = results.get("postgres x1")
    if one:
        for name, rate in results.items():
            print(f"{name:12} / postgres x1: {rate / one:5.2f}x")
    if args.json:
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "latency": args.latency,
                    "cores": os.cpu_count(),
                    "runs_per_s": results,
                    "cpu_ms": cpu_ms,
                }
            )
        )


if __name__ == "__main__":
    main()
