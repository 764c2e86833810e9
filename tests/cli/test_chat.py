"""tether chat through a real pseudo-terminal (pexpect), and tether run --continue, against FakeServer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pexpect
from cli_helpers import clean_env, tether

from tether.store import SQLiteStore
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

REPO = Path(__file__).resolve().parents[2]

MAILER = '''
from tether import tool

@tool(approval=True)
def send(to: str) -> str:
    """Send a note (needs approval)."""
    return f"sent to {to}"
'''


def model(request: dict[str, Any]) -> ReplySpec:
    messages = request["messages"]
    last = messages[-1]
    users = [m["content"] for m in messages if m["role"] == "user"]
    if last["role"] == "tool":
        return text(f"done: {json.loads(last['content'])['result']}")
    if "send" in last["content"]:
        return tool_calls([(f"c{len(messages)}", "send", '{"to": "bob"}')])
    return text(f"turn {len(users)}, you said {users[-1]!r}")


def test_two_turns_an_inline_approval_and_ctrl_d(tmp_path: Path) -> None:
    (tmp_path / "mailer.py").write_text(MAILER)
    db = tmp_path / "runs.db"
    with FakeServer(model) as server:
        env = clean_env(PYTHONPATH=f"{REPO / 'src'}:{tmp_path}", OPENAI_BASE_URL=server.base_url, OPENAI_MODEL="m")
        child = pexpect.spawn(
            sys.executable,
            ["-m", "tether", "chat", "--tools", "mailer", "--db", str(db)],
            env=env,
            cwd=str(tmp_path),
            encoding="utf-8",
            timeout=30,
        )
        child.expect(r"conversation (\w+) \(Ctrl-D to leave\)")
        conversation_id = child.match.group(1)
        child.expect_exact("you> ")
        child.sendline("please send bob a note")
        child.expect_exact('call c1 send {"to": "bob"}: waiting for approval: send requires approval')
        child.expect_exact('approve send({"to": "bob"})? [y/N] ')
        child.sendline("y")
        child.expect_exact('call c1 send {"to": "bob"}: ran -> ok')
        child.expect_exact("agent> done: sent to bob")
        child.expect_exact("you> ")
        child.sendline("thanks")
        child.expect_exact("agent> turn 2, you said 'thanks'")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before

        # The conversation is stored; `tether run --continue` adds a third turn.
        done = tether("run", "and one more", "--continue", conversation_id, "--db", str(db), env=env)
        assert done.code == 0, done.err
        assert "answer: turn 3, you said 'and one more'" in done.out

    stored = SQLiteStore(db).load_conversation(conversation_id)
    assert [status for _, status in stored.turns] == ["completed"] * 3
    listed = tether("runs", "list", "--db", str(db), env=clean_env())
    assert listed.out.count(f"conversation {conversation_id} turn") == 3
    as_json = json.loads(tether("runs", "list", "--db", str(db), "--json", env=clean_env()).out)
    assert sorted(r["turn"] for r in as_json) == [1, 2, 3]


def test_the_approval_question_shows_control_characters_in_the_arguments_not_obeys_them(tmp_path: Path) -> None:
    """The y/N question is where a person turns what they see into a permission: an argument holding the 8-bit
    CSI (U+009B, "erase the line") or DEL is shown as an escape there, as on every other line about a call."""
    (tmp_path / "mailer.py").write_text(MAILER)
    hidden = '{"to": "mallory\\u009b2K\\u009b1Gbob\\u007f"}'  # on a terminal that obeys: the line shows "bob"

    def sly(request: dict[str, Any]) -> ReplySpec:
        if request["messages"][-1]["role"] == "tool":
            return text("done")
        return tool_calls([("c1", "send", hidden)])

    with FakeServer(sly) as server:
        env = clean_env(PYTHONPATH=f"{REPO / 'src'}:{tmp_path}", OPENAI_BASE_URL=server.base_url, OPENAI_MODEL="m")
        child = pexpect.spawn(
            sys.executable,
            ["-m", "tether", "chat", "--tools", "mailer", "--db", str(tmp_path / "runs.db")],
            env=env,
            cwd=str(tmp_path),
            encoding="utf-8",
            timeout=30,
        )
        child.expect_exact("you> ")
        child.sendline("send bob a note")
        child.expect_exact("[y/N] ")
        asked = child.before
        child.sendline("n")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
    question = asked[asked.rindex("approve send(") :]
    assert "\u009b" not in question and "\u007f" not in question, repr(question)
    assert question == 'approve send({"to": "mallory\\x9b2K\\x9b1Gbob\\x7f"})? '
