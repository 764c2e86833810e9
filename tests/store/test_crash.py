"""A run killed with SIGKILL at each point around a side effect, resumed by ``tether resume``.

The first process is the real ``tether run`` (in ``crash_harness.py``),
which kills itself right after one event was checkpointed, or inside the
tool right after the effect. A fresh process then resumes from the SQLite
file. Whatever the crash point, the effect (a line in a file, keyed by the
call's idempotency key) happens exactly once, no message is lost, an
unknown outcome is reconciled (by the tool's hook or by a person) and never
re-run blindly, and the audit chain verifies.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from process_helpers import (
    CALL,
    SIGKILLED,
    Bench,
    after_last_resume,
    assert_transcript,
    bench,
    kinds,
)

from tether.core import envelope
from tether.testing.fake_server import text, tool_calls

ANSWER = "Ticket T-1 is closed."


def script(tool: str) -> list[object]:
    return [tool_calls([(CALL, tool, '{"ticket": "T-1"}')]), text(ANSWER)]


@dataclass(frozen=True)
class Case:
    at: str  # the CRASH_AT point
    # The last event committed before the process died; "" where only its being committed is asserted: the
    # driver stores an effect's outcome together with the events that follow it (the checkpoint before the
    # next model request), and is killed on hearing of the first.
    last_event: str
    intent: bool  # the ledger holds the intent...
    outcome: bool  # ...and the outcome
    effect_before_resume: bool
    status: str = "awaiting_tools"  # the run's stored status, where last_event names the last event
    asked: int = 1  # model requests made before the crash


# A step commits three times around one side effect: before the model is asked, with the call's intent
# (fsynced, with the reply and its verdicts), and with its outcome before the next model request.
CASES = {
    # Asked, not yet answered: the reply and its calls exist nowhere; resume asks again.
    "a_before_intent": Case("step_started", "step_started", False, False, False, "awaiting_model", 0),
    "b_after_intent": Case("intent_recorded", "intent_recorded", True, False, False),
    # The effect happened, its outcome is not recorded: an unknown outcome for the reconcile hook.
    "c_during_execution": Case("tool", "intent_recorded", True, False, True),
    "e_after_outcome": Case("outcome_recorded", "", True, True, True),
    # (e) again, at the earliest moment: the checkpoint holding the outcome has just committed.
    "e_outcome_committed_state_not": Case("record_outcome", "", True, True, True),
}


def crash(b: Bench, case: Case) -> str:
    """Run until the crash point, check the process died there, return the run id."""
    died = b.crash(case.at)
    assert died.code == SIGKILLED, died
    run_id = b.run_id()
    with b.store() as store:
        stored = store.load(run_id)
        events = kinds(store.events(run_id))
        if case.last_event:
            assert stored.state.status.value == case.status
            assert events[-1] == case.last_event
        else:  # the step's tools may be finished in the stored state (then the tool message is stored too)
            assert "outcome_recorded" in events
            assert stored.state.status.value in ("awaiting_tools", "awaiting_model")
        entry = store.ledger_entry(run_id, CALL)
        assert (entry is not None) == case.intent
        assert (entry is not None and entry.outcome is not None) == case.outcome
    assert len(b.effects_of(run_id)) == (1 if case.effect_before_resume else 0)
    assert len(b.server.requests) == case.asked
    return run_id


def assert_completed_once(b: Bench, run_id: str, tool: str, result: object) -> None:
    """Exactly one effect, the full transcript, the ledger settled, two model requests, the chain intact."""
    assert len(b.effects_of(run_id)) == 1, b.effect_lines()
    assert len(b.effect_lines()) == 1
    expected = envelope.ok(result)
    with b.store() as store:
        stored = store.load(run_id)
        assert stored.state.status.value == "completed"
        assert stored.state.output == ANSWER
        assert assert_transcript(store, run_id, tool, ANSWER) == expected
        entry = store.ledger_entry(run_id, CALL)
        assert entry is not None and entry.outcome == expected
    assert len(b.server.requests) == 2
    assert b.tool_message_sent(1) == json.loads(expected)
    verified = b.tether("runs", "verify", run_id, "--db", str(b.db))
    assert verified.code == 0, verified
    assert "intact" in verified.out


@pytest.mark.parametrize("name", list(CASES))
def test_resume_after_sigkill_takes_effect_exactly_once(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    with bench(tmp_path, script("close_ticket")) as b:
        run_id = crash(b, case)

        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert f"run {run_id}: completed" in resumed.out

        assert_completed_once(b, run_id, "close_ticket", "closed T-1")
        events = b.events(run_id)
        after = after_last_resume(events)
        resumed_kinds = kinds(after)
        assert resumed_kinds[-1] == "run_finished" and after[-1].data["status"] == "completed"
        # Over the whole run, the tool was started at most once.
        assert kinds(events).count("call_executed") <= 1
        if case.at == "step_started":
            assert "reconciliation_needed" not in resumed_kinds
            assert resumed_kinds.count("intent_recorded") == 1
            assert resumed_kinds.count("call_executed") == 1
        elif case.at == "intent_recorded":
            # The hook finds no effect: the call never ran, so it runs now, once.
            needed = next(e for e in after if e.kind == "reconciliation_needed")
            assert needed.data["ids"] == [CALL]
            settled = next(e for e in after if e.kind == "reconciled")
            assert settled.data == {"id": CALL, "tool": "close_ticket", "executed": False, "by": "reconcile hook"}
            assert resumed_kinds.index("reconciled") < resumed_kinds.index("call_executed")
            assert resumed_kinds.count("call_executed") == 1
        elif case.at == "tool":
            # Unknown outcome: the hook finds the effect; the tool does not run again.
            assert resumed_kinds[1] == "reconciliation_needed"
            assert after[1].data["ids"] == [CALL]
            assert resumed_kinds[2] == "reconciled"
            settled_data = dict(after[2].data)
            assert len(settled_data.pop("digest")) == 64  # the recorded result, bound into the audit chain
            assert settled_data == {"id": CALL, "tool": "close_ticket", "executed": True, "by": "reconcile hook"}
            assert "intent_recorded" not in resumed_kinds
            assert "call_executed" not in resumed_kinds
        else:
            # The outcome was committed: no second execution; if the step was still open, the result
            # comes from the ledger.
            assert "reconciliation_needed" not in resumed_kinds
            assert "call_executed" not in resumed_kinds
            assert "intent_recorded" not in resumed_kinds
            if after[0].data["status"] == "awaiting_tools":
                assert "call_recovered" in resumed_kinds


def test_without_a_hook_a_person_reconciles_executed(tmp_path: Path) -> None:
    """Killed inside the tool, right after the effect: its outcome is known to no one but a person."""
    with bench(tmp_path, script("close_ticket_by_hand")) as b:
        run_id = crash(b, Case("tool", "intent_recorded", True, False, True))

        waiting = b.resume(run_id)
        assert waiting.code == 21, waiting
        assert f"tether reconcile {run_id} {CALL} --executed RESULT_JSON | --not-executed" in waiting.err
        with b.store() as store:
            assert store.load(run_id).state.status.value == "awaiting_reconciliation"
            assert store.load(run_id).state.unknown == [CALL]
        assert len(b.server.requests) == 1  # paused before asking the model anything

        # Resuming again changes nothing: still waiting, still not re-run.
        again = b.resume(run_id)
        assert again.code == 21, again
        assert len(b.effects_of(run_id)) == 1

        settled = b.tether("reconcile", run_id, CALL, "--executed", '"done"', "--db", str(b.db))
        assert settled.code == 0, settled
        assert f"continue with: tether resume {run_id}" in settled.out

        finished = b.resume(run_id)
        assert finished.code == 0, finished
        assert_completed_once(b, run_id, "close_ticket_by_hand", "done")
        events = b.events(run_id)
        person = [e for e in events if e.kind == "reconciled"]
        assert [{k: v for k, v in e.data.items() if k != "digest"} for e in person] == [
            {"id": CALL, "tool": "close_ticket_by_hand", "executed": True, "by": "cli"}
        ]
        assert all(len(e.data["digest"]) == 64 for e in person)
        after_crash = kinds(events)[kinds(events).index("run_resumed") :]
        assert "call_executed" not in after_crash
        assert "intent_recorded" not in after_crash


def test_without_a_hook_a_person_says_not_executed_and_resume_runs_it_once(tmp_path: Path) -> None:
    with bench(tmp_path, script("close_ticket_by_hand")) as b:
        run_id = crash(b, Case("intent_recorded", "intent_recorded", True, False, False))

        waiting = b.resume(run_id)
        assert waiting.code == 21, waiting
        assert f"tether reconcile {run_id} {CALL}" in waiting.err

        settled = b.tether("reconcile", run_id, CALL, "--not-executed", "--db", str(b.db))
        assert settled.code == 0, settled
        with b.store() as store:
            assert store.ledger_entry(run_id, CALL) is None  # the intent is cleared
            assert store.load(run_id).state.status.value == "awaiting_tools"

        finished = b.resume(run_id)
        assert finished.code == 0, finished
        assert_completed_once(b, run_id, "close_ticket_by_hand", "closed T-1")
        events = b.events(run_id)
        assert [e.data for e in events if e.kind == "reconciled"] == [
            {"id": CALL, "tool": "close_ticket_by_hand", "executed": False, "by": "cli"}
        ]
        assert kinds(events).count("call_executed") == 1
        assert kinds(after_last_resume(events)).count("call_executed") == 1


def test_a_call_reconciled_as_executed_is_not_logged_as_refused(tmp_path: Path) -> None:
    with bench(tmp_path, script("close_ticket")) as b:
        run_id = crash(b, CASES["c_during_execution"])
        resumed = b.resume(run_id)
        assert resumed.code == 0, resumed
        assert len(b.effects_of(run_id)) == 1
        after = after_last_resume(b.events(run_id))
        assert "reconciled" in kinds(after)
        # The audit log must not say the call was refused: it ran (once, before the crash).
        assert [e.data for e in after if e.kind == "call_rejected"] == []
        assert "refused" not in resumed.out


@pytest.mark.parametrize("at", ["tool", "intent_recorded"])
def test_a_deleted_ledger_row_is_caught_and_the_call_not_run_again(tmp_path: Path, at: str) -> None:
    """Killed right after the intent (and, for ``tool``, the effect); then someone runs ``DELETE FROM ledger``."""
    with bench(tmp_path, script("close_ticket_by_hand")) as b:
        died = b.crash(at)
        assert died.code == SIGKILLED, died
        run_id = b.run_id()
        effects = len(b.effects_of(run_id))
        with sqlite3.connect(b.db) as db:
            assert db.execute("DELETE FROM ledger").rowcount == 1

        verified = b.tether("runs", "verify", run_id, "--db", str(b.db))
        assert verified.code == 6, verified
        assert f"tampered: ledger: call {CALL} " in verified.out

        resumed = b.resume(run_id)
        assert resumed.code == 6, resumed
        assert "tether runs verify" in resumed.err
        assert len(b.effects_of(run_id)) == effects  # not run again
        assert len(b.server.requests) == 1
