"""A tree of runs (a sub-agent's child runs) in a real SQLite file: crashes, tampering, and the CLI over it.

- SIGKILL at each commit boundary around the child's side effect (the real
  ``tether run`` in the crash harness, with ``--tools subagent_tools``), then
  ``tether resume`` of the parent: the effect happens exactly once, both runs
  complete, the parent's transcript holds the child's answer once, and both
  verify.
- Editing the tree (the parent column, a child's transcript) is found by
  ``store.verify`` and ``tether runs verify`` of either run, and resuming the
  parent is refused.
- ``tether runs list/show`` show the tree; ``tether approve`` given the parent
  decides a call of the child it waits with.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import HARNESS, SIGKILLED, Bench, Done, assert_transcript, bench, kinds

from tether import Agent, OpenAIChatModel, Status, tool
from tether.core.errors import TamperedRun
from tether.drivers.local.subagents import child_run_id
from tether.store import SQLiteStore
from tether.testing.fake_server import text, tool_calls

PARENT_CALL = "call_p"
CHILD_CALL = "call_1"
CHILD_ANSWER = "Ticket T-1 is closed."
ANSWER = "The clerk closed T-1."
SCRIPT = [
    tool_calls([(PARENT_CALL, "clerk", json.dumps({"input": "Close ticket T-1."}))]),
    tool_calls([(CHILD_CALL, "close_ticket", '{"ticket": "T-1"}')]),
    text(CHILD_ANSWER),
    text(ANSWER),
]


def run_tree(b: Bench, crash_at: str) -> Done:
    """The parent run by the real ``tether run`` in the crash harness, killed at ``crash_at``."""
    argv = [
        "run", "Close ticket T-1, please.", "--tools", "subagent_tools", "--db", str(b.db),
        "--base-url", b.server.base_url, "--model", "fake", "--api-key", "x",
    ]  # fmt: skip
    env = b.env(CRASH_AT=crash_at, OPENAI_BASE_URL=b.server.base_url, OPENAI_API_KEY="x")
    return b._call([sys.executable, str(HARNESS), *argv], env)


def parent_id(b: Bench) -> str:
    with b.store() as store:
        [parent] = [r for r in store.list_runs() if r.parent_id is None]
    return parent.run_id


# Each a commit boundary around the child's side effect: the parent has logged its child (the child's row is
# written, nothing run); the child's intent is on disk; the effect happened, its outcome not recorded (the
# tool kills the process right after the effect); the checkpoint holding the outcome has just committed.
CRASH_POINTS = ["child_run", "intent_recorded", "tool", "record_outcome"]


@pytest.mark.parametrize("at", CRASH_POINTS)
def test_a_tree_killed_around_the_childs_side_effect_resumes_with_exactly_one_effect(tmp_path: Path, at: str) -> None:
    with bench(tmp_path, SCRIPT) as b:
        died = run_tree(b, at)
        assert died.code == SIGKILLED, died
        run_id = parent_id(b)
        child_id = child_run_id(run_id, PARENT_CALL)
        with b.store() as store:
            assert store.load(run_id).state.status is Status.AWAITING_TOOLS
            assert store.load(child_id).parent_id == run_id
        effects_before = len(b.effects_of(child_id, CHILD_CALL))
        assert effects_before == (1 if at in ("tool", "record_outcome") else 0)

        resumed = b.tether("resume", run_id, "--db", str(b.db), "--api-key", "x", OPENAI_BASE_URL=b.server.base_url)
        assert resumed.code == 0, resumed
        assert f"run {run_id}: completed" in resumed.out

        assert len(b.effects_of(child_id, CHILD_CALL)) == 1, b.effect_lines()
        assert len(b.effect_lines()) == 1
        with b.store() as store:
            parent, child = store.load(run_id), store.load(child_id)
            assert parent.state.status is Status.COMPLETED and parent.state.output == ANSWER
            assert child.state.status is Status.COMPLETED and child.state.output == CHILD_ANSWER
            # The parent's transcript holds the child's answer once, as the delegating call's result.
            content = assert_transcript(store, run_id, "clerk", ANSWER, call_id=PARENT_CALL)
            assert json.loads(content) == {"ok": True, "result": CHILD_ANSWER}
            assert assert_transcript(store, child_id, "close_ticket", CHILD_ANSWER) == json.dumps(
                {"ok": True, "result": "closed T-1"}
            )
            assert [c.run_id for c in store.children(run_id)] == [child_id]
            # The child's usage counts once in the parent: four replies of (10, 5) in the whole tree.
            assert (parent.state.usage.input_tokens, parent.state.usage.output_tokens) == (40, 20)
            assert kinds(store.events(child_id)).count("call_executed") <= 1
        assert len(b.server.requests) == 4
        for run in (run_id, child_id):
            verified = b.tether("runs", "verify", run, "--db", str(b.db))
            assert verified.code == 0 and "intact" in verified.out, verified


def test_a_childs_unknown_outcome_is_settled_through_the_parent_with_the_cli(tmp_path: Path) -> None:
    script = [
        tool_calls([(PARENT_CALL, "clerk_by_hand", json.dumps({"input": "Close ticket T-1."}))]),
        tool_calls([(CHILD_CALL, "close_ticket_by_hand", '{"ticket": "T-1"}')]),
        text(CHILD_ANSWER),
        text(ANSWER),
    ]
    with bench(tmp_path, script) as b:
        assert run_tree(b, "intent_recorded").code == SIGKILLED  # the child's intent is on disk, no effect yet
        run_id = parent_id(b)
        child_id = child_run_id(run_id, PARENT_CALL)
        env = {"OPENAI_BASE_URL": b.server.base_url}

        waiting = b.tether("resume", run_id, "--db", str(b.db), "--api-key", "x", **env)
        assert waiting.code == 21, waiting  # awaiting_reconciliation: the child's call has no hook
        assert (
            f"paused: the outcome of call {CHILD_CALL} in child run {child_id} is unknown; record it with "
            f"`tether reconcile {run_id} {CHILD_CALL} --executed RESULT_JSON | --not-executed`"
        ) in waiting.err
        with b.store() as store:
            assert store.load(run_id).state.waiting_on == {PARENT_CALL: child_id}

        settled = b.tether("reconcile", run_id, CHILD_CALL, "--not-executed", "--db", str(b.db))
        assert settled.code == 0, settled
        done = b.tether("resume", run_id, "--db", str(b.db), "--api-key", "x", **env)
        assert done.code == 0 and f"run {run_id}: completed" in done.out, done
        assert len(b.effects_of(child_id, CHILD_CALL)) == 1 and len(b.effect_lines()) == 1
        with b.store() as store:
            assert store.load(child_id).state.status is Status.COMPLETED
            content = assert_transcript(store, run_id, "clerk_by_hand", ANSWER, call_id=PARENT_CALL)
            assert json.loads(content) == {"ok": True, "result": CHILD_ANSWER}
            assert store.verify(run_id) == []


# --- tampering ------------------------------------------------------------------------------------


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make_tree(tmp_path: Path) -> tuple[Path, str, str]:
    """A completed parent and child in ``runs.db``; their ids."""
    from tether.testing import FakeServer

    script = [tool_calls([("c1", "helper", '{"input": "1 + 2?"}')]), text("3"), text("It is 3.")]
    with FakeServer(script) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        parent = Agent(model, [Agent(model, [add]).as_tool(name="helper")], store=store)
        result = parent.run_sync("1 + 2?")
        store.close()
    assert result.status is Status.COMPLETED
    return tmp_path / "runs.db", result.run_id, child_run_id(result.run_id, "c1")


def edit(db: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute(sql, params)


def cli(db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    command = [sys.executable, "-m", "tether", *argv, "--db", str(db)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)


def verify(db: Path, run_id: str) -> list[str]:
    store = SQLiteStore(db)
    try:
        return store.verify(run_id)
    finally:
        store.close()


def test_an_intact_tree_verifies_from_both_ends(tmp_path: Path) -> None:
    db, parent, child = make_tree(tmp_path)
    assert verify(db, parent) == [] and verify(db, child) == []


def test_a_child_cut_from_its_parent_fails_verify_of_both(tmp_path: Path) -> None:
    db, parent, child = make_tree(tmp_path)
    edit(db, "UPDATE runs SET parent_id = NULL WHERE id = ?", child)
    assert any("does not match its seal" in p for p in verify(db, child))
    assert any(f"child run {child} is missing, or names another parent" in p for p in verify(db, parent))


def test_a_run_moved_under_another_parent_fails_verify_of_both(tmp_path: Path) -> None:
    db, parent, _ = make_tree(tmp_path)
    _, other, _ = make_tree(tmp_path)  # a second tree in the same file
    edit(db, "UPDATE runs SET parent_id = ? WHERE id = ?", parent, other)  # a top-level run made a child
    assert any("does not match its seal" in p for p in verify(db, other))
    problems = verify(db, parent)
    assert any(p.startswith(f"child run {other}: run: its row") for p in problems), problems


def test_an_edit_in_the_child_fails_verify_of_the_parent_and_its_resume_is_refused(tmp_path: Path) -> None:
    db, parent, child = make_tree(tmp_path)
    edit(db, "UPDATE messages SET body = replace(body, '1 + 2', '9 + 9') WHERE run_id = ? AND seq = 0", child)
    problems = verify(db, parent)
    assert any(p.startswith(f"child run {child}: message 0") for p in problems), problems
    store = SQLiteStore(db)
    with pytest.raises(TamperedRun, match=f"child run {child}"):
        store.load(parent)  # what resume acts on
    store.close()
    refused = cli(db, "runs", "verify", parent)
    assert refused.returncode == 6 and f"child run {child}" in refused.stdout


@pytest.mark.parametrize("name,key", [("legacy-v5.db", None), ("legacy-v5-keyed.db", "legacy key")])
def test_a_store_from_before_child_runs_migrates_keeps_its_seals_and_holds_a_tree(
    tmp_path: Path, name: str, key: str | None
) -> None:
    from tether.testing import FakeServer

    db = tmp_path / name
    shutil.copyfile(Path(__file__).resolve().parent / "data" / name, db)
    script = [tool_calls([("c1", "helper", '{"input": "1 + 2?"}')]), text("3"), text("It is 3.")]
    with FakeServer(script) as server:
        store = SQLiteStore(db, audit_key=key)
        assert store.verify("legacy-completed") == []  # sealed before the parent column existed: it still holds
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        result = Agent(model, [Agent(model, [add]).as_tool(name="helper")], store=store).run_sync("1 + 2?")
        child = child_run_id(result.run_id, "c1")
        assert store.verify(result.run_id) == [] and store.verify(child) == []
        store.close()
    with sqlite3.connect(db) as raw:
        names = [row[0] for row in raw.execute("SELECT name FROM schema_migrations ORDER BY version")]
        assert "m8_child_runs" in names
        raw.execute("UPDATE runs SET parent_id = ? WHERE id = ?", (result.run_id, "legacy-completed"))
    store = SQLiteStore(db, audit_key=key)
    assert any("does not match its seal" in p for p in store.verify("legacy-completed"))
    assert any(p.startswith("child run legacy-completed: ") for p in store.verify(result.run_id))
    store.close()


# --- the CLI over a tree ----------------------------------------------------------------------------


def test_runs_list_and_show_show_the_tree(tmp_path: Path) -> None:
    db, parent, child = make_tree(tmp_path)
    shown = cli(db, "runs", "show", parent)
    assert shown.returncode == 0, shown
    assert f"child run {child} (call c1 helper): completed, 1 step(s), 10 input and 5 output tokens" in shown.stdout
    assert f"call c1 helper: drives child run {child}" in shown.stdout
    assert f"child run of run {parent}" in cli(db, "runs", "show", child[:12]).stdout
    as_json = json.loads(cli(db, "runs", "show", parent, "--json").stdout)
    assert as_json["parent_id"] is None
    assert as_json["children"] == [
        {
            "run_id": child,
            "call_id": "c1",
            "tool": "helper",
            "status": "completed",
            "steps": 1,
            "usage": {"input_tokens": 10, "output_tokens": 5},
            "children": [],
        }
    ]
    assert json.loads(cli(db, "runs", "show", child, "--json").stdout)["parent_id"] == parent
    lines = {line.split()[0]: line for line in cli(db, "runs", "list").stdout.splitlines()}
    assert lines[child].endswith(f"child of {parent}") and "child of" not in lines[parent]
    listed = {r["run_id"]: r["parent_id"] for r in json.loads(cli(db, "runs", "list", "--json").stdout)}
    assert listed == {parent: None, child: parent}


REFUNDS: list[str] = []


@tool(approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves each)."""
    REFUNDS.append(order)
    return f"refunded {order}"


@pytest.mark.parametrize("approved", [True, False], ids=["approve", "deny"])
def test_a_childs_call_is_decided_through_the_parent_with_the_cli(tmp_path: Path, approved: bool) -> None:
    from tether.testing import FakeServer

    REFUNDS.clear()
    script = [
        tool_calls([("c1", "helper", '{"input": "Refund A-1."}')]),
        tool_calls([("r1", "refund", '{"order": "A-1"}')]),
        text("done"),
        text("Done."),
    ]
    with FakeServer(script) as server:
        store = SQLiteStore(tmp_path / "runs.db")
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
        agent = Agent(model, [Agent(model, [refund], store=store).as_tool(name="helper")], store=store)
        paused = agent.run_sync("Refund A-1.")
        parent, child = paused.run_id, child_run_id(paused.run_id, "c1")
        assert paused.status is Status.AWAITING_APPROVAL
        db = tmp_path / "runs.db"

        shown = cli(db, "runs", "show", parent)
        assert 'pending: call r1 refund {"order": "A-1"}' in shown.stdout and f"in child run {child}" in shown.stdout
        [pending] = json.loads(cli(db, "runs", "show", parent, "--json").stdout)["pending"]
        assert (pending["id"], pending["tool"], pending["run_id"]) == ("r1", "refund", child)

        decided = cli(db, "approve" if approved else "deny", parent, "r1")
        assert decided.returncode == 0, decided
        word = "approved" if approved else "denied"
        assert f"call r1 (refund) {word}; continue with: tether resume {parent}" in decided.stdout
        assert store.load(child).state.approvals["r1"]["approved"] is approved

        import asyncio

        done = asyncio.run(agent.resume(parent).run())
        store.close()
    assert done.status is Status.COMPLETED and done.output == "Done."
    assert (["A-1"] if approved else []) == REFUNDS


def test_a_call_the_tree_does_not_wait_on_is_refused_naming_the_parent(tmp_path: Path) -> None:
    db, parent, _ = make_tree(tmp_path)
    refused = cli(db, "approve", parent, "r9")
    assert refused.returncode == 7 and f"run {parent} is completed, not awaiting_approval" in refused.stderr


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_tree_is_recorded_and_checked_on_either_database(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    from tether.models.scripted import ScriptedModel, reply_calls, reply_text
    from tether.store import open_store

    on_postgres = kind == "postgres"
    target = request.getfixturevalue("postgres_server").schema_url() if on_postgres else str(tmp_path / "runs.db")
    store = open_store(target)
    try:
        child_model = ScriptedModel([reply_calls(("a1", "add", '{"a": 1, "b": 2}')), reply_text("3")])
        parent_model = ScriptedModel([reply_calls(("c1", "helper", '{"input": "1 + 2?"}')), reply_text("It is 3.")])
        helper = Agent(child_model, [add]).as_tool(name="helper")
        result = await Agent(parent_model, [helper], store=store).run("1 + 2?")
        child = child_run_id(result.run_id, "c1")
        assert result.output == "It is 3." and [c.run_id for c in store.children(result.run_id)] == [child]
        assert store.verify(result.run_id) == [] and store.load(child).parent_id == result.run_id
        assert (result.state.tool_calls, result.state.child_steps) == (2, 2)
    finally:
        store.close()
    raw = open_store(target)  # a writer outside tether: the column set to another run's id, then to null
    try:
        with raw.dialect.write() as tx:  # type: ignore[attr-defined]
            tx.execute("UPDATE runs SET parent_id = NULL WHERE id = ?", (child,))
        assert any("does not match its seal" in p for p in raw.verify(child))
        assert any(f"child run {child} is missing" in p for p in raw.verify(result.run_id))
    finally:
        raw.close()
