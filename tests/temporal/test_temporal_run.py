"""A run as a Temporal workflow, end to end: real dev server, real worker, real HTTP to the FakeServer.

The approval comes from another process, through the client, as the CLI
sends it; the validators' refusals leave no trace in the run's history.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from shop_tools import TOOLS
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tether.core.machine import fingerprint
from tether.drivers.temporal.client import NotWaiting, decide, pending, start_run, status
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"
HISTORY = HERE / "histories" / "order_with_approval.json"

SCRIPT = [
    tool_calls([("c1", "price", '{"item": "tea"}')]),
    tool_calls([("c2", "place_order", '{"item": "tea", "quantity": 2}')]),
    text("Ordered 2 tea for 6."),
]


async def wait_for_status(handle: WorkflowHandle[Any, Any], wanted: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found: dict[str, Any] = await handle.query("status", result_type=dict)
        if found["status"] == wanted:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"still {found['status']}, not {wanted}"
        await asyncio.sleep(0.05)


async def event_types(handle: WorkflowHandle[Any, Any]) -> list[int]:
    history = await handle.fetch_history()
    return [e.event_type for e in history.events]


def approve_from_another_process(address: str, run_id: str, call_id: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import asyncio, sys\n"
        "from tether.drivers.temporal.client import connect, decide\n"
        "async def main():\n"
        "    client = await connect(sys.argv[1])\n"
        "    print(await decide(client, sys.argv[2], sys.argv[3], approved=True, reason='looks right'))\n"
        "asyncio.run(main())\n"
        "sys.stdout.flush()\n"
        "import os; os._exit(0)\n"  # the SDK's runtime may abort at interpreter exit
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-c", code, address, run_id, call_id], capture_output=True, text=True, env=env, timeout=60
    )


async def test_model_read_only_call_approval_from_another_process_effect_and_answer(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders = tmp_path / "orders.jsonl"
    monkeypatch.setenv("SHOP_ORDERS", str(orders))
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    store = SQLiteStore(tmp_path / "runs.db")
    async with FakeServer(script=list(SCRIPT)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store):
            run_id = f"run-{uuid.uuid4().hex[:8]}"
            handle = await start_run(client, "Order 2 tea and tell me the price.", task_queue=queue, run_id=run_id)
            assert handle.id == run_id  # the workflow id is the run id
            await wait_for_status(handle, "awaiting_approval")
            # Saved at the pause: the workflow's state moves first, the store once the pause's save has run.
            deadline = asyncio.get_running_loop().time() + 20
            while (paused := store.list_runs()) and paused[0].status != "awaiting_approval":
                assert asyncio.get_running_loop().time() < deadline, paused
                await asyncio.sleep(0.05)
            assert [(r.run_id, r.status) for r in paused] == [(run_id, "awaiting_approval")]
            waiting = await pending(client, run_id)
            assert [(c["call_id"], c["tool"], c["waiting_for"]) for c in waiting] == [("c2", "place_order", "approval")]
            assert waiting[0]["fingerprint"] == fingerprint("place_order", {"item": "tea", "quantity": 2})

            before = await event_types(handle)
            with pytest.raises(NotWaiting, match="call c9 is not waiting"):
                await decide(client, run_id, "c9", approved=True, fingerprint=waiting[0]["fingerprint"])
            with pytest.raises(NotWaiting, match="other arguments"):
                await decide(client, run_id, "c2", approved=True, fingerprint="0" * 64)
            assert await event_types(handle) == before  # refused by the validators: nothing entered history
            assert not orders.exists()

            # In a thread: this loop runs the worker, which must answer the other process meanwhile.
            done = await asyncio.to_thread(approve_from_another_process, temporal_server.address, run_id, "c2")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "awaiting_tools"
            result = await handle.result()
            history = await handle.fetch_history()
            assert (await status(client, run_id))["status"] == "completed"  # queries need a worker
        await model.aclose()

    assert result["status"] == "completed"
    assert result["output"] == "Ordered 2 tea for 6."
    assert (result["steps"], result["tool_calls"]) == (3, 2)
    effects = [json.loads(line) for line in orders.read_text().splitlines()]
    assert effects == [{"key": f"{run_id}:c2", "item": "tea", "quantity": 2}]
    assert len(server.requests) == 3
    tool_messages = [m for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], json.loads(m["content"])) for m in tool_messages] == [
        ("c1", {"ok": True, "result": 3}),
        ("c2", {"ok": True, "result": {"order": f"{run_id}:c2"}}),
    ]
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {"price", "place_order"}

    # The run store holds the run as the local driver records one, and its audit check passes.
    assert store.verify(run_id) == []
    stored = store.load(run_id)
    assert (stored.state.status.value, stored.state.output) == ("completed", "Ordered 2 tea for 6.")
    assert stored.setup["engine"] == "temporal"
    sent = [(m["role"], m.get("content")) for m in server.requests[2]["messages"]]
    assert [(m.role, m.content) for m in stored.state.messages] == [*sent, ("assistant", result["output"])]
    ledger = {e.call_id: e for e in store.ledger(run_id)}
    assert json.loads(ledger["c2"].outcome or "") == {"ok": True, "result": {"order": f"{run_id}:c2"}}
    assert json.loads(ledger["c1"].outcome or "") == {"ok": True, "result": 3}
    kinds = [e.kind for e in store.events(run_id)]
    assert kinds == [
        "run_started", "step_started", "model_replied", "call_validated", "call_executed",
        "step_started", "model_replied", "approval_requested", "run_paused", "approval_decided", "call_validated",
        "intent_recorded", "call_executed", "outcome_recorded", "step_started", "model_replied", "run_finished",
    ]  # fmt: skip
    decided = next(e for e in store.events(run_id) if e.kind == "approval_decided")
    assert (decided.data["id"], decided.data["approved"], decided.data["by"]) == ("c2", True, "cli")
    store.close()
    if os.environ.get("TETHER_RECORD_HISTORY"):
        HISTORY.parent.mkdir(exist_ok=True)
        HISTORY.write_text(history.to_json() + "\n")


@pytest.mark.parametrize("words", [{"reason": "not \ud800 today"}, {"by": "ann\udcff"}], ids=["reason", "by"])
async def test_a_decision_whose_words_are_not_text_is_refused_before_it_enters_history(
    temporal_server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: dict[str, str]
) -> None:
    """A reason or a decider's name holding a lone surrogate (from a script or a service, not the CLI, which refuses
    such arguments) cannot be stored: the validator refuses it. Before, the decision was taken, every save after it
    failed, the workflow failed and the store kept the run as awaiting_approval."""
    monkeypatch.setenv("SHOP_ORDERS", str(tmp_path / "orders.jsonl"))
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"
    client = await Client.connect(temporal_server.address)
    store = SQLiteStore(tmp_path / "runs.db")
    async with FakeServer(script=list(SCRIPT)) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store):
            handle = await start_run(client, "Order 2 tea.", task_queue=queue, run_id=run_id)
            await wait_for_status(handle, "awaiting_approval")
            with pytest.raises(NotWaiting, match="not text: it holds a lone UTF-16 surrogate"):
                await decide(client, run_id, "c2", approved=False, **words)
            assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED not in await event_types(handle)
            await decide(client, run_id, "c2", approved=False, reason="not today")
            result = await asyncio.wait_for(handle.result(), 30)
        await model.aclose()
    assert result["status"] == "completed"
    assert store.load(run_id).state.status.value == "completed"
    assert store.verify(run_id) == []
    store.close()
