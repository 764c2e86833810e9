"""The README's python blocks run as written, against FakeServer through OPENAI_BASE_URL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, multiply, text, tool_calls

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def readme_model(request: dict[str, Any]) -> ReplySpec:
    """What the README's examples need: an invoice as JSON, a transfer, a call of the calculator sub-agent and
    its answer quoted, an email read then sent, the multiply scenario, else an echo."""
    if "response_format" in request:
        return text(json.dumps({"customer": "ACME", "total": 3720, "note": None}))
    offered = [t["function"]["name"] for t in request.get("tools", ())]
    transfers = [name for name in offered if name.startswith("transfer_to_")]
    if transfers and request["messages"][-1]["role"] == "user":  # an agent with handoffs hands the prompt on
        return tool_calls([("call_1", transfers[0], "{}")])
    if any(t["function"]["name"] == "calculator" for t in request.get("tools", ())):
        last = request["messages"][-1]
        if last["role"] != "tool":
            return tool_calls([("call_calc", "calculator", json.dumps({"input": last["content"]}))])
        return text(f"The calculator says: {json.loads(last['content'])['result']}")
    if "send_email" in offered:  # read the email, then send to the recipient the prompt names
        last = request["messages"][-1]
        if last["role"] == "user":
            return tool_calls([("call_1", "read_email", '{"folder": "inbox"}')])
        if last.get("tool_call_id") == "call_1":
            return tool_calls([("call_2", "send_email", '{"to": "bob@example.com", "body": "Mark says hi."}')])
        return text("Sent.")
    if any(t["function"]["name"] == "multiply" for t in request.get("tools", ())):
        return multiply(request)
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    return text(f"You said: {users[-2]}" if len(users) > 1 else "Hello!")


def expected_lines(block: str) -> list[str]:
    """The output promised in ``print(...)  # promised`` comments."""
    return [line.split("  # ", 1)[1].strip() for line in block.splitlines() if "print(" in line and "  # " in line]


def test_the_readme_has_examples_for_each_feature() -> None:
    joined = "\n".join(BLOCKS)
    features = ("run_sync", "output_type=", "conversation()", "deps=", "agent.stream(", "decide(", ".as_tool(")
    more = ("@agent.instructions", "@agent.output_validator", "message_history=", "handoffs=", "sinks=")
    for feature in (*features, *more):
        assert feature in joined, feature


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_readme_block_runs_as_written(block: str, tmp_path: Path) -> None:
    with FakeServer(readme_model) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test",
            "PYTHONPATH": str(REPO / "src"),
        }
        done = subprocess.run(
            [sys.executable, "-W", "default", "-c", block],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = [line.strip() for line in done.stdout.splitlines()]
    for promised in expected_lines(block):
        assert promised in lines, (promised, done.stdout)
