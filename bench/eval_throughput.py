"""Throughput of ``tether eval``: BFCL cases against a fake model with a fixed latency.

    python bench/eval_throughput.py [--cases 200] [--latency 0.2] [--concurrency 16]

Two processes besides this one: a fake model server (this file again,
``--serve-fake``: ``tether.testing.FakeServer`` answering every case of
``BFCL_v4_simple_python.json`` with its possible answer as tool calls, after
``--latency`` seconds), and the real command, ``tether eval FILE --limit N
--concurrency C --out TMPDIR``. Every case costs one model request, so the
ideal wall time is ``cases × 1 × latency / concurrency``.

Printed, as ratios measured in this run:

- ``tether eval`` wall / ideal: the whole command, interpreter start and
  dataset loading included (target ≤ 1.3×);
- ``run_eval`` wall / ideal: the library call in this process, without the
  start-up, for orientation;
- the accuracy reported (the fake model answers right, so about 100%).

A benchmark informs; the exit status is 0 whatever the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "fixtures" / "bfcl" / "BFCL_v4_simple_python.json"


def _first(options: list[Any]) -> tuple[bool, Any]:
    for option in options:
        if option != "":
            return True, option
    return False, None


def _answer(ground_truth: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The first acceptable value of every parameter (nested dicts hold lists of options)."""
    calls = []
    for entry in ground_truth:
        ((name, params),) = entry.items()
        arguments = {}
        for param, options in params.items():
            ok, value = _first(options)
            if ok and isinstance(value, dict):
                value = {k: v for k, (keep, v) in ((k, _first(o)) for k, o in value.items()) if keep}
            if ok:
                arguments[param] = value
        calls.append((name.replace(".", "-"), json.dumps(arguments)))
    return calls


def serve_fake(port: int, latency: float) -> None:
    from tether.eval import load
    from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

    answers = {}
    for case in load(DATASET):
        key = json.dumps([[m.role, m.content] for m in case.messages])
        answers[key] = _answer(list(case.ground_truth or ()))

    def respond(request: dict[str, Any]) -> ReplySpec:
        calls = answers.get(json.dumps([[m["role"], m["content"]] for m in request["messages"]]))
        if not calls:
            return text("no answer for this case")
        return tool_calls([(f"call_{i}", name, args) for i, (name, args) in enumerate(calls)])

    asyncio.run(FakeServer(respond, latency=latency, port=port).serve_forever())


def _start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, __file__, "--serve-fake", "0", "--latency", str(latency)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    line = server.stdout.readline()  # "listening on http://127.0.0.1:PORT/v1"
    return server, line.split()[-1]


async def _library(base_url: str, cases: int, concurrency: int) -> float:
    from tether.eval import load, run_eval
    from tether.models.openai_chat import OpenAIChatModel

    chosen = load(DATASET)[:cases]
    model = OpenAIChatModel("fake", base_url=base_url, api_key="x")
    started = time.perf_counter()
    try:
        await run_eval(model, chosen, concurrency=concurrency)
    finally:
        await model.aclose()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_fake(args.serve_fake, args.latency)
        return

    ideal = args.cases * 1 * args.latency / args.concurrency
    server, base_url = _start_server(args.latency)
    try:
        with tempfile.TemporaryDirectory() as out:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
            env["PYTHONPATH"] = str(ROOT / "src")
            argv = [sys.executable, "-m", "tether", "eval", str(DATASET), "--limit", str(args.cases)]
            argv += ["--concurrency", str(args.concurrency), "--out", out, "--json"]
            argv += ["--base-url", base_url, "--model", "fake", "--api-key", "x"]
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
            command_wall = time.perf_counter() - started
            if done.returncode != 0:
                sys.exit(f"tether eval failed ({done.returncode}): {done.stderr}")
            summary = json.loads(done.stdout.splitlines()[0])
        library_wall = asyncio.run(_library(base_url, args.cases, args.concurrency))
    finally:
        server.terminate()
        server.wait()

    print(f"{args.cases} cases, 1 request each, latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}")
    print(f"ideal wall                   {ideal:6.2f} s")
    print(f"tether eval wall / ideal     {command_wall:6.2f} s  {command_wall / ideal:5.2f}x  (target <= 1.3x)")
    print(f"run_eval wall / ideal        {library_wall:6.2f} s  {library_wall / ideal:5.2f}x")
    print(f"accuracy reported            {100 * summary['accuracy']:6.1f} %")


if __name__ == "__main__":
    main()
