"""Argument provenance across processes: a run SIGKILLed mid-way is resumed by another ``tether`` process.

The gate holds after the crash: an injected recipient waits for a person
(and, once approved, is traced again by the resuming process and sent
once); a recipient the principal gave is sent without asking, once. The
verdicts are in the audit log and the ledger, and ``tether runs verify``
holds. Before provenance, the second test's send waited for approval (the
run exited 20 instead of sending), and no event or ledger row carried a
provenance.
"""

from __future__ import annotations

import json
from pathlib import Path

from process_helpers import SIGKILLED, Bench, bench, kinds

from tether.testing.fake_server import text, tool_calls

PROMPT = "Summarise my newest email and send the summary to bob@example.com."
READ = tool_calls([("c1", "read_email", '{"folder": "inbox"}')])


def send(to: str) -> object:
    return tool_calls([("c2", "send_email", json.dumps({"to": to, "body": "Mark says hi."}))])


def crash(b: Bench, at: str) -> str:
    argv = [*b.run_argv(PROMPT)]
    argv[argv.index("crash_tools")] = "provenance_tools"
    done = b._call([b.command()[0], str(Path(__file__).parent / "crash_harness.py"), *argv], b.env(CRASH_AT=at))
    assert done.code == SIGKILLED, done
    return b.run_id()


def test_an_injected_recipient_still_waits_after_a_sigkill_and_is_traced_again_when_resumed(tmp_path: Path) -> None:
    with bench(tmp_path, [READ, send("mark@evil.example"), text("Sent.")]) as b:
        run_id = crash(b, "approval_requested")  # killed right after the request was committed
        assert b.effect_lines() == []
        shown = b.tether("runs", "show", run_id, "--db", str(b.db))
        assert "to `mark@evil.example` appears only in the result of read_email c1" in shown.out, shown
        assert b.tether("approve", run_id, "c2", "--db", str(b.db)).code == 0
        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert b.effect_lines() == [f"{run_id}:c2\tsend_email\tmark@evil.example"]
        events = b.events(run_id)
        verdict = [{"path": "to", "found": "untrusted", "in": ["the result of read_email c1"]}]
        assert [e.data["provenance"] for e in events if e.kind == "approval_requested"] == [verdict]
        assert [e.data["provenance"] for e in events if e.kind == "intent_recorded"] == [verdict]
        with b.store() as store:
            (entry,) = [e for e in store.ledger(run_id) if e.call_id == "c2"]
        assert json.loads(entry.provenance or "") == verdict
        assert b.tether("runs", "verify", run_id, "--db", str(b.db)).code == 0


def test_a_traced_recipient_is_sent_without_asking_once_across_a_sigkill(tmp_path: Path) -> None:
    with bench(tmp_path, [READ, send("bob@example.com"), text("Sent.")]) as b:
        run_id = crash(b, "intent_recorded")  # killed after the intent, before the effect
        assert b.effect_lines() == []
        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert b.effect_lines() == [f"{run_id}:c2\tsend_email\tbob@example.com"]
        events = b.events(run_id)
        assert "approval_requested" not in kinds(events)
        verdict = [{"path": "to", "found": "trusted", "in": []}]
        assert all(e.data["provenance"] == verdict for e in events if e.kind == "intent_recorded")
        assert b.tether("runs", "verify", run_id, "--db", str(b.db)).code == 0


def test_tether_tools_names_each_tools_sinks(tmp_path: Path) -> None:
    with bench(tmp_path, []) as b:
        shown = b.tether("tools", "provenance_tools")
    assert shown.code == 0, shown
    assert "send_email (side-effecting, sinks: to)" in shown.out
    assert "read_email (read-only, untrusted output: taints the run)" in shown.out
