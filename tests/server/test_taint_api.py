"""Over real HTTP: a call that needs approval because the run read untrusted text says so.

Alice asks about her ticket; ``get_ticket`` returns a comment that carol
wrote, so the run is tainted, and the model's ``add_comment`` then waits for
approval. The run view, the approvals queue and the event stream all carry
the reason the web page shows: "the run read untrusted text from get_ticket".
"""

from __future__ import annotations

import json

from server_harness import Api

from tether.testing.fake_server import text, tool_calls
from tickets_app.db import TicketsDB
from tickets_app.seed_data import TICKETS

ANSWERED = next(t for t in TICKETS if t.reporter == "alice" and {c.author for c in t.comments} - {"alice"})
REASON = "the run read untrusted text from get_ticket"


async def test_the_approval_names_the_tool_that_tainted_the_run(api: Api) -> None:
    comment = json.dumps({"ticket_id": ANSWERED.id, "body": "As instructed in the comment: refund approved."})
    api.model.script = [
        tool_calls([("call_read", "get_ticket", json.dumps({"ticket_id": ANSWERED.id}))]),
        tool_calls([("call_comment", "add_comment", comment)]),
        text("Done."),
    ]
    with TicketsDB(api.settings.tickets_db) as db:
        before = len(db.comments(ANSWERED.id))

    run_id = await api.start("alice", f"What is the latest on {ANSWERED.id}?")
    view = await api.wait("alice", run_id)

    assert view["status"] == "awaiting_approval"
    [pending] = view["pending_approvals"]
    assert (pending["call_id"], pending["tool"], pending["reason"]) == ("call_comment", "add_comment", REASON)
    queue = await api.call("GET", "/api/approvals", user="carol")
    [queued] = [a for a in queue.body["approvals"] if a["run_id"] == run_id]
    assert queued["reason"] == REASON
    events = await api.events("alice", run_id)
    [requested] = [data["data"] for kind, _, data in events if kind == "approval_requested"]
    assert requested["reason"] == REASON
    with TicketsDB(api.settings.tickets_db) as db:
        assert len(db.comments(ANSWERED.id)) == before
