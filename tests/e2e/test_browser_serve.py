"""The page of a served agent, end to end: ``tether serve agent.py:agent`` for real, driven in headless Chromium.

The server is the CLI in a process of its own, serving the 20-line agent of
tests/serve/serve_harness.py with API keys made by ``tether keys create``;
the model is a ``FakeServer``. ``serve_page.mjs`` (Node, playwright-core,
Debian's Chromium) pastes alice's key, starts a run, and sees it wait; bob
(an approver) pastes his, finds the call in his inbox with its arguments
(the secret one shown as redacted), the run's prompt and why it waits,
approves it from the keyboard; alice's page shows the result. Python then
checks the tool ran once. Hostile text (a prompt, tool arguments, a tool
result, a model's answer holding ``<script>`` and ``<img onerror>``) must
render as text. With ``--auth none`` the page needs no key (and a refund
denied from the inbox never runs). A refund a SIGKILL cut off is settled in
the inbox's form, and never runs again.

Needs, once per machine (CI too), as tests/e2e/test_browser.py does::

    apt-get update && apt-get install -y chromium
    npm ci --prefix tests/e2e        # or: npm install --prefix tests/e2e

Without them the tests skip, unless TETHER_REQUIRE_BROWSER is set: then they fail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chromium import CHROMIUM, require_browser

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "serve_page.mjs"
SRC = HERE.parents[1] / "src"
HOSTILE = """<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><x-evil>"""

pytestmark = pytest.mark.timeout(240)

if str(HERE.parent / "serve") not in sys.path:
    sys.path.insert(0, str(HERE.parent / "serve"))

from serve_harness import AGENT_PY, free_port, wait_listening  # noqa: E402
from test_serve_runs import HANGING_REFUND  # noqa: E402

from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls  # noqa: E402


@pytest.fixture(autouse=True)
def _browser_available() -> None:
    require_browser("browser e2e")


def desk(request: dict[str, Any]) -> ReplySpec:
    """The refund desk, refunding the order the prompt names: ``refund ORDER`` (else A7); ``say: X`` → ``You said X``.

    Whatever the prompt holds goes into the calls' arguments, the lookup's result and the answer, so hostile
    text in a prompt reaches the page by every road.
    """
    messages = request["messages"]
    last = messages[-1]
    prompt = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if prompt.startswith("say: "):
        return text("You said " + prompt.removeprefix("say: "))
    order = prompt.removeprefix("refund ").strip() if prompt.startswith("refund ") else "A7"
    n = len(messages)
    if last["role"] == "user":
        return tool_calls([(f"call_lookup_{n}", "lookup_order", json.dumps({"order_id": order}))])
    if last["role"] == "tool" and last["tool_call_id"].startswith("call_lookup"):
        arguments = {"order_id": order, "amount": 42, "api_token": "sk-live-secret-123456789012345678"}
        return tool_calls([(f"call_refund_{n}", "refund", json.dumps(arguments))])
    return text(f"Refunded 42 on order {order}.")


@dataclass
class Service:
    agent_py: Path
    db: Path
    auth: str
    env: dict[str, str]
    refunds: Path
    base_url: str = ""

    def refunds_made(self) -> list[str]:
        return self.refunds.read_text().splitlines() if self.refunds.exists() else []

    @contextmanager
    def process(self) -> Iterator[subprocess.Popen[bytes]]:
        """``tether serve agent.py:agent --auth AUTH`` in a process of its own; stopped at the end unless gone."""
        port = free_port()
        command = ["serve", f"{self.agent_py}:agent", "--auth", self.auth, "--db", str(self.db), "--port", str(port)]
        process = subprocess.Popen(
            [sys.executable, "-m", "tether", *command], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            assert wait_listening(process, port), process.stderr.read().decode() if process.stderr else ""
            self.base_url = f"http://127.0.0.1:{port}"
            yield process
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
            if process.stderr is not None:
                process.stderr.close()

    def call(self, method: str, path: str, key: str, body: Any = None) -> Any:
        """The API as any client calls it (to set a scene up for the page)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())


def tether(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, timeout=60)


def make_key(db: Path, env: dict[str, str], principal: str, *roles: str) -> str:
    options = [opt for role in roles for opt in ("--roles", role)]
    made = tether("keys", "create", "--principal", principal, *options, "--db", str(db), "--json", env=env)
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["key"])


@contextmanager
def setup(tmp_path: Path, auth: str, agent: str = AGENT_PY) -> Iterator[Service]:
    """The agent's file, its run store (with alice's and bob's keys), its model: ready to serve."""
    agent_py, db, refunds = tmp_path / "agent.py", tmp_path / "runs.db", tmp_path / "refunds.log"
    agent_py.write_text(agent)
    with FakeServer(desk) as model:
        env = {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-x",
               "REFUNDS_LOG": str(refunds), "TETHER_LOG_LEVEL": "warning"}  # fmt: skip
        if auth == "keys":
            env |= {"ALICE_KEY": make_key(db, env, "alice"), "BOB_KEY": make_key(db, env, "bob", "approver")}
        yield Service(agent_py, db, auth, env, refunds)


@contextmanager
def serving(tmp_path: Path, auth: str) -> Iterator[Service]:
    with setup(tmp_path, auth) as service, service.process():
        yield service


def drive(service: Service, scenario: str, tmp_path: Path) -> str:
    """Run ``serve_page.mjs`` through ``scenario``; its output, once every step of it passed."""
    env = {**service.env, "SCREENSHOT_DIR": str(tmp_path / "screenshots"), "CHROMIUM_PATH": str(CHROMIUM),
           "HOSTILE": HOSTILE}  # fmt: skip
    proc = subprocess.run(
        ["node", str(SCRIPT), service.base_url, scenario],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    print(proc.stdout)
    print(proc.stderr)
    assert proc.returncode == 0, f"serve_page.mjs {scenario} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.rstrip().endswith("ok")
    return proc.stdout


def test_start_a_run_approve_it_from_the_inbox_and_see_the_result(tmp_path: Path) -> None:
    with serving(tmp_path, "keys") as service:
        drive(service, "approve", tmp_path)
        assert service.refunds_made() == ["A7 42"]  # the approved call ran, once


def test_hostile_text_from_a_prompt_a_tool_or_the_model_renders_as_text(tmp_path: Path) -> None:
    with serving(tmp_path, "keys") as service:
        drive(service, "hostile", tmp_path)
        assert service.refunds_made() == [f"{HOSTILE} 42"]


def test_with_auth_none_the_page_needs_no_key_and_a_denied_call_never_runs(tmp_path: Path) -> None:
    with serving(tmp_path, "none") as service:
        drive(service, "nokey", tmp_path)
        assert service.refunds_made() == ["A7 42"]  # the approved refund ran, the denied one never


def test_a_call_a_crash_cut_off_is_settled_from_the_inbox_form(tmp_path: Path) -> None:
    with setup(tmp_path, "keys", HANGING_REFUND) as service:
        alice, bob = service.env["ALICE_KEY"], service.env["BOB_KEY"]
        with service.process() as first:
            run_id = service.call("POST", "/runs", alice, {"prompt": "Please refund order A7."})["run_id"]
            deadline = time.monotonic() + 30
            while not (pending := service.call("GET", f"/runs/{run_id}", alice)["pending_approvals"]):
                assert time.monotonic() < deadline, "the refund did not wait for approval"
                time.sleep(0.05)
            decision = {"approve": True, "fingerprint": pending[0]["fingerprint"]}
            service.call("POST", f"/runs/{run_id}/approvals/{pending[0]['call_id']}", bob, decision)
            while service.refunds_made() != ["started"]:
                assert time.monotonic() < deadline, "the refund did not start"
                time.sleep(0.05)
            first.send_signal(signal.SIGKILL)  # the refund's outcome is now unknown
            first.wait(timeout=30)
        with service.process():
            drive(service, "reconcile", tmp_path)
        assert service.refunds_made() == ["started"]  # settled by a person, never run again
