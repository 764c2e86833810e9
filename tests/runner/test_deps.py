"""Per-run deps and principal, over real HTTP against FakeServer and a real SQLite store."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether import Agent, OpenAIChatModel, Principal, Status, ToolContext, tool
from tether.drivers.local.durable import decide
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import ReplySpec, text, tool_calls


@dataclass
class Deps:
    tenant: str
    db: dict[str, str]
    password: str = "deps-password-never-sent"
    seen: list[str] = field(default_factory=list)


@tool(read_only=True)
def lookup(ctx: ToolContext[Deps], key: str) -> str:
    """Look a key up in the tenant's database."""
    ctx.deps.seen.append(ctx.principal.id)
    return f"{ctx.deps.tenant}:{ctx.deps.db[key]}:{ctx.principal.id}"


@tool(read_only=True, scopes={"admin"})
def purge_cache() -> str:
    """Admins only."""
    return "purged"


def lookup_then_answer(request: dict[str, Any]) -> ReplySpec:
    last = request["messages"][-1]
    if last["role"] != "tool":
        return tool_calls([(f"c-{len(request['messages'])}", "lookup", '{"key": "k"}')])
    return text(f"answer {json.loads(last['content'])['result']}")


async def test_concurrent_runs_of_one_agent_get_their_own_deps_and_principal() -> None:
    async with FakeServer(lookup_then_answer) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        async with Agent(model, [lookup, purge_cache]) as agent:
            a, b = Deps("acme", {"k": "1"}), Deps("globex", {"k": "2"})
            alice = Principal("alice", scopes=frozenset({"read"}))
            dave = Principal("dave", scopes=frozenset({"admin"}))
            ra, rb = await asyncio.gather(
                agent.run("go", deps=a, principal=alice), agent.run("go", deps=b, principal=dave)
            )

    assert (ra.status, rb.status) == (Status.COMPLETED, Status.COMPLETED)
    assert ra.output == "answer acme:1:alice"
    assert rb.output == "answer globex:2:dave"
    assert (a.seen, b.seen) == (["alice"], ["dave"])
    wire = json.dumps(server.requests)
    assert "deps-password-never-sent" not in wire
    # The deps parameter is not in the schema; the principal decides which tools exist.
    offered = [sorted(t["function"]["name"] for t in r["tools"]) for r in server.requests]
    assert ["lookup"] in offered and ["lookup", "purge_cache"] in offered
    for request in server.requests:
        for spec in request["tools"]:
            if spec["function"]["name"] == "lookup":
                assert list(spec["function"]["parameters"]["properties"]) == ["key"]


@tool(approval=True)
def pay(ctx: ToolContext[Deps], amount: int) -> str:
    """Pay an amount (needs approval)."""
    ctx.deps.seen.append(f"paid {amount}")
    return f"paid {amount} from {ctx.deps.tenant}"


def pay_then_answer(request: dict[str, Any]) -> ReplySpec:
    last = request["messages"][-1]
    if last["role"] != "tool":
        return tool_calls([("c1", "pay", '{"amount": 5}')])
    return text(json.loads(last["content"])["result"])


async def test_a_resumed_run_gets_its_deps_from_the_registered_factory(tmp_path: Path) -> None:
    made: list[tuple[str, str]] = []
    deps_after_restart = Deps("acme-restarted", {})

    def factory(run_id: str, principal: Principal) -> Deps:
        made.append((run_id, principal.id))
        return deps_after_restart

    async with FakeServer(pay_then_answer) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        store = SQLiteStore(tmp_path / "runs.db")
        first = Deps("acme", {})
        async with Agent(model, [pay], store=store) as agent:
            paused = await agent.run("pay 5", deps=first, principal=Principal("carol"))
        assert paused.status is Status.AWAITING_APPROVAL
        assert first.seen == []
        decide(store, paused.run_id, "c1", approved=True)

        # As after a restart: a new Agent over the same store, with a factory for deps.
        async with Agent(model, [pay], store=SQLiteStore(tmp_path / "runs.db"), deps_factory=factory) as agent:
            result = await agent.resume(paused.run_id).run()

    assert result.status is Status.COMPLETED, result.reason
    assert result.output == "paid 5 from acme-restarted"
    assert made == [(paused.run_id, "carol")]
    assert deps_after_restart.seen == ["paid 5"]
