"""Over real HTTP: the service's view of a tree of runs (a sub-agent's child run) recorded in its run store.

The service's own agent has no sub-agent tools; a tree reaches its store when
an application built on the library records one there. Alice's run delegated
to a child that waits for approval of a refund: her run's view names its
child and lists the child's call as pending (naming the child run), the
child's view names its parent, and the approvals queue holds the call.
"""

from __future__ import annotations

from server_harness import Api

from tether import Agent, OpenAIChatModel, Principal, Status, tool
from tether.drivers.local.subagents import child_run_id
from tether.store import SQLiteStore
from tether.testing import FakeServer
from tether.testing.fake_server import tool_calls


@tool(approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves each)."""
    return f"refunded {order}"


async def test_the_run_view_names_parent_and_children_and_the_childs_pending_call(api: Api) -> None:
    script = [
        tool_calls([("c1", "helper", '{"input": "Refund A-1."}')]),
        tool_calls([("r1", "refund", '{"order": "A-1"}')]),
    ]
    with FakeServer(script) as server:
        store = SQLiteStore(api.settings.run_db)
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        agent = Agent(model, [Agent(model, [refund], store=store).as_tool(name="helper")], store=store)
        paused = await agent.run("Refund A-1.", principal=Principal("user-alice"))
        store.close()
    assert paused.status is Status.AWAITING_APPROVAL
    parent, child = paused.run_id, child_run_id(paused.run_id, "c1")

    view = (await api.call("GET", f"/api/runs/{parent}", user="alice")).body
    assert (view["status"], view["parent_id"], view["children"]) == ("awaiting_approval", None, [child])
    [pending] = view["pending_approvals"]
    assert (pending["run_id"], pending["call_id"], pending["tool"]) == (child, "r1", "refund")
    assert pending["arguments"] == {"order": "A-1"} and pending["reason"] == "refund requires approval"

    of_child = (await api.call("GET", f"/api/runs/{child}", user="alice")).body
    assert (of_child["parent_id"], of_child["children"]) == (parent, [])
    assert (await api.call("GET", f"/api/runs/{child}", user="bob")).status == 404  # not bob's, as ever

    queue = (await api.call("GET", "/api/approvals", user="carol")).body["approvals"]
    assert [(a["run_id"], a["call_id"]) for a in queue if a["run_id"] in (parent, child)] == [(child, "r1")]
