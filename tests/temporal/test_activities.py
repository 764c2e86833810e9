"""The activities themselves, run by the SDK's ``ActivityEnvironment`` (no server): what a tool is told."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from tether.core.machine import PendingCall
from tether.drivers.temporal.activities import Activities
from tether.drivers.temporal.payloads import PrincipalData, RunToolRequest
from tether.models.scripted import ScriptedModel
from tether.store import SQLiteStore
from tether.tools import ToolContext, tool


@tool(read_only=True)
def whoami(context: ToolContext) -> dict[str, object]:
    """Who the run acts for, as the tool is told."""
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
