"""A worker's ``resolve_principal``: asked before each call runs on Temporal, refusing as the local driver refuses.

Each test runs one scenario on both drivers, with a resolver of its own
each, and compares what the tools did (their own record of the calls that
ran), what the model read, the audit events and the ledger. Before workers
had a resolver, a principal revoked mid-run kept its calls running on
Temporal: the second ``send`` took effect there.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer
from test_parity import recorded

from tether import Agent
from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.drivers.temporal.workflow import RunWorkflow
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import text, tool_calls
from tether.tools import ToolContext, tool
from tether.tools.context import Principal

RAN: dict[str, list[str]] = {}  # run id -> the ids of the calls that ran, as the tools record them


@tool(scopes={"write"})
def send(note: str, context: ToolContext) -> str:
    """Send a note to the team (a side effect)."""
    RAN.setdefault(context.run_id, []).append(context.call_id)
    return f"sent {note}"


@tool(read_only=True, scopes={"read"})
def look(topic: str, context: ToolContext) -> dict[str, Any]:
    """Look a topic up; says which scopes it ran with."""
    RAN.setdefault(context.run_id, []).append(context.call_id)
    return {"topic": topic, "scopes": sorted(context.principal.scopes)}


TOOLS = [send, look]
ANN = Principal("ann", frozenset({"read", "write"}))
PROMPT = "Tell the team about the outage."


class RevokedAfter:
    """A resolver that knows the principal for its first ``calls`` questions, then no more (the account is gone)."""

    def __init__(self, calls: int) -> None:
        self.calls, self.asked = calls, 0

    def __call__(self, principal: Principal) -> Principal | None:
        self.asked += 1
        return principal if self.asked <= self.calls else None


class ReadOnly:
    """An async resolver that narrows the principal to the ``read`` scope (the account was demoted)."""

    def __init__(self) -> None:
        self.asked = 0

    async def __call__(self, principal: Principal) -> Principal:
        self.asked += 1
        return dataclasses.replace(principal, scopes=frozenset({"read"}))


Resolver = RevokedAfter | ReadOnly


async def on_both(
    server: DevServer, store: SQLiteStore, script: list[Any], resolvers: list[Resolver]
) -> tuple[str, str, list[Resolver], list[dict[str, Any]]]:
    """Run ``script`` for ANN with the local driver, then on a worker, each with its resolver (``resolvers``: the
    local one, the worker's): the run ids, the resolvers (as asked) and the last model request of each. The
    Temporal run's history replays."""
    run_id = uuid.uuid4().hex
    local_id = f"local-{run_id}"
    last = []
    async with FakeServer(script=list(script)) as local_server:
        model = OpenAIChatModel("fake", base_url=local_server.base_url, api_key="k")
        async with Agent(model, TOOLS, store=store, principal=ANN, resolve_principal=resolvers[0]) as agent:
            local = await agent.run(PROMPT, run_id=local_id)
        last.append(local_server.requests[-1])
    client = await Client.connect(server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with FakeServer(script=list(script)) as temporal_server:
        model = OpenAIChatModel("fake", base_url=temporal_server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store, resolve_principal=resolvers[1]):
            handle = await start_run(client, PROMPT, task_queue=queue, run_id=run_id, principal=ANN)
            result = await handle.result()
        await model.aclose()
        last.append(temporal_server.requests[-1])
    assert result["status"] == local.status.value == "completed"
    replayed = await Replayer(workflows=[RunWorkflow]).replay_workflow(await handle.fetch_history())
    assert replayed.replay_failure is None  # the resolver's answers are in the history: the run replays as it ran
    return run_id, local_id, resolvers, last


def ledger(store: SQLiteStore, run_id: str) -> list[tuple[str, str, str, str | None]]:
    return [(e.call_id, e.tool, e.fingerprint, e.outcome) for e in store.ledger(run_id)]


def seen(request: dict[str, Any], call_id: str) -> dict[str, Any]:
    """The result of ``call_id`` as the model read it in ``request``."""
    (content,) = [m["content"] for m in request["messages"] if m.get("tool_call_id") == call_id]
    decoded: dict[str, Any] = json.loads(content)
    return decoded


FORBIDDEN_SEND = {
    "ok": False,
    "error": {"code": "forbidden", "message": "this principal may no longer call send", "retryable": False},
}


@pytest.mark.parametrize(("name", "arguments"), [("send", '{"note": "down"}'), ("look", '{"topic": "outage"}')])
async def test_a_principal_revoked_after_the_first_call_makes_no_second_call_on_either_driver(
    temporal_server: DevServer, tmp_path: Path, name: str, arguments: str
) -> None:
    """The resolver is asked before each call: the first runs, the second is answered ``forbidden`` and does not
    run. A side effect's refusal leaves no intent in the ledger (the worker asks before its intent is written)."""
    store = SQLiteStore(tmp_path / "runs.db")
    script = [tool_calls([("c1", name, arguments)]), tool_calls([("c2", name, arguments)]), text("Done.")]
    # A worker asks twice about a side effect (before its intent, and just before the effect), a local run once.
    asks = 2 if name == "send" else 1
    run_id, local_id, resolvers, last = await on_both(
        temporal_server, store, script, [RevokedAfter(1), RevokedAfter(asks)]
    )

    assert RAN[run_id] == RAN[local_id] == ["c1"]  # the tool's own record: the second call never ran
    assert [r.asked for r in resolvers] == [2, asks + 1]  # before each call (the refused one: before its intent)
    forbidden = FORBIDDEN_SEND | {
        "error": FORBIDDEN_SEND["error"] | {"message": f"this principal may no longer call {name}"}
    }
    assert [seen(request, "c2") for request in last] == [forbidden, forbidden]
    events = recorded(store, run_id)
    assert [(kind, data["id"]) for kind, data in events if kind in ("call_rejected", "call_executed")] == [
        ("call_executed", "c1"),
        ("call_rejected", "c2"),
    ]
    assert [data["id"] for kind, data in events if kind == "intent_recorded"] == ([] if name == "look" else ["c1"])
    assert events == recorded(store, local_id)
    assert [call_id for call_id, *_ in ledger(store, run_id)] == ["c1"]
    assert ledger(store, run_id) == ledger(store, local_id)
    assert [m.to_dict() for m in store.messages(run_id)] == [m.to_dict() for m in store.messages(local_id)]
    assert store.verify(run_id) == []
    store.close()


async def test_a_resolver_that_narrows_the_scopes_refuses_what_they_no_longer_allow_and_runs_the_rest_for_it(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """Demoted to ``read`` while the run goes on: ``look`` runs with the principal as resolved (its context says
    so), ``send``, which needs ``write``, is answered ``forbidden`` without running; as the local driver does."""
    store = SQLiteStore(tmp_path / "runs.db")
    script = [
        tool_calls([("c1", "look", '{"topic": "outage"}'), ("c2", "send", '{"note": "down"}')]),
        text("Done."),
    ]
    run_id, local_id, resolvers, last = await on_both(temporal_server, store, script, [ReadOnly(), ReadOnly()])

    assert RAN[run_id] == RAN[local_id] == ["c1"]
    assert [r.asked for r in resolvers] == [2, 2]
    for request in last:
        assert seen(request, "c1") == {"ok": True, "result": {"topic": "outage", "scopes": ["read"]}}
        assert seen(request, "c2") == FORBIDDEN_SEND
    events = recorded(store, run_id)
    assert "intent_recorded" not in [kind for kind, _ in events]
    assert events == recorded(store, local_id)
    assert ledger(store, run_id) == ledger(store, local_id)
    assert [m.to_dict() for m in store.messages(run_id)] == [m.to_dict() for m in store.messages(local_id)]
    assert store.verify(run_id) == []
    store.close()


def unreachable(principal: Principal) -> Principal | None:
    raise RuntimeError("the directory is down")


async def test_a_resolver_that_keeps_failing_fails_the_run_before_the_side_effects_intent(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """Asked again a few times (the local activity's retries), then the run fails: cancelled, saying why,
    with neither the effect nor its intent (``runs verify`` finds the run intact)."""
    store = SQLiteStore(tmp_path / "runs.db")
    run_id = uuid.uuid4().hex
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with FakeServer(script=[tool_calls([("c1", "send", '{"note": "down"}')])]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key="k")
        async with make_worker(client, queue, model, TOOLS, store=store, resolve_principal=unreachable):
            handle = await start_run(client, PROMPT, task_queue=queue, run_id=run_id, principal=ANN)
            with pytest.raises(WorkflowFailureError):
                await handle.result()
        await model.aclose()
    state = store.load(run_id).state
    assert (state.status.value, state.reason) == ("cancelled", "the workflow failed: the directory is down")
    assert run_id not in RAN
    assert "intent_recorded" not in [kind for kind, _ in recorded(store, run_id)]
    assert store.ledger(run_id) == [] and store.verify(run_id) == []
    store.close()
