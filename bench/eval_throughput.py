"""Throughput of ``tether eval``: BFCL cases against a fake model with a fixed latency.

    python bench/eval_throughput.py [--cases 200] [--latency 0.2] [--concurrency 16] [--runs 3]

Two processes besides this one: a fake model server (this file again,
``--serve-fake``: ``tether.testing.FakeServer`` answering every case of
``BFCL_v4_simple_python.json`` with its possible answer as tool calls, after
``--latency`` seconds), and the real command, ``tether eval FILE --limit N
--concurrency C --out TMPDIR``. The server counts the requests it answers,
so the requests per case are measured, not assumed; the ideal wall time is
``cases × requests per case × latency / concurrency``.

Printed, per run and as the median of ``--runs`` runs (alternating):

- ``tether eval`` wall / ideal: the whole command, interpreter start, imports
  and dataset loading included (target ≤ 1.3×);
- ``run_eval`` wall / ideal: the library call in this process, without the
  start-up, for orientation;
- the floor a perfect scheduler meets: ``ceil(cases / concurrency)`` waves
  of one latency each (200 cases at 16: 13 waves, 2.6 s, 1.04× the ideal);
- the accuracy reported (the fake model answers right, so about 100%).

A benchmark informs; the exit status is 0 whatever the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "fixtures" / "bfcl" / "BFCL_v4_simple_python.json"
COUNT = "__how many requests? (bench/eval_throughput.py)__"


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

    answered = 0

    def respond(request: dict[str, Any]) -> ReplySpec:
        nonlocal answered
        if request["messages"][-1]["content"] == COUNT:  # the bench asks how many requests were answered
            return text(str(answered))
        answered += 1
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


def _answered(base_url: str) -> int:
    """How many requests the fake server has answered so far."""
    body = json.dumps({"model": "fake", "messages": [{"role": "user", "content": COUNT}]}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return int(json.loads(reply.read())["choices"][0]["message"]["content"])


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


def _command(base_url: str, cases: int, concurrency: int) -> tuple[float, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_", "CI"))}
        env["PYTHONPATH"] = str(ROOT / "src")
        argv = [sys.executable, "-m", "tether", "eval", str(DATASET), "--limit", str(cases)]
        argv += ["--concurrency", str(concurrency), "--out", out, "--json"]
        argv += ["--base-url", base_url, "--model", "fake", "--api-key", "x"]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"tether eval failed ({done.returncode}): {done.stderr}")
        summary: dict[str, Any] = json.loads(done.stdout.splitlines()[0])
        return wall, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake is not None:
        serve_fake(args.serve_fake, args.latency)
        return

    server, base_url = _start_server(args.latency)
    commands: list[float] = []
    libraries: list[float] = []
    requests = 0
    try:
        for _ in range(args.runs):
            before = _answered(base_url)
            wall, summary = _command(base_url, args.cases, args.concurrency)
            requests = _answered(base_url) - before
            commands.append(wall)
            libraries.append(asyncio.run(_library(base_url, args.cases, args.concurrency)))
    finally:
        server.terminate()
        server.wait()

    per_case = requests / args.cases
    ideal = args.cases * per_case * args.latency / args.concurrency
    floor = math.ceil(args.cases * per_case / args.concurrency) * args.latency
    print(
        f"{args.cases} cases, {requests} requests ({per_case:g} a case), latency {args.latency * 1000:.0f} ms, "
        f"concurrency {args.concurrency}, {args.runs} runs"
    )
    print(f"ideal wall                   {ideal:6.2f} s")
    print(f"floor (whole waves)          {floor:6.2f} s  {floor / ideal:5.2f}x")
    for label, walls, target in (("tether eval", commands, "  (target <= 1.3x)"), ("run_eval", libraries, "")):
        runs = " ".join(f"{w / ideal:.2f}x" for w in walls)
        median = statistics.median(walls)
        print(f"{label + ' wall / ideal':<28} {median:6.2f} s  {median / ideal:5.2f}x median; runs {runs}{target}")
    print(f"accuracy reported            {100 * summary['accuracy']:6.1f} %")


if __name__ == "__main__":
    main()
