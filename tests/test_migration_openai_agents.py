"""docs/migrating/openai-agents.md: its tether program prints what the page says, the openai-agents program prints
the same against the same server, and the one is the other with the page's diff and nothing else."""

from __future__ import annotations

import difflib
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
PAGE = ROOT / "docs" / "migrating" / "openai-agents.md"


def block(name: str) -> str:
    """The fenced block after ``<!-- migration: name -->``."""
    found = re.search(rf"<!-- migration: {name} -->\n```\w+\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"no {name} block on the page"
    return found.group(1)


def test_the_tether_program_is_the_openai_agents_one_with_the_pages_diff_only() -> None:
    theirs, ours = block("openai-agents").splitlines(keepends=True), block("tether").splitlines(keepends=True)
    diff = list(difflib.unified_diff(theirs, ours, n=0))[2:]  # without the ---/+++ lines
    assert "".join(diff) == block("changes")


def refund_desk(overpay: float = 0.0) -> Callable[[dict[str, Any]], ReplySpec]:
    """The server: triage transfers to billing, which looks up the order and refunds what the tool said it cost
    (plus ``overpay`` until it is told the most it may refund). Asked for a structured answer, it answers text."""

    def reply(request: dict[str, Any]) -> ReplySpec:
        messages = request["messages"]
        offered = [t["function"]["name"] for t in request.get("tools", ())]
        results = [m for m in messages if m.get("role") == "tool"]
        if "transfer_to_billing" in offered:
            return tool_calls([("call_1", "transfer_to_billing", "{}")])
        if "order_total" in offered and len(results) < 2:
            return tool_calls([("call_2", "order_total", json.dumps({"order_id": "A-2"}))])
        paid = json.loads(results[1]["content"])  # the SDK sends the value, tether its envelope
        paid = paid["result"] if isinstance(paid, dict) else paid
        corrected = "refund at most" in json.dumps(messages[-1])
        amount = paid if corrected else paid + overpay
        return text(json.dumps({"order_id": "A-2", "amount": amount, "reason": "broken on arrival"}))

    return reply


def run_program(source: str, tmp_path: Path, base_url: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "desk.py"
    program.write_text(source)
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(ROOT / "src")}
    env.pop("OPENAI_MODEL", None)
    return subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, env=env)


def test_the_tether_program_prints_what_the_page_says(tmp_path: Path) -> None:
    with FakeServer(refund_desk()) as server:
        done = run_program(block("tether"), tmp_path, server.base_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == block("output")
    triage, looks_up, answers = server.requests
    assert [t["function"]["name"] for t in triage["tools"]] == ["transfer_to_billing"]
    assert "You route a customer's request" in json.dumps(triage["messages"])
    assert [t["function"]["name"] for t in looks_up["tools"]] == ["order_total"]
    assert "You refund orders" in json.dumps(looks_up["messages"])  # billing's instructions, after the handoff
    assert answers["response_format"]["type"] == "json_schema"
    assert json.loads(answers["messages"][-1]["content"]) == {"ok": True, "result": 12.5}  # the tool ran


def test_the_openai_agents_program_prints_the_same(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    with FakeServer(refund_desk()) as server:
        done = run_program(block("openai-agents"), tmp_path, server.base_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == block("output")
    assert len(server.requests) == 3


def test_a_refund_larger_than_paid_is_sent_back_by_tether_where_the_guardrail_stops_the_sdk(tmp_path: Path) -> None:
    # The page's "A refused answer is sent back, not raised".
    with FakeServer(refund_desk(overpay=7.5)) as server:
        done = run_program(block("tether"), tmp_path, server.base_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == block("output")
    assert "A-2 was paid 12.50; refund at most that" in json.dumps(server.requests[-1]["messages"][-1])
    pytest.importorskip("agents")
    with FakeServer(refund_desk(overpay=7.5)) as server:
        done = run_program(block("openai-agents"), tmp_path, server.base_url)
    assert done.returncode != 0 and done.stdout == ""
    assert "OutputGuardrailTripwireTriggered" in done.stderr
