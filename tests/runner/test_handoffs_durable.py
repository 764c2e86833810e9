"""Handoffs in a real SQLite store: the floor survives a SIGKILL, a resume, a reopened conversation and `runs show`."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tether import Agent, RunResult, SQLiteStore, Status, decide
from tether.core.errors import ConfigurationError, TamperedRun
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls

SRC = Path(__file__).resolve().parents[2] / "src"

# The agents both processes build: the one killed, and the one that resumes.
AGENTS = '''
from tether import Agent, OpenAIChatModel, SQLiteStore, tool


@tool(read_only=True, inline=True)
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid twice"


@tool(inline=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool(read_only=True, inline=True, untrusted_output=True)
def search(query: str) -> str:
    """Search the web."""
    return f"a page about {query}"


def build(base_url: str, db: str, *, with_billing: bool = True) -> Agent:
    store = SQLiteStore(db)
    billing = Agent(
        OpenAIChatModel("billing-model", base_url=base_url, api_key="k"),
        [refund],
        name="billing",
        system="You are billing.",
        store=store,
    )
    return Agent(
        OpenAIChatModel("triage-model", base_url=base_url, api_key="k"),
        [lookup, search],
        name="triage",
        system="You are triage.",
        handoffs=[billing] if with_billing else [],
        store=store,
    )
'''

KILLED = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
from agents import build

def die_once_handed_off(event) -> None:
    # Listeners hear an event only once it is checkpointed: this dies right after the handoff is recorded.
    if event.kind == "handoff":
        print(event.run_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

build(sys.argv[1], sys.argv[2]).run_sync("I paid twice for A1", on_event=die_once_handed_off)
"""


def load_agents(tmp_path: Path) -> ModuleType:
    (tmp_path / "agents.py").write_text(AGENTS)
    spec = importlib.util.spec_from_file_location(f"agents_{tmp_path.name}", tmp_path / "agents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resume(agent: Agent, run_id: str) -> RunResult:
    return asyncio.run(agent.resume(run_id).run())


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", ())]


def systems(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "system"]


TRANSFER = ("c1", "transfer_to_billing", "{}")


def test_a_run_killed_right_after_the_handoff_resumes_with_the_target(tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    db = tmp_path / "runs.db"
    (tmp_path / "killed.py").write_text(textwrap.dedent(KILLED))
    script = [tool_calls([("c0", "lookup", '{"order": "A1"}'), TRANSFER]), text("Billing here: refunded.")]
    with FakeServer(script) as server:
        done = subprocess.run(
            [sys.executable, str(tmp_path / "killed.py"), server.base_url, str(db), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(SRC)},
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        run_id = done.stdout.strip()
        assert len(server.requests) == 1  # killed before the target's first request

        store = SQLiteStore(db)
        stored = store.load(run_id)
        assert stored.state.status is Status.AWAITING_MODEL
        assert stored.state.agent == "billing"
        # The handoff was committed with the rest of the step, the target's step started: then the process died.
        assert [e.kind for e in store.events(run_id)][-3:] == ["call_executed", "handoff", "step_started"]

        triage = agents.build(server.base_url, str(db))
        result = resume(triage, run_id)

    assert result.status is Status.COMPLETED and result.output == "Billing here: refunded."
    assert result.last_agent == "billing"
    resumed = server.requests[1]
    assert resumed["model"] == "billing-model"
    assert offered(resumed) == ["refund"]
    assert systems(resumed) == ["You are billing."]
    assert store.verify(run_id) == []
    events = store.events(run_id)
    assert [e.data for e in events if e.kind == "handoff"] == [
        {"id": "c1", "from": "triage", "to": "billing", "model": "billing-model"}
    ]
    assert [e.data["agent"] for e in events if e.kind == "model_replied"] == ["triage", "billing"]
    assert [m.agent for m in store.load(run_id).state.messages if m.role == "assistant"] == ["triage", "billing"]


def test_a_run_resumed_by_an_agent_that_cannot_reach_its_floor_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    db = tmp_path / "runs.db"
    script = [
        tool_calls([("c0", "search", '{"query": "refunds"}'), TRANSFER]),
        tool_calls([("c2", "refund", '{"order": "A1"}')]),
        text("Refunded."),
    ]
    with FakeServer(script) as server:
        paused = agents.build(server.base_url, str(db)).run_sync("refund A1")
        assert paused.status is Status.AWAITING_APPROVAL and paused.last_agent == "billing"

        alone = agents.build(server.base_url, str(db), with_billing=False)
        with pytest.raises(ConfigurationError) as refused:
            alone.resume(paused.run_id)
        assert str(refused.value) == (
            "agent 'billing' had the floor, but the handoff graph of agent 'triage' has no agent of that name "
            "(it has 'triage'): go on with the agent it started with, with the same handoffs"
        )
        store = SQLiteStore(db)
        assert store.load(paused.run_id).state.status is Status.AWAITING_APPROVAL
        assert store.verify(paused.run_id) == []

        # The agent it started with takes it up (the refusal let go of the run): the target's call runs.
        call = paused.state.undecided()[0]
        decide(store, paused.run_id, call.call_id, approved=True)
        result = resume(agents.build(server.base_url, str(db)), paused.run_id)
    assert result.status is Status.COMPLETED and result.output == "Refunded."
    # The step resumed (its reply was heard before the pause), then the target's answer.
    assert [c.tool for c in result.steps[0].calls] == ["refund"] and result.steps[0].calls[0].outcome == "ok"
    assert result.steps[-1].agent == "billing"
    assert server.requests[-1]["model"] == "billing-model"
    assert store.verify(paused.run_id) == []


def test_the_floor_is_sealed_with_the_run(tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    db = tmp_path / "runs.db"
    with FakeServer([tool_calls([TRANSFER]), text("Billing here.")]) as server:
        run_id = agents.build(server.base_url, str(db)).run_sync("help").run_id
    assert SQLiteStore(db).verify(run_id) == []
    with sqlite3.connect(db) as raw:
        (meta,) = raw.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
        assert json.loads(meta)["agent"] == "billing"
        raw.execute("UPDATE runs SET meta = ? WHERE id = ?", (meta.replace('"billing"', '"triage"'), run_id))
    with pytest.raises(TamperedRun):
        SQLiteStore(db).load(run_id)


def test_a_conversation_goes_on_with_the_agent_that_had_the_floor_also_when_reopened(tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    db = tmp_path / "runs.db"
    script = [tool_calls([TRANSFER]), text("Billing: which order?"), text("Refund noted."), text("Anything else?")]
    with FakeServer(script) as server:
        triage = agents.build(server.base_url, str(db))
        conv = triage.conversation()
        first = conv.send_sync("I paid twice")
        assert first.last_agent == "billing" and conv.last_agent == "billing"
        second = conv.send_sync("Order A1")

        later = agents.build(server.base_url, str(db)).conversation(conv.id)
        assert later.last_agent == "billing"
        third = later.send_sync("Thanks")

        alone = agents.build(server.base_url, str(db), with_billing=False).conversation(conv.id)
        with pytest.raises(ConfigurationError, match=r"agent 'billing' had the floor"):
            alone.send_sync("Hello?")
    assert [r["model"] for r in server.requests] == ["triage-model", "billing-model", "billing-model", "billing-model"]
    # Each later turn: billing's tools and system message, in place of the triage system the transcript starts with.
    for request in server.requests[1:]:
        assert offered(request) == ["refund"]
        assert systems(request) == ["You are billing."]
    assert [r.last_agent for r in (second, third)] == ["billing", "billing"]
    assert [s.agent for s in third.steps] == ["billing"]
    assert third.all_messages()[0].content == "You are triage."
    speakers = [m.agent for m in third.all_messages() if m.role == "assistant"]
    assert speakers == ["triage", "billing", "billing", "billing"]


def test_runs_show_names_the_agent_that_answered_each_step(tmp_path: Path) -> None:
    agents = load_agents(tmp_path)
    db = tmp_path / "runs.db"
    with FakeServer([tool_calls([TRANSFER]), text("Billing here.")]) as server:
        result = agents.build(server.base_url, str(db)).run_sync("help")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "show", result.run_id, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    shown_steps = [line.split("s  ", 1)[1] for line in shown.stdout.splitlines() if line.startswith("  +")]
    assert "step 1  model replied by triage: finish_reason=tool_calls, 1 call(s), by triage-model" in shown_steps
    assert "step 1  handoff: call c1 hands the run from triage to billing" in shown_steps
    assert "step 2  model replied by billing: finish_reason=stop, 0 call(s), by billing-model" in shown_steps
    as_json = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "show", result.run_id, "--db", str(db), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    data = json.loads(as_json.stdout)
    assert data["last_agent"] == "billing"
    assert [m.get("agent") for m in data["messages"] if m["role"] == "assistant"] == ["triage", "billing"]
