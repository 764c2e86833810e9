"""docs/migrating/pydantic-ai.md: its tether program runs and prints what the page says, pydantic-ai's prints
the same against the same server, and the one is the other with the page's renames and nothing else."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

import pytest

from tether import Agent, ScriptedModel
from tether.core.errors import ConfigurationError
from tether.models.scripted import reply_text
from tether.testing import FakeServer
from tether.testing.replies import raw, text, tool_calls

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "migrating" / "pydantic-ai.md"


def block(name: str) -> str:
    """The fenced block after ``<!-- migration: name -->``."""
    found = re.search(rf"<!-- migration: {name} -->\n```\w+\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"no {name} block on the page"
    return found.group(1)


def renames() -> dict[str, str]:
    """The page's table: pydantic-ai's qualified name -> tether's."""
    rows = re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", PAGE.read_text(), re.M)
    assert rows, "the page has no rename table"
    return dict(rows)


def imported(source: str) -> tuple[dict[str, str], set[int]]:
    """Each name the program imports (as it is bound) -> its qualified name, and the lines the imports take."""
    names, lines = {}, set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
        else:
            continue
        lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return names, lines


def tokens(source: str, skip: set[int], rename: dict[str, str]) -> list[tuple[int, str]]:
    """The program's tokens outside the import lines, each name renamed as ``rename`` says."""
    kept = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.start[0] in skip or token.type in (tokenize.NL, tokenize.COMMENT):
            continue
        value = rename.get(token.string, token.string) if token.type == tokenize.NAME else token.string
        kept.append((token.type, value))
    return kept


def test_the_tether_program_is_pydantic_ais_with_the_renames_only() -> None:
    table = renames()
    theirs, ours = block("pydantic-ai"), block("tether")
    their_imports, their_lines = imported(theirs)
    our_imports, our_lines = imported(ours)
    # Every import is either one both programs make (pydantic, dataclasses) or a rename in the table.
    mapped = {table.get(qualified, qualified) for qualified in their_imports.values()}
    assert mapped == set(our_imports.values())
    used = {qualified for qualified in their_imports.values() if qualified in table}
    assert used == set(table), "a rename in the table that the program does not use"
    bound = {
        name: our_name
        for name, q in their_imports.items()
        for our_name, ours_q in our_imports.items()
        if table.get(q) == ours_q
    }
    assert tokens(theirs, their_lines, bound) == tokens(ours, our_lines, {})


# The server both programs talk to: gpt-4o is down; gpt-4o-mini first offers too much for A-2, then what the
# correction asks, and A-1 in full. It answers with a call when it is offered a tool (an output tool), else with
# the JSON text (a response_format), so each library may ask for structured output its own way.
def desk(request: dict[str, Any]) -> Any:
    if request.get("model") == "gpt-4o":
        return raw({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    messages = request["messages"]
    last = json.dumps(messages[-1])
    if "at most" in last:
        answer = {"order_id": "A-2", "amount": 12.5, "reason": "broken on arrival"}
    elif "A-1 never came" in last:
        answer = {"order_id": "A-1", "amount": 30.0, "reason": "never delivered"}
    else:
        answer = {"order_id": "A-2", "amount": 20.0, "reason": "broken on arrival"}
    offered = [t["function"]["name"] for t in request.get("tools", ())]
    if offered:
        return tool_calls([(f"call_{len(messages)}", offered[0], json.dumps(answer))])
    return text(json.dumps(answer))


def run_program(source: str, tmp_path: Path, base_url: str) -> str:
    program = tmp_path / "desk.py"
    program.write_text(source)
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(ROOT / "src")}
    env.pop("OPENAI_MODEL", None)
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_tether_program_prints_what_the_page_says(tmp_path: Path) -> None:
    with FakeServer(desk) as server:
        printed = run_program(block("tether"), tmp_path, server.base_url)
    assert printed == block("output")
    answered = [r for r in server.requests if r["model"] == "gpt-4o-mini"]
    assert {r["model"] for r in server.requests} == {"gpt-4o", "gpt-4o-mini"}  # the fallback was needed
    first, correction, second = answered
    assert (first["temperature"], first["max_tokens"]) == (0.2, 400)
    assert (second["temperature"], second["max_tokens"]) == (0.0, 400)  # the run's settings over the Agent's
    sent = json.dumps(first["messages"])
    assert "You decide refunds" in sent and "The customer is Ada. Their orders: A-1 (30.00), A-2 (12.50)." in sent
    assert "a refund of A-2 can be at most 12.50" in json.dumps(correction["messages"][-1])
    assert "broken on arrival" in json.dumps(second["messages"])  # the history read back from JSON was sent


def test_the_pydantic_ai_program_prints_the_same(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    with FakeServer(desk) as server:
        printed = run_program(block("pydantic-ai"), tmp_path, server.base_url)
    assert printed == block("output")


class Desk:
    pass


def test_deps_of_another_class_than_deps_type_are_refused_before_anything_is_sent() -> None:
    model = ScriptedModel([reply_text("unused")])
    agent = Agent(model, deps_type=Desk)
    with pytest.raises(ConfigurationError, match="deps is a str, not the Agent's deps_type Desk"):
        agent.run_sync("Hello", deps="a desk")
    assert model.requests == []
    assert Agent(ScriptedModel([reply_text("Hi")]), deps_type=Desk).run_sync("Hello", deps=Desk()).output == "Hi"
    # A type isinstance cannot check is for type checkers only.
    assert (
        Agent(ScriptedModel([reply_text("Hi")]), deps_type=dict[str, int]).run_sync("Hello", deps={"a": 1}).output
        == "Hi"
    )
