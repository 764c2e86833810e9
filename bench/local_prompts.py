"""How often the embedded model does the main job: prompts through ``tether run``, offline.

    python bench/local_prompts.py [--model GGUF] [--only KIND] [--json]

Each line of ``bench/local_prompts.jsonl`` is one prompt with the toolsets it
is offered, its kind (``one-step`` and ``two-step`` arithmetic, ``time`` in a
named zone, ``no-tool``) and a checker: ``expect``, a number the answer
must end on (its last number: "125 divided by 8 is 12" is no answer to
1000 / 8, though it contains 125) or a word it must contain
(case-insensitive), or ``expect_time_in``, a zone whose current
``HH:MM`` (or the minute before) the answer must contain. ``first_call`` is
the call a correct first step makes (``null``: no call at all); arguments of
``add`` and ``multiply`` may come in either order.

Every prompt runs as a user would run it: ``tether run PROMPT --tools ...
--json --db SCRATCH`` in a subprocess with no endpoint configured, so the
embedded model (or ``--model``'s GGUF) answers; the first call is read back
from the scratch run store. Printed per prompt: solved
or not, the run's status, whether the first call was right, the wall time;
then the success rate, the first-call accuracy and the median wall time per
kind and overall. A benchmark informs: the exit status is always 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

HERE = Path(__file__).resolve().parent
PROMPTS = HERE / "local_prompts.jsonl"
COMMUTATIVE = {"add", "multiply"}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def load(only: str | None) -> list[dict[str, Any]]:
    prompts = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    return [p for p in prompts if only is None or p["kind"] == only]


def solved(case: dict[str, Any], output: str | None, started: datetime) -> bool:
    if not output:
        return False
    expect = str(case.get("expect", ""))
    if NUMBER.fullmatch(expect):
        numbers = NUMBER.findall(output.replace(",", ""))
        return bool(numbers) and float(numbers[-1]) == float(expect)
    if expect:
        return expect.lower() in output.lower()
    zone = ZoneInfo(case["expect_time_in"])
    moments = {(started - timedelta(minutes=m)).astimezone(zone) for m in (-1, 0, 1)}
    return any(f"{t:%H:%M}" in output for t in moments)


def first_call(db: Path, run_id: str) -> tuple[str, Any] | None:
    """The first call the model asked for in a recorded run, with its arguments (None: it asked for none)."""
    from tether.store import SQLiteStore

    store = SQLiteStore(db)
    try:
        messages = store.load(run_id).state.messages
    finally:
        store.close()
    for message in messages:
        if message.role == "assistant":
            if not message.tool_calls:
                return None
            call = message.tool_calls[0]
            try:
                return call.name, json.loads(call.arguments)
            except ValueError:
                return call.name, call.arguments
    return None


def first_call_right(case: dict[str, Any], first: tuple[str, Any] | None) -> bool:
    want = case["first_call"]
    if want is None or first is None:
        return want is None and first is None
    tool, arguments = first
    if tool != want["tool"]:
        return False
    if arguments == want["arguments"]:
        return True
    return (
        want["tool"] in COMMUTATIVE
        and isinstance(arguments, dict)
        and sorted(arguments.values()) == sorted(want["arguments"].values())
    )


def run_one(case: dict[str, Any], model: str | None, db: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "tether", "run", case["prompt"], "--json", "--db", str(db)]
    for toolset in case["tools"]:
        command += ["--tools", toolset]
    if model:
        command += ["--local-model", model]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    started_at = datetime.now().astimezone()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return {"case": case, "status": f"exit {done.returncode}", "solved": False, "first": False, "wall": wall,
                "output": done.stderr.strip()[-200:]}  # fmt: skip
    return {
        "case": case,
        "status": report["status"],
        "solved": report["status"] == "completed" and solved(case, report.get("output"), started_at),
        "first": first_call_right(case, first_call(db, report["run_id"])),
        "wall": wall,
        "output": report.get("output"),
    }


def summary(label: str, rows: list[dict[str, Any]]) -> str:
    n = len(rows)
    ok = sum(r["solved"] for r in rows)
    first = sum(r["first"] for r in rows)
    median = statistics.median(r["wall"] for r in rows)
    return (
        f"{label:<10} solved {ok:>2}/{n:<2} ({ok / n:4.0%})  first call right {first:>2}/{n:<2}  median {median:5.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GGUF file to run instead of the embedded SmolLM2-135M")
    parser.add_argument("--only", choices=["one-step", "two-step", "time", "no-tool"])
    parser.add_argument("--json", action="store_true", help="also print every row as JSON")
    args = parser.parse_args()
    rows = []
    scratch = tempfile.TemporaryDirectory()
    for case in load(args.only):
        row = run_one(case, args.model, Path(scratch.name) / "bench.db")
        rows.append(row)
        mark = "solved" if row["solved"] else "failed"
        answer = " ".join(str(row["output"] or "").split())[:70]
        print(
            f"{mark:<7} {row['status']:<17} first {'ok ' if row['first'] else 'bad'} {row['wall']:5.1f} s  "
            f"{case['prompt'][:45]:<45} -> {answer}",
            flush=True,
        )
    print()
    for kind in dict.fromkeys(r["case"]["kind"] for r in rows):
        print(summary(kind, [r for r in rows if r["case"]["kind"] == kind]))
    print(summary("all", rows))
    if args.json:
        print(json.dumps([{**r, "case": r["case"]["prompt"]} for r in rows]))


if __name__ == "__main__":
    main()
