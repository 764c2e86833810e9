"""The ticket example outside the library: what tether keeps of it is data, and it serves on ``tether serve``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether.eval.dataset import TICKETS_TOOLS, toolset
from tether.serve.target import load_agent
from tickets_app import TicketsDB, seed, ticket_tools

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_eval_tickets_toolset_is_the_example_tools_schemas() -> None:
    """tether eval's "tickets" toolset is kept as data (``tickets_tools.json``): it must be what the tools offer."""

    class NoDatabase:
        pass

    example = [t.spec() for t in ticket_tools(NoDatabase())]  # type: ignore[arg-type]
    assert [t.spec() for t in toolset("tickets")] == example, f"regenerate {TICKETS_TOOLS} from tickets_app.tools"


def test_no_module_of_the_library_names_the_example() -> None:
    named = subprocess.run(
        ["grep", "-rlE", "--include=*.py", "--include=*.md", r"tickets_app|tether\.(tickets|server)\b", str(SRC)],
        capture_output=True,
        text=True,
    )
    assert named.stdout.split() == []


def test_the_assistant_is_an_agent_for_tether_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "tickets.db"
    with TicketsDB(db) as tickets:
        seed(tickets)
    monkeypatch.setenv("TETHER_TICKETS_DB", str(db))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_MODEL", "m")
    monkeypatch.delenv("TETHER_KB_INDEX", raising=False)
    agent = load_agent("tickets_app.agent:agent")
    assert sorted(t.name for t in agent.tools) == sorted(
        ["get_ticket", "list_tickets", "search_kb", "create_ticket", "add_comment", "close_ticket"]
    )
    assert {t.name for t in agent.tools if t.approval} == {"close_ticket"}


def test_import_tether_and_tether_serve_load_no_part_of_the_example() -> None:
    code = "import sys, tether, tether.serve.app\nprint(sorted(m for m in sys.modules if m.startswith('tickets_app')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
