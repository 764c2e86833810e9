"""What the Anthropic Messages and OpenAI Responses adapters cost against the chat-completions adapter.

    python bench/protocols.py [--quick] [--json]

One run is the ``multiply`` scenario of ``bench/run.py`` (two round trips:
the model asks ``multiply(248, 15)``, then answers), by a default ``Agent``
with the ``calc`` toolset over ``AnthropicModel`` (``/v1/messages``), over
``OpenAIResponsesModel`` (``/v1/responses``) and over ``OpenAIChatModel``
(``/v1/chat/completions``), all against one fake server process, all on
aiohttp. Batches alternate; medians of per-run host CPU and wall are
compared, plain and streamed. Target: anthropic/openai and responses/openai
CPU ≤ 1.2x. The exit status is always 0: a benchmark informs, it does not
pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from durable import close_agent, verdict
from run import compare, fake_server, sequential, tether_runner

from tether.drivers.local.runner import Agent
from tether.models.anthropic import AnthropicModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_responses import OpenAIResponsesModel
from tether.toolsets import load_toolset

TARGET = 1.2


async def bench(base_url: str, stream: bool, batch: int, rounds: int) -> dict[str, dict[str, float]]:
    origin = base_url.removesuffix("/v1")
    agents = {
        "anthropic": Agent(AnthropicModel("fake", base_url=origin, api_key="x", stream=stream), load_toolset("calc")),
        "responses": Agent(
            OpenAIResponsesModel("fake", base_url=base_url, api_key="x", stream=stream), load_toolset("calc")
        ),
        "openai": Agent(OpenAIChatModel("fake", base_url=base_url, api_key="x", stream=stream), load_toolset("calc")),
    }
    try:
        medians = await compare({name: tether_runner(a) for name, a in agents.items()}, sequential, batch, rounds)
    finally:
        for agent in agents.values():
            await close_agent(agent)
    return {side: {k: v / batch for k, v in m.items()} for side, m in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs: a smoke test, noisier numbers")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = parser.parse_args()
    runs, rounds = (60, 3) if args.quick else (300, 6)
    batch = runs // rounds
    results: dict[str, Any] = {}
    with fake_server(0.0) as url:
        for stream in (False, True):
            results["streamed" if stream else "plain"] = asyncio.run(bench(url, stream, batch, rounds))
    print(f"{runs} sequential runs per side in {rounds} alternating batches, medians per run")
    ratios = {}
    for mode, per_run in results.items():
        o = per_run["openai"]
        for side in ("anthropic", "responses"):
            a = per_run[side]
            for measure in ("cpu", "wall"):
                ratio = a[measure] / o[measure]
                ratios[f"{side}_{mode}_{measure}"] = ratio
                judged = verdict(ratio, TARGET) if measure == "cpu" else "(for orientation)"
                print(
                    f"  {mode:8s} per-run {measure:4s} {side}/openai = {ratio:.2f}x  {judged:24s}"
                    f"  {side} {a[measure] * 1e3:.3f} ms, openai {o[measure] * 1e3:.3f} ms"
                )
    if args.json:
        print(json.dumps({"ratios": ratios, "per_run": results}, indent=2))


if __name__ == "__main__":
    main()
