"""What argument provenance costs per call: a tainted run that traces its sinks against the same run untraced.

    python bench/provenance.py [--rounds 7] [--steps 5] [--json]

The bare machine (``tether.core.Run``, no HTTP, no store: this measures the
trace, not the network) drives runs of one step after another. Each step
the model asks for two calls: ``read_email`` (a new folder each time; its
result is 400 characters of words, numbers and an email address, new each
step) and ``send_email`` to a recipient the principal's prompt names. Two
setups drive the same steps:

- ``untraced``: ``read_email`` is trusted and ``send_email`` has no sinks:
  the run is never tainted, nothing is traced (today's cost of a step);
- ``traced``: ``read_email`` is ``untrusted_output`` and ``send_email`` names
  ``to`` as its sink: the run is tainted, and every send is traced (the
  transcript indexed as it grows, the recipient looked up) and runs without
  approval, because the prompt holds it.

At each transcript length (10, 100 and 1,000 messages) a round builds a
fresh run of each setup up to that length, then times ``--steps`` steps
(each adds 3 messages). Printed per length: the median time per call (one
send; the step's ``read_email`` is counted in both setups) of each setup,
their ratio with its spread over rounds, and what the trace adds in
microseconds. A last column times the lookup alone against a rescan of
every message (normalising each and searching it) at the same length: the
index is what keeps a call's cost from growing with the transcript. The
exit status is always 0: a benchmark informs, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from tether.core import Begin, Budget, Message, ModelReplied, ModelReply, Run, RunConfig, RunTools, ToolsFinished
from tether.core.messages import Usage, WireToolCall
from tether.core.provenance import normalise
from tether.tools import Toolbox, tool

LENGTHS = (10, 100, 1000)
RECIPIENTS = ("bob@example.com", "carol@example.org", "dave@example.net")
PROMPT = f"Read my mail and keep {', '.join(RECIPIENTS)} posted on anything that matters."
WORDS = ("invoice", "meeting", "quarterly", "report", "travel", "budget", "review", "draft", "signed", "deadline")


def toolbox(traced: bool) -> Toolbox:
    @tool(read_only=True, untrusted_output=traced)
    def read_email(folder: str) -> str:
        """Read the newest email in a folder."""
        return ""

    @tool(sinks=("to",) if traced else None)
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        return ""

    return Toolbox([read_email, send_email])


def email(rng: random.Random, step: int) -> str:
    words = [rng.choice(WORDS) if rng.random() < 0.8 else str(rng.randrange(10**6)) for _ in range(55)]
    words.insert(rng.randrange(len(words)), f"someone{step}@sender{rng.randrange(1000)}.example")
    return " ".join(words)[:400]


def wire(call_id: str, name: str, arguments: dict[str, Any]) -> WireToolCall:
    return WireToolCall(id=call_id, type="function", name=name, arguments=json.dumps(arguments))


def step(run: Run, n: int, rng: random.Random) -> float:
    """One step of the run: the model's two calls judged, their results back. Its time, in seconds.

    The send runs without approval in both setups; in a tainted run only because its recipient was traced.
    """
    calls = (
        wire(f"r{n}", "read_email", {"folder": f"f{n}"}),
        wire(f"s{n}", "send_email", {"to": RECIPIENTS[n % 3], "body": f"note {n}"}),
    )
    reply = ModelReply(choices=1, finish_reason="tool_calls", tool_calls=calls, usage=Usage())
    results = {f"r{n}": json.dumps({"ok": True, "result": email(rng, n)}), f"s{n}": '{"ok": true, "result": "sent"}'}
    started = time.perf_counter()
    command = run.send(ModelReplied(reply, now=float(n)))
    assert isinstance(command, RunTools) and len(command.to_execute) == 2, command
    assert (f"s{n}" in run.state.traced) == run.state.tainted, "a tainted run traces each send, an untainted none"
    run.send(ToolsFinished(results, now=float(n)))
    return time.perf_counter() - started


def grown(traced: bool, length: int, seed: int) -> tuple[Run, int, random.Random]:
    """A run of ``traced``'s setup driven until its transcript holds ``length`` messages (or just more)."""
    budget = Budget(max_steps=10_000, max_tool_calls=100_000)
    run = Run.new("bench", [Message("system", "You sort mail."), Message("user", PROMPT)], toolbox(traced))
    run.send(Begin(now=0.0))
    rng, n = random.Random(seed), 0
    run.state.config = RunConfig(budget=budget)
    while len(run.state.messages) < length:
        step(run, n, rng)
        n += 1
    return run, n, rng


def measure(traced: bool, length: int, steps: int, seed: int) -> float:
    """Seconds per step over ``steps`` steps of a run grown to ``length`` messages."""
    run, n, rng = grown(traced, length, seed)
    spent = sum(step(run, n + i, rng) for i in range(steps))
    assert run.state.tainted == traced, "the traced setup is tainted, the other is not"
    return spent / steps


def lookup_against_rescan(length: int, seed: int) -> tuple[float, float]:
    """Seconds per lookup of a recipient: through the run's index, and by rescanning every message."""
    run, _, _ = grown(True, length, seed)
    state, index = run.state, run.provenance
    index.sync(state.messages, state.untrusted)
    values = [normalise(r) for r in RECIPIENTS] + ["nobody@nowhere.example"]
    repeats = 200
    started = time.perf_counter()
    for _ in range(repeats):
        for value in values:
            index.find(value)
    indexed = (time.perf_counter() - started) / (repeats * len(values))
    started = time.perf_counter()
    for _ in range(max(1, repeats // 20)):
        for value in values:
            any(value in normalise(m.content or "") for m in state.messages if m.role != "assistant")
    rescan = (time.perf_counter() - started) / (max(1, repeats // 20) * len(values))
    return indexed, rescan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for length in LENGTHS:
        ratios, traced_times, untraced_times, lookups, rescans = [], [], [], [], []
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)  # the setups take turns going first
            times = {setup: measure(setup, length, args.steps, seed=r) for setup in order}
            traced_times.append(times[True])
            untraced_times.append(times[False])
            ratios.append(times[True] / times[False])
            indexed, rescan = lookup_against_rescan(length, seed=r)
            lookups.append(indexed)
            rescans.append(rescan)
        indexed, rescan = statistics.median(lookups), statistics.median(rescans)
        figures[str(length)] = {
            "traced_us": statistics.median(traced_times) * 1e6,
            "untraced_us": statistics.median(untraced_times) * 1e6,
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "lookup_us": indexed * 1e6,
            "rescan_us": rescan * 1e6,
        }
    print(f"per call, traced (tainted, sinks traced) over untraced ({args.rounds} rounds of {args.steps} steps):")
    print(f"{'messages':>9}  {'untraced us':>12}  {'traced us':>10}  {'ratio':>18}  {'added us':>9}  "
          f"{'lookup us':>10}  {'rescan/lookup':>14}")  # fmt: skip
    for length, f in figures.items():
        spread = f"{f['ratio']:.2f}x ({f['ratio_min']:.2f}-{f['ratio_max']:.2f})"
        added = f["traced_us"] - f["untraced_us"]
        print(
            f"{length:>9}  {f['untraced_us']:>12.1f}  {f['traced_us']:>10.1f}  {spread:>18}  {added:>9.1f}  "
            f"{f['lookup_us']:>10.2f}  {f['rescan_us'] / f['lookup_us']:>13.0f}x"
        )
    first, last = figures[str(LENGTHS[0])], figures[str(LENGTHS[-1])]
    growth = (last["traced_us"] - last["untraced_us"]) / max(first["traced_us"] - first["untraced_us"], 1e-9)
    print(f"what tracing adds per call at {LENGTHS[-1]} messages over at {LENGTHS[0]}: {growth:.2f}x "
          f"(the transcript is {LENGTHS[-1] // LENGTHS[0]}x longer)")  # fmt: skip
    print(f"(measured {time.strftime('%Y-%m-%d %H:%M')}; the bare machine, no HTTP, no store)")
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
