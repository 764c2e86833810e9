"""The python blocks of README.md and of the site's pages run as written, against FakeServer through OPENAI_BASE_URL.

A block is run as a script in a fresh directory; the output promised in a
``print(...)  # promised`` comment must appear. A block titled as a file
(```python title="agent.py"```) is that file: the test serves it with
``tether serve`` and makes the requests the page shows. The generated
reference pages and the migration pages (docs/reference, docs/migrating)
are tested by their own tests. README.md's relative links must resolve, and
it stays short.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, multiply, text, tool_calls

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
OWN_TESTS = ("reference", "migrating")  # tested by tests/test_docs.py and tests/test_migration.py
FENCE = re.compile(r'^```python(?:[ \t]+title="(?P<title>[^"]+)")?[ \t]*\n(?P<code>.*?)^```[ \t]*$', re.M | re.S)


def pages() -> list[Path]:
    """README.md and every page of the site whose blocks this file runs."""
    site = sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in OWN_TESTS)
    return [REPO / "README.md", *site]


def blocks(titled: bool) -> list[tuple[str, str, str | None]]:
    """(id, code, title) of each python block: the untitled ones (scripts), or the titled ones (files)."""
    found = []
    for page in pages():
        name = str(page.relative_to(REPO))
        for index, match in enumerate(FENCE.finditer(page.read_text())):
            if (match["title"] is not None) == titled:
                found.append((f"{name}:{index}", match["code"], match["title"]))
    return found


SCRIPTS = blocks(titled=False)
FILES = blocks(titled=True)


def docs_model(request: dict[str, Any]) -> ReplySpec:
    """What the pages' examples need: an invoice as JSON, a transfer, a call of the calculator sub-agent and
    its answer quoted, an email read then sent, a refund asked for, the multiply scenario, else an echo."""
    if "response_format" in request:
        return text(json.dumps({"customer": "ACME", "total": 3720, "note": None}))
    offered = [t["function"]["name"] for t in request.get("tools", ())]
    last = request["messages"][-1]
    transfers = [name for name in offered if name.startswith("transfer_to_")]
    if transfers and last["role"] == "user":  # an agent with handoffs hands the prompt on
        return tool_calls([("call_1", transfers[0], "{}")])
    if "calculator" in offered:
        if last["role"] != "tool":
            return tool_calls([("call_calc", "calculator", json.dumps({"input": last["content"]}))])
        return text(f"The calculator says: {json.loads(last['content'])['result']}")
    if "send_email" in offered:  # read the email, then send to the recipient the prompt names
        if last["role"] == "user":
            return tool_calls([("call_1", "read_email", '{"folder": "inbox"}')])
        if last.get("tool_call_id") == "call_1":
            return tool_calls([("call_2", "send_email", '{"to": "bob@example.com", "body": "Mark says hi."}')])
        return text("Sent.")
    if "refund" in offered:  # the served agent.py: refund the order the prompt names
        if last["role"] == "user":
            return tool_calls([("call_1", "refund", '{"order_id": "A1", "amount": 42}')])
        return text(f"Done: {json.loads(last['content'])['result']}.")
    if "multiply" in offered:
        return multiply(request)
    users = [m["content"] for m in request["messages"] if m["role"] == "user"]
    return text(f"You said: {users[-2]}" if len(users) > 1 else "Hello!")


def expected_lines(block: str) -> list[str]:
    """The output promised in ``print(...)  # promised`` comments."""
    return [line.split("  # ", 1)[1].strip() for line in block.splitlines() if "print(" in line and "  # " in line]


def model_env(server: FakeServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_", "ANTHROPIC_"))}
    return {**env, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(REPO / "src")}


def test_the_site_has_examples_for_each_feature() -> None:
    joined = "\n".join(code for _, code, _ in SCRIPTS)
    features = ("run_sync", "output_type=", "conversation()", "deps=", "agent.stream(", "decide(", ".as_tool(")
    more = ("@agent.instructions", "@agent.output_validator", "message_history=", "handoffs=", "sinks=", "approver=")
    for feature in (*features, *more):
        assert feature in joined, feature


def test_every_python_block_of_the_old_readme_still_runs() -> None:
    """The README's 18 blocks moved to the site, none dropped; the site adds a step, the README its example."""
    assert len(SCRIPTS) >= 21, [name for name, _, _ in SCRIPTS]
    assert [title for _, _, title in FILES] == ["agent.py"]


def test_no_python_block_escapes_the_collection() -> None:
    """An indented fence, ```py or ```python3 would not run: every fence naming python is one FENCE reads."""
    anything = re.compile(r"^[ \t]*```[ \t]*\{?[ \t]*\.?py", re.M)
    for page in pages():
        text = page.read_text()
        assert len(anything.findall(text)) == len(FENCE.findall(text)), page


@pytest.mark.parametrize(("name", "block"), [(n, c) for n, c, _ in SCRIPTS], ids=[n for n, _, _ in SCRIPTS])
def test_a_python_block_runs_as_written(name: str, block: str, tmp_path: Path) -> None:
    with FakeServer(docs_model) as server:
        done = subprocess.run(
            [sys.executable, "-W", "default", "-c", block],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=model_env(server),
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = [line.strip() for line in done.stdout.splitlines()]
    for promised in expected_lines(block):
        assert promised in lines, (promised, done.stdout)


def http(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def settled(base: str, run_id: str) -> dict[str, Any]:
    """The run once it has finished or waits for someone (the service drives it in the background)."""
    for _ in range(600):
        run: dict[str, Any] = http("GET", f"{base}/runs/{run_id}")
        if run["status"] not in ("ready", "awaiting_model", "awaiting_tools"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never settled: {run}")


def listening(process: subprocess.Popen[str], port: int) -> bool:
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            if process.poll() is not None:
                return False
            time.sleep(0.1)
    return False


def test_the_served_agent_py_of_get_started_serves_runs_and_takes_an_approval(tmp_path: Path) -> None:
    """`tether serve agent.py:agent`, then the requests the page shows: a run, its approval, the answer."""
    [(_, code, _)] = [block for block in FILES if block[0].startswith("docs/get-started.md")]
    (tmp_path / "agent.py").write_text(code)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    with FakeServer(docs_model) as server:
        serve = [sys.executable, "-m", "tether", "serve", "agent.py:agent", "--port", str(port), "--db", "runs.db"]
        process = subprocess.Popen(
            serve, cwd=tmp_path, env=model_env(server), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            assert listening(process, port), process.communicate(timeout=30)[0]
            run_id = http("POST", f"{base}/runs", {"prompt": "Refund order A1"})["run_id"]
            assert settled(base, run_id)["status"] == "awaiting_approval"
            [item] = http("GET", f"{base}/approvals")["approvals"]
            assert item["tool"] == "refund" and item["arguments"] == {"order_id": "A1", "amount": 42}
            decision = {"approve": True, "fingerprint": item["fingerprint"]}
            http("POST", f"{base}/runs/{run_id}/approvals/{item['call_id']}", decision)
            done = settled(base, run_id)
        finally:
            process.terminate()
            process.communicate(timeout=60)
    assert done["status"] == "completed", done
    assert done["output"] == "Done: refunded 42 on order A1."


def test_the_readme_is_short_and_its_relative_links_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert relative, "the README links into the docs"
    for link in relative:
        assert (REPO / link.split("#", 1)[0]).exists(), link
