"""Count the function calls per run, a deterministic guide where wall-clock benches are noisy.

    .venv/bin/python bench/calls.py                       # tether in memory and the bare loop, 200 runs each
    .venv/bin/python bench/calls.py --concurrent 500      # the same runs started at once (asyncio.gather)
    .venv/bin/python bench/calls.py --setups memory --top 40

The same workload as ``bench/overhead.py`` (its fake server in another
process, the same ``multiply`` tool with ``read_only=True``, every gate on),
profiled with cProfile over ``--runs`` runs after 20 warm-up runs. Printed
per setup: all calls per run (Python and builtin, as cProfile counts them),
the calls made in tether's own code (``src/tether``) per run, then the
``--top`` functions by their own calls per run. Comparing ``--concurrent 1``
with ``--concurrent 500`` shows what grows with the number of runs in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The tree measured: this one's src, or another's (``--src``, read before anything of tether is imported).
SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else str(HERE.parent / "src")
sys.path.insert(0, SRC)

import aiohttp  # noqa: E402
from overhead import fake_server  # noqa: E402


async def multiply(a: int, b: int) -> int:
    return a * b


def bare_runner(session: aiohttp.ClientSession, base_url: str) -> Any:
    url = f"{base_url}/chat/completions"
    tools = [
        {
            "type": "function",
            "function": {
                "name": "multiply",
                "description": "Multiply two integers.",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                    "additionalProperties": False,
                },
            },
        }
    ]

    async def once() -> Any:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 248 times 15?"}]
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


async def measure(setup: str, base_url: str, runs: int, concurrent: int) -> pstats.Stats:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer k"}) as session:
        agent = None
        if setup == "bare":
            once = bare_runner(session, base_url)
        else:
            from tether import Agent, OpenAIChatModel, tool

            agent = Agent(OpenAIChatModel("fake", base_url=base_url, api_key="k"), [tool(read_only=True)(multiply)])

            async def once() -> Any:
                return (await agent.run("What is 248 times 15?")).output

        for _ in range(20):
            assert "3720" in str(await once())
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(runs // concurrent):
            await asyncio.gather(*(once() for _ in range(concurrent)))
        profile.disable()
        if agent is not None:
            await agent.aclose()
    return pstats.Stats(profile)


def where(filename: str) -> str:
    for marker in ("/src/", "site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker)[-1]
    return filename


def report(setup: str, stats: pstats.Stats, runs: int, top: int) -> dict[str, Any]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[1] for entry in raw.values())
    own = sum(entry[1] for key, entry in raw.items() if "/tether/" in key[0])
    print(f"{setup}: {total / runs:,.1f} calls per run, {own / runs:,.1f} of them in tether's code")
    ranked = sorted(raw.items(), key=lambda item: -item[1][1])[:top]
    for (filename, line, name), entry in ranked:
        print(f"  {entry[1] / runs:8.2f}  {where(filename)}:{line}({name})")
    if own:
        print(f"  tether's functions by own calls per run (top {top}):")
        mine = sorted(((k, e) for k, e in raw.items() if "/tether/" in k[0]), key=lambda item: -item[1][1])[:top]
        for (filename, line, name), entry in mine:
            print(f"  {entry[1] / runs:8.2f}  {where(filename)}:{line}({name})")
    per_function = {key: entry[1] / runs for key, entry in raw.items()}
    return {"calls": total / runs, "own": own / runs, "per_function": per_function}


def compare(base: dict[Any, float], other: dict[Any, float], top: int) -> None:
    """The functions called more often per run in ``other`` than in ``base``, most first."""
    keys = set(base) | set(other)
    grown = sorted(((other.get(k, 0.0) - base.get(k, 0.0), k) for k in keys), reverse=True)[:top]
    print(f"  called more per run than in bare (top {top}):")
    for delta, (filename, line, name) in grown:
        if delta > 0.5:
            print(f"  {delta:+8.2f}  {where(filename)}:{line}({name})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=1)
    parser.add_argument("--setups", default="bare,memory")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--src", default=SRC, help="the src folder of the tree to measure (default: this one's)")
    args = parser.parse_args()
    runs = max(args.runs, args.concurrent) // args.concurrent * args.concurrent
    server, base_url = fake_server()
    figures = {}
    try:
        for setup in args.setups.split(","):
            stats = asyncio.run(measure(setup, base_url, runs, args.concurrent))
            figures[setup] = report(setup, stats, runs, args.top)
            if setup != "bare" and "bare" in figures:
                compare(figures["bare"]["per_function"], figures[setup]["per_function"], args.top)
    finally:
        server.terminate()
        server.wait(10)
    if args.json:
        for entry in figures.values():
            entry.pop("per_function")
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
