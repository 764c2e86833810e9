"""The service's latency while one request waits on a PostgreSQL row lock, against the same service idle.

    python bench/service_lock.py [--rounds 5] [--requests 200] [--json]

Starts a throwaway PostgreSQL 15 (``tests/store/postgres_server.py``), a fake
model server and ``python -m tickets_app --db postgresql://...`` (one process). Alice
starts one run per round that pauses for an approval (``close_ticket``).
Rounds alternate: *idle*, ``--requests`` sequential ``GET /api/health``; then
*locked*, the same while another connection holds the run's row ``FOR
UPDATE`` and carol's approval of it waits on that lock inside the service.
Printed: the median latency of each, their ratio per round and the spread;
the target is locked/idle ≤ 1.5 (a service whose store calls block its event
loop answers nothing until the lock is let go).

A benchmark informs, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
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
from tickets_app.seed_data import TICKETS, seed

REPO = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO / "examples" / "tickets")])
SECRET = "bench-" + "s" * 40


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def token(session: aiohttp.ClientSession, base: str, user: str) -> dict[str, str]:
    async with session.post(f"{base}/api/auth/token", json={"username": user, "password": f"{user}-pass"}) as r:
        return {"Authorization": f"Bearer {(await r.json())['access_token']}"}


async def health_latencies(session: aiohttp.ClientSession, base: str, count: int) -> list[float]:
    found = []
    for _ in range(count):
        began = time.perf_counter()
        async with session.get(f"{base}/api/health") as r:
            await r.read()
            assert r.status == 200
        found.append(time.perf_counter() - began)
    return found


async def paused_run(session: aiohttp.ClientSession, base: str, alice: dict[str, str]) -> str:
    async with session.post(f"{base}/api/runs", json={"prompt": "Close my ticket."}, headers=alice) as r:
        run_id = str((await r.json())["run_id"])
    while True:
        async with session.get(f"{base}/api/runs/{run_id}", headers=alice) as r:
            if (await r.json())["status"] == "awaiting_approval":
                return run_id
        await asyncio.sleep(0.05)


async def measure(args: argparse.Namespace, base: str, url: str) -> list[dict[str, float]]:
    import psycopg

    rounds = []
    async with aiohttp.ClientSession() as session:
        alice, carol = await token(session, base, "alice"), await token(session, base, "carol")
        await health_latencies(session, base, 50)  # warm up
        for _ in range(args.rounds):
            run_id = await paused_run(session, base, alice)
            idle = await health_latencies(session, base, args.requests)
            with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as watcher:
                holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_id,))
                path = f"{base}/api/runs/{run_id}/approvals/call_close"
                approval = asyncio.create_task(session.post(path, json={"approved": True}, headers=carol))
                while not watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).fetchone()[0]:  # type: ignore[index]
                    await asyncio.sleep(0.01)
                locked = await health_latencies(session, base, args.requests)
                waited = not approval.done()
                holder.rollback()
            async with await approval as r:
                assert r.status == 200, await r.text()
            rounds.append(
                {
                    "idle_ms": statistics.median(idle) * 1000,
                    "locked_ms": statistics.median(locked) * 1000,
                    "ratio": statistics.median(locked) / statistics.median(idle),
                    "approval_waited_throughout": float(waited),
                }
            )
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    server = start()
    work = Path(tempfile.mkdtemp(prefix="tether-bench-lock-"))
    ticket = next(t for t in TICKETS if t.reporter == "alice" and t.status == "open")

    def respond(request: dict[str, Any]) -> ReplySpec:
        if request["messages"][-1]["role"] == "tool":
            return text("Closed.")
        return tool_calls([("call_close", "close_ticket", json.dumps({"ticket_id": ticket.id}))])

    try:
        url = server.schema_url()
        with TicketsDB(work / "tickets.db") as db:
            seed(db)
        with FakeServer(respond) as model:
            port = free_port()
            env = {**os.environ, "TETHER_JWT_SECRET": SECRET, "TETHER_LOG_LEVEL": "warning",
                   "PYTHONPATH": PYTHONPATH}  # fmt: skip
            tickets = str(work / "tickets.db")
            command = [sys.executable, "-m", "tickets_app", "--port", str(port), "--db", url,
                       "--tickets-db", tickets, "--base-url", model.base_url, "--model", "m"]  # fmt: skip
            process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 60
                while True:
                    with socket.socket() as probe:
                        if probe.connect_ex(("127.0.0.1", port)) == 0:
                            break
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise SystemExit("the ticket service did not start")
                    time.sleep(0.1)
                rounds = asyncio.run(measure(args, f"http://127.0.0.1:{port}", url))
            finally:
                process.terminate()
                process.wait(30)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    ratios = [r["ratio"] for r in rounds]
    summary = {
        "rounds": rounds,
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "max_ratio": max(ratios),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{'round':>5}  {'idle ms':>8}  {'locked ms':>9}  {'locked/idle':>11}")
    for number, r in enumerate(rounds, start=1):
        print(f"{number:>5}  {r['idle_ms']:>8.2f}  {r['locked_ms']:>9.2f}  {r['ratio']:>10.2f}x")
    print(
        f"/api/health while a request waits on a row lock: {summary['median_ratio']:.2f}x the idle service"
        f" (median of {len(ratios)} rounds, {summary['min_ratio']:.2f}-{summary['max_ratio']:.2f}); target <= 1.5x"
    )


if __name__ == "__main__":
    main()
