"""docs/migrating/hand-written-loop.md: the loop and its tether port print the same on a good reply, and what the
page's table says on the misbehaving ones (the loop runs a call cut at ``length`` and ``multiply(True, 15)``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.testing import FakeServer
from tether.testing.replies import ReplySpec, text, tool_calls

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migrating" / "hand-written-loop.md"

RIGHT = tool_calls([("call_2", "multiply", '{"a": 248, "b": 15}')])
# The table's first column -> the reply it names.
FIRST_REPLIES = {
    '`multiply(248, 1)`, cut off with `finish_reason="length"`': tool_calls(
        [("call_1", "multiply", '{"a": 248, "b": 1}')], finish_reason="length"
    ),
    "`multiply(true, 15)`": tool_calls([("call_1", "multiply", '{"a": true, "b": 15}')]),
}


def block(name: str) -> str:
    """The fenced block after ``<!-- migration: name -->``."""
    found = re.search(rf"<!-- migration: {name} -->\n```\w+\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"no {name} block on the page"
    return found.group(1)


def misbehaving() -> list[tuple[str, str, str]]:
    """The page's table: (the first reply, what the loop prints, what tether prints)."""
    table = PAGE.read_text().split("<!-- migration: misbehaving -->\n", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (.+?) \| `(.+?)` \| `(.+?)` \|$", table, re.M)
    assert len(rows) == len(FIRST_REPLIES), "a row of the table the test has no reply for"
    return rows


def multiplier(first: ReplySpec) -> Callable[[dict[str, Any]], ReplySpec]:
    """The server: ``first``, then the tool's result in a sentence, or the right call after an error."""

    def reply(request: dict[str, Any]) -> ReplySpec:
        last = request["messages"][-1]
        if last.get("role") != "tool":
            return first
        result = json.loads(last["content"])  # the loop sends the value, tether its envelope
        if isinstance(result, dict):
            if not result["ok"]:
                return RIGHT
            result = result["result"]
        return text(f"248 × 15 = {result}")

    return reply


def run_program(source: str, tmp_path: Path, first: ReplySpec) -> tuple[str, list[dict[str, Any]]]:
    program = tmp_path / "multiply.py"
    program.write_text(source)
    with FakeServer(multiplier(first)) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
        env["PYTHONPATH"] = str(ROOT / "src")
        env.pop("OPENAI_MODEL", None)
        done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout, server.requests


@pytest.mark.parametrize("program", ["loop", "tether"])
def test_both_programs_print_the_same_on_a_good_reply(program: str, tmp_path: Path) -> None:
    printed, requests = run_program(block(program), tmp_path, RIGHT)
    assert printed == block("output")
    assert len(requests) == 2


@pytest.mark.parametrize("row", range(len(FIRST_REPLIES)))
def test_on_a_misbehaving_reply_the_loop_prints_a_wrong_answer_and_tether_does_not(row: int, tmp_path: Path) -> None:
    first, by_the_loop, by_tether = misbehaving()[row]
    printed, requests = run_program(block("loop"), tmp_path, FIRST_REPLIES[first])
    assert printed == by_the_loop + "\n"
    assert printed != block("output")  # the loop ran the call
    printed, requests = run_program(block("tether"), tmp_path, FIRST_REPLIES[first])
    assert printed == by_tether + "\n"
    if "length" in first:
        assert len(requests) == 1  # nothing ran, nothing was sent back
    else:
        refused = json.loads(requests[1]["messages"][-1]["content"])
        assert refused["ok"] is False and refused["error"]["code"] == "invalid_arguments"
