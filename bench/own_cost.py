"""tether's own CPU per run with no sockets, alone and between real requests: what the hot path costs, and why it
costs more in ``overhead.py``.

    .venv/bin/python bench/own_cost.py                         # this tree
    .venv/bin/python bench/own_cost.py --src /tmp/base/src     # another tree: git archive REF src | tar -x -C /tmp/base

The run of ``overhead.py`` (``multiply(248, 15)`` asked, run, answered; the
tool read-only, every gate on, no store) with the adapter's ``post``
answering from canned bytes: the request body is still built and encoded,
the reply still decoded and parsed, so what is timed is tether's own work
and nothing of aiohttp's. Rounds alternate three loops, CPU per run each:

- ``tether``: tether's runs back to back;
- ``bare``: the bare aiohttp loop of ``overhead.py`` against its fake server
  (in another process);
- ``bare+tether``: one of each, in turn.

``bare+tether`` minus the other two is what tether's work costs more when
real I/O runs between its runs (the caches it finds cold): the reason a
microsecond cut here shows as more than one in ``overhead.py``. Medians over
rounds, with the spread. A benchmark informs, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The tree measured: this one's src, or another's (``--src``, read before anything of tether is imported).
SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else str(HERE.parent / "src")
sys.path.insert(0, SRC)

import aiohttp  # noqa: E402
from calls import bare_runner, multiply  # noqa: E402
from overhead import fake_server  # noqa: E402

from tether import Agent, OpenAIChatModel, tool  # noqa: E402

ARGUMENTS = '{"a": 248, "b": 15}'
CALL = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "multiply", "arguments": '{"a": 248, "b": 15}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
}
ANSWER = {
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "It is 3720."}}],
    "usage": {"prompt_tokens": 70, "completion_tokens": 10, "total_tokens": 80},
}


class Canned(OpenAIChatModel):
    """The HTTP adapter with its wire replaced: each request is encoded, each reply decoded and parsed, as sent."""

    replies = (json.dumps(CALL).encode(), json.dumps(ANSWER).encode())

    async def post(self, url: str, body: dict[str, Any], read_stream: Any, read_body: Any) -> Any:
        self.encode(body)
        return read_body(self.replies[body["messages"][-1]["role"] == "tool"])


async def measure(base_url: str, runs: int, rounds: int) -> dict[str, list[float]]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer k"}) as session:
        bare = bare_runner(session, base_url)
        agent = Agent(Canned("fake", base_url=base_url, api_key="k"), [tool(read_only=True)(multiply)])

        async def own() -> Any:
            return (await agent.run("What is 248 times 15?")).output

        async def both() -> Any:
            await bare()
            return await own()

        loops = {"tether": own, "bare": bare, "bare+tether": both}
        for once in loops.values():
            for _ in range(50):
                assert "3720" in str(await once())
        cpu: dict[str, list[float]] = {name: [] for name in loops}
        for round_ in range(rounds):
            for name in loops if round_ % 2 == 0 else reversed(loops):
                start = time.process_time()
                for _ in range(runs):
                    await loops[name]()
                cpu[name].append((time.process_time() - start) / runs)
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--src", default=SRC, help="the src folder of the tree to measure (default: this one's)")
    args = parser.parse_args()
    server, base_url = fake_server()
    try:
        cpu = asyncio.run(measure(base_url, args.runs, args.rounds))
    finally:
        server.terminate()
        server.wait(10)
    extra = [b - t - r for t, r, b in zip(cpu["tether"], cpu["bare"], cpu["bare+tether"], strict=True)]
    print(f"CPU per run, {args.runs} runs a round, {args.rounds} rounds: median (min-max), tree {args.src}")
    for name, values in [*cpu.items(), ("tether's extra between requests", extra)]:
        us = [v * 1e6 for v in values]
        print(f"  {name:32} {statistics.median(us):7.1f} us ({min(us):.1f}-{max(us):.1f})")


if __name__ == "__main__":
    main()
