"""The ticket service against a model that sends deeply nested arguments: the run ends, its event stream is readable.

Issue 17 point 10: the service's worker crashed on such a call and left the
run ``awaiting_tools`` for good (a restart resumed it into the same crash).
"""

from __future__ import annotations

from server_harness import Api

from tether.testing.fake_server import text, tool_calls


async def test_deep_arguments_are_refused_and_the_run_completes(api: Api) -> None:
    arguments = '{"ticket_id": ' + "[" * 5_000 + "]" * 5_000 + "}"
    api.model.script = [tool_calls([("call_1", "get_ticket", arguments)]), text("I could not look it up.")]
    run_id = await api.start("alice", "Is T-1001 open?")

    view = await api.wait("alice", run_id)
    events = await api.events("alice", run_id)

    assert view["status"] == "completed", view
    assert view["output"] == "I could not look it up."
    rejected = [event["data"] for kind, _, event in events if kind == "call_rejected"]
    assert [(e["id"], e["outcome"], e["arguments"]) for e in rejected] == [("call_1", "invalid_json", None)]
    assert events[-1][0] == "run_finished"
