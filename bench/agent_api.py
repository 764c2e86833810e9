"""Host CPU of conversations and of structured output, as ratios measured in one run.

    python bench/agent_api.py [--turns 50] [--runs 1000]

The model is ``ScriptedModel`` (in process, no HTTP), so what is measured is
the host: the driver, the run state machine, the gates and the store, not
the model or the wire.

- a durable conversation (SQLiteStore in a temporary directory): process
  CPU of turn 50 over turn 2, each the median over a window of turns around
  it (turns 2-11 and 41-50). A turn stores only the messages it adds, so the
  ratio should stay near 1. Target <= 1.2x.
- structured output: client CPU per run of ``Agent(output_type=Invoice)``
  (native mode: ``response_format`` sent, the answer decoded and validated)
  over the same run returning plain text (the same answer text, one request
  each), over real HTTP to a FakeServer in another process (so its CPU is not
  counted), the agents taking turns batch by batch (20 runs), medians.
  Target <= 1.05x. The same ratio in process (ScriptedModel, no
  wire) is printed for orientation: there a whole run costs ~20 us, so
  decoding the answer alone is a visible share.

The exit status is always 0: a benchmark informs, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic

from tether import Agent, OpenAIChatModel, ScriptedModel
from tether.core.messages import ModelReply, Usage
from tether.models.base import ModelRequest
from tether.store import SQLiteStore


class Invoice(pydantic.BaseModel):
    customer: str
    total: int
    note: str | None = None


ANSWER = '{"customer": "ACME", "total": 3720, "note": null}'


class Echo(ScriptedModel):
    """Answers every request with the same text, forever."""

    def __init__(self, content: str) -> None:
        super().__init__([])
        self.reply = ModelReply(choices=1, finish_reason="stop", content=content, usage=Usage(10, 5))

    async def complete(self, request: ModelRequest) -> ModelReply:
        return self.reply


async def conversation_turns(turns: int, db: Path) -> list[float]:
    agent = Agent(Echo("noted."), store=SQLiteStore(db), system="Be brief.")
    conv = agent.conversation()
    cpu: list[float] = []
    for n in range(1, turns + 1):
        start = time.process_time()
        await conv.send(f"turn {n}: here is a sentence of user text to make the history grow.")
        cpu.append(time.process_time() - start)
    return cpu


async def per_run_cpu(agent: Agent, runs: int) -> float:
    start = time.process_time()
    for _ in range(runs):
        await agent.run("make the invoice")
    return (time.process_time() - start) / runs


BATCH = 20  # runs of one agent in a row

SERVER = """
import asyncio, sys
from tether.testing.fake_server import FakeServer, text
answer = sys.argv[1]
asyncio.run(FakeServer(lambda request: text(answer), port=0).serve_forever())
"""


async def medians(runs: int, agents: list[Agent], batch: int = BATCH) -> list[float]:
    """Median CPU of one run of each agent: per-run CPU of batches of ``batch`` runs, the agents taking turns.

    Every run of every agent makes one model request (checked), so like is compared with like. The
    agents take turns batch by batch, the order reversed every round, so a change in the machine's
    load (other processes evict the caches too) lands on every agent alike; within a batch an agent
    runs as an application would run it, again and again (turns of single runs would charge each
    agent for evicting the other's code from the caches, the typed one most).
    """
    for agent in agents:
        result = await agent.run("make the invoice")
        assert result.ok and len(result.steps) == 1, result
        await per_run_cpu(agent, 20)  # warm up
    cpu: list[list[float]] = [[] for _ in agents]
    order = list(enumerate(agents))
    for round_ in range(max(1, runs // batch)):
        for i, agent in order if round_ % 2 == 0 else order[::-1]:
            cpu[i].append(await per_run_cpu(agent, batch))
    for agent in agents:
        await agent.aclose()
    return [statistics.median(c) for c in cpu]


async def structured_ratio(
    runs: int, make: Callable[[], Agent], make_typed: Callable[[], Agent]
) -> tuple[float, float, float]:
    plain, typed = make(), make_typed()
    assert isinstance((await typed.run("x")).output, Invoice)
    p, t = await medians(runs, [plain, typed])
    return t / p, p, t


def over_http(runs: int) -> tuple[float, float, float, float]:
    """typed / plain, and typed / plain sending the same request body (so only handling the answer differs)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    server = subprocess.Popen([sys.executable, "-c", SERVER, ANSWER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().split()[-1]  # "listening on http://127.0.0.1:PORT/v1"

        def model(**options: Any) -> OpenAIChatModel:
            return OpenAIChatModel("m", base_url=base_url, api_key="k", **options)

        typed = Agent(model(), output_type=Invoice)
        assert typed.output is not None
        same_body = {"response_format": typed.output.response_format()}
        agents = [Agent(model()), Agent(model(extra_body=same_body)), typed]
        p, same, t = asyncio.run(medians(runs, agents))
        return t / p, t / same, p, t
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cpu = asyncio.run(conversation_turns(args.turns, Path(tmp) / "bench.db"))
    early = statistics.median(cpu[1:11])
    late = statistics.median(cpu[-10:])
    print(
        f"conversation: turn {args.turns} / turn 2 host CPU = {late / early:.2f}x "
        f"({late * 1e3:.2f} ms vs {early * 1e3:.2f} ms, medians of 10 turns; target <= 1.2x)"
    )
    ratio, beyond_body, p, t = over_http(args.runs)
    print(
        f"structured output over HTTP: client CPU per run typed / plain = {ratio:.3f}x "
        f"({t * 1e6:.0f} us vs {p * 1e6:.0f} us; target <= 1.05x)"
    )
    print(f"  typed / plain sending the same response_format (the answer's handling only): {beyond_body:.3f}x")
    ratio, p, t = asyncio.run(
        structured_ratio(args.runs, lambda: Agent(Echo(ANSWER)), lambda: Agent(Echo(ANSWER), output_type=Invoice))
    )
    print(f"  in process, for orientation: {ratio:.2f}x ({t * 1e6:.0f} us vs {p * 1e6:.0f} us)")


if __name__ == "__main__":
    main()
