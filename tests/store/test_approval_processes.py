"""Approvals across processes: ``tether run`` pauses and exits, others decide, ``tether resume`` carries on.

The approved call runs exactly once, and only with the arguments that were
approved: a decision for another fingerprint is refused and records nothing,
and a run whose approved arguments were edited in the store is refused as
tampered with, even when the forger recomputed every fingerprint.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from process_helpers import CALL, Bench, after_last_resume, assert_transcript, bench, kinds

from tether.core import envelope
from tether.core.machine import fingerprint
from tether.testing.fake_server import text, tool_calls

ANSWER = "Done."


def script() -> list[object]:
    return [tool_calls([(CALL, "refund", '{"ticket": "T-9"}')]), text(ANSWER)]


def pause(b: Bench) -> str:
    """``tether run`` up to the approval; the process exits 20 and says how to decide."""
    paused = b.tether(*b.run_argv("Refund ticket T-9."))
    assert paused.code == 20, paused
    run_id = b.run_id()
    assert f"tether approve {run_id} {CALL}" in paused.err
    assert f"tether deny {run_id} {CALL}" in paused.err
    with b.store() as store:
        stored = store.load(run_id)
        assert stored.state.status.value == "awaiting_approval"
        assert store.ledger(run_id) == []
        assert kinds(store.events(run_id))[-2:] == ["approval_requested", "run_paused"]
    assert b.effect_lines() == []
    assert len(b.server.requests) == 1
    return run_id


def verify(b: Bench, run_id: str) -> None:
    verified = b.tether("runs", "verify", run_id, "--db", str(b.db))
    assert verified.code == 0, verified


def test_approve_in_another_process_then_resume_runs_the_call_once(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        run_id = pause(b)

        approved = b.tether("approve", run_id, CALL, "--reason", "checked by ops", "--db", str(b.db))
        assert approved.code == 0, approved
        assert b.effect_lines() == []  # deciding runs nothing

        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert f"run {run_id}: completed" in resumed.out
        assert b.effects_of(run_id) == [f"{run_id}:{CALL}\trefund\tT-9"]
        assert len(b.effect_lines()) == 1
        with b.store() as store:
            content = assert_transcript(store, run_id, "refund", ANSWER)
            assert content == envelope.ok("closed T-9")
            events = store.events(run_id)
        decided = [e.data for e in events if e.kind == "approval_decided"]
        assert len(decided) == 1
        assert decided[0]["approved"] is True and decided[0]["by"] == "cli" and decided[0]["id"] == CALL
        assert kinds(after_last_resume(events)).count("call_executed") == 1
        assert kinds(events).count("call_executed") == 1
        assert b.tool_message_sent(1) == json.loads(envelope.ok("closed T-9"))
        verify(b, run_id)

        # The run is over: resuming it again neither runs the call nor asks the model.
        again = b.resume(run_id)
        assert again.code == 7, again  # nothing to resume
        assert "already ended completed" in again.err
        assert len(b.effect_lines()) == 1 and len(b.server.requests) == 2


def test_deny_in_another_process_tells_the_model_and_never_runs_the_tool(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        run_id = pause(b)

        denied = b.tether("deny", run_id, CALL, "--reason", "not without a receipt", "--db", str(b.db))
        assert denied.code == 0, denied

        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert b.effect_lines() == []
        sent = b.tool_message_sent(1)
        assert sent["ok"] is False
        assert sent["error"]["code"] == "denied"
        assert "not without a receipt" in sent["error"]["message"]
        with b.store() as store:
            assert json.loads(assert_transcript(store, run_id, "refund", ANSWER)) == sent
            assert store.ledger(run_id) == []
            events = store.events(run_id)
        assert "intent_recorded" not in kinds(events) and "call_executed" not in kinds(events)
        verify(b, run_id)


def test_approval_for_other_arguments_is_refused_and_records_nothing(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        run_id = pause(b)
        with b.store() as store:
            before = store.load(run_id).state.to_dict()
            events_before = store.events(run_id)

        refused = b.tether("approve", run_id, CALL, "--fingerprint", "0" * 64, "--db", str(b.db))
        assert refused.code == 7, refused
        assert "other arguments" in refused.err
        with b.store() as store:
            assert store.load(run_id).state.to_dict() == before
            assert store.events(run_id) == events_before
            assert store.load(run_id).state.approvals == {}
        assert b.tether("runs", "verify", run_id, "--db", str(b.db)).code == 0

        # The fingerprint that was shown is accepted, and the call then runs once.
        shown = json.loads(b.tether("runs", "show", run_id, "--db", str(b.db), "--json").out)
        [pending] = shown["pending"]
        assert pending["arguments"] == {"ticket": "T-9"}
        approved = b.tether("approve", run_id, CALL, "--fingerprint", pending["fingerprint"], "--db", str(b.db))
        assert approved.code == 0, approved
        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert len(b.effects_of(run_id)) == 1 and len(b.effect_lines()) == 1


def test_arguments_changed_in_the_store_after_approval_are_not_executed(tmp_path: Path) -> None:
    with bench(tmp_path, script()) as b:
        run_id = pause(b)
        approved = b.tether("approve", run_id, CALL, "--reason", "T-9 only", "--db", str(b.db))
        assert approved.code == 0, approved

        # Someone with write access to the file swaps the approved arguments.
        with sqlite3.connect(b.db) as db:
            changed = db.execute(
                "UPDATE runs SET meta = json_set(meta, '$.pending[0].arguments.ticket', 'OTHER') WHERE id = ?",
                (run_id,),
            ).rowcount
        assert changed == 1
        with b.store() as store:
            assert store.load(run_id, check=False).state.pending[0].arguments == {"ticket": "OTHER"}

        assert_refused_as_tampered(b, run_id)


def test_arguments_rewritten_with_both_fingerprints_after_approval_are_not_executed(tmp_path: Path) -> None:
    """The forger recomputes the call's fingerprint and the approval's: the checkpoint's seal still tells."""
    with bench(tmp_path, script()) as b:
        run_id = pause(b)
        approved = b.tether("approve", run_id, CALL, "--reason", "T-9 only", "--db", str(b.db))
        assert approved.code == 0, approved

        forged = fingerprint("refund", {"ticket": "T-666"})
        with sqlite3.connect(b.db) as db:
            (meta,) = db.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
            state = json.loads(meta)
            state["pending"][0]["arguments"] = {"ticket": "T-666"}
            state["pending"][0]["fingerprint"] = forged
            state["approvals"][CALL]["fingerprint"] = forged
            db.execute("UPDATE runs SET meta = ? WHERE id = ?", (json.dumps(state), run_id))

        assert_refused_as_tampered(b, run_id)


def assert_refused_as_tampered(b: Bench, run_id: str) -> None:
    """``runs verify`` fails, and ``tether resume`` refuses the run: nothing is executed, the model is not asked."""
    verified = b.tether("runs", "verify", run_id, "--db", str(b.db))
    assert verified.code == 6, verified
    assert "tampered" in verified.out

    resumed = b.resume(run_id)
    assert resumed.code == 6, resumed
    assert f"run {run_id}" in resumed.err and "tether runs verify" in resumed.err
    assert b.effect_lines() == []
    assert len(b.server.requests) == 1
    with b.store() as store:
        assert store.ledger(run_id) == []
        events = store.events(run_id)
    assert "intent_recorded" not in kinds(events) and "call_executed" not in kinds(events)


def test_with_an_audit_key_every_process_needs_it(tmp_path: Path) -> None:
    """TETHER_AUDIT_KEY seals the run with an HMAC: run, approve and resume with it; verify without it fails."""
    key = {"TETHER_AUDIT_KEY": "a secret the forger does not have"}
    with bench(tmp_path, script()) as b:
        paused = b.tether(*b.run_argv("Refund ticket T-9."), **key)
        assert paused.code == 20, paused
        run_id = b.run_id()
        refused = b.tether("approve", run_id, CALL, "--db", str(b.db))  # without the key
        assert refused.code == 6, refused
        assert "TETHER_AUDIT_KEY" in refused.err
        assert b.tether("approve", run_id, CALL, "--db", str(b.db), **key).code == 0
        resumed = b.tether("resume", run_id, "--db", str(b.db), "--api-key", "x", **key)
        assert resumed.code == 0, resumed
        assert b.effects_of(run_id) == [f"{run_id}:{CALL}\trefund\tT-9"]

        assert b.tether("runs", "verify", run_id, "--db", str(b.db), **key).code == 0
        unkeyed = b.tether("runs", "verify", run_id, "--db", str(b.db))
        assert unkeyed.code == 6, unkeyed
        assert "set TETHER_AUDIT_KEY to verify it" in unkeyed.out
