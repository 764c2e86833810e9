"""The activities themselves, run by the SDK's ``ActivityEnvironment`` (no server): what a tool is told."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from tether.core.machine import PendingCall
from tether.drivers.temporal.activities import Activities
from tether.drivers.temporal.payloads import (
    AskingToolRequest,
    PrincipalData,
    PrincipalRefused,
    PrincipalResolved,
    ResolvedToolRequest,
    ResolveRequest,
    RunToolRequest,
)
from tether.models.scripted import ScriptedModel
from tether.store import SQLiteStore
from tether.tools import ToolContext, tool
from tether.tools.context import Principal

RAN: list[str] = []  # the tools the resolver test's calls ran


@tool(read_only=True)
def whoami(context: ToolContext) -> dict[str, object]:
    """Who the run acts for, as the tool is told."""
    RAN.append("whoami")
    principal = context.principal
    return {"id": principal.id, "roles": sorted(principal.roles), "scopes": sorted(principal.scopes)}


@tool(scopes={"write"})
def audited(context: ToolContext) -> dict[str, object]:
    """A side effect that says who it ran for."""
    RAN.append("audited")
    principal = context.principal
    return {"id": principal.id, "roles": sorted(principal.roles), "scopes": sorted(principal.scopes)}


async def test_a_tool_is_told_the_principal_of_its_run_with_its_roles(temporal_sdk: None, tmp_path: Path) -> None:
    """One worker, two runs for one principal id whose roles differ (changed between runs): each call sees its own."""
    store = SQLiteStore(tmp_path / "runs.db")
    activities = Activities(ScriptedModel([]), [whoami], store)
    call = PendingCall("c1", "whoami", {}, None, read_only=True, execute=True)
    seen = []
    for roles in (("agent",), ("admin",), ("agent",)):
        request = RunToolRequest("r1", call, PrincipalData("ann", ("*",), roles), None)
        result = await ActivityEnvironment().run(activities.run_tool, request)
        seen.append(json.loads(result.content)["result"]["roles"])
    store.close()

    assert seen == [["agent"], ["admin"], ["agent"]]


async def test_a_read_asks_the_workers_resolver_and_a_side_effect_runs_for_the_principal_it_resolved(
    temporal_sdk: None, tmp_path: Path
) -> None:
    """``run_tool`` asks before a read (refused: the tool is not called); ``resolve``, asked before a side
    effect's intent, gives the principal the call then runs for."""
    RAN.clear()
    store = SQLiteStore(tmp_path / "runs.db")
    now: dict[str, Principal | None] = {"ann": Principal("ann", frozenset({"read"}), frozenset({"agent"}))}
    activities = Activities(ScriptedModel([]), [whoami, audited], store, resolve_principal=lambda p: now[p.id])
    ann = PrincipalData("ann", ("*",), ("admin",))
    read = PendingCall("c1", "whoami", {}, None, read_only=True, execute=True)
    env = ActivityEnvironment()

    result = await env.run(activities.run_tool, AskingToolRequest("r1", read, ann, None, ask=True))
    assert json.loads(result.content)["result"] == {"id": "ann", "roles": ["agent"], "scopes": ["read"]}
    write = PendingCall("c2", "audited", {}, None, read_only=False, execute=True)
    answer = await env.run(activities.resolve, ResolveRequest("audited", ann))
    assert answer == PrincipalRefused()  # audited needs the write scope
    now["ann"] = Principal("ann", frozenset({"write"}))
    answer = await env.run(activities.resolve, ResolveRequest("audited", ann))
    assert answer == PrincipalResolved(PrincipalData("ann", ("write",), ()))
    result = await env.run(activities.run_tool, ResolvedToolRequest("r1", write, ann, None, runs_for=answer.principal))
    assert json.loads(result.content)["result"] == {"id": "ann", "roles": [], "scopes": ["write"]}
    now["ann"] = None  # gone: a read is refused without running
    assert await env.run(activities.run_tool, AskingToolRequest("r1", read, ann, None, ask=True)) == PrincipalRefused()
    store.close()

    assert RAN == ["whoami", "audited"]
