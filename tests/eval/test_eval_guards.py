"""``tether eval`` on awkward datasets, as a user runs it: a real subprocess against the FakeServer.

A case whose tool schemas cannot become tools is that case's error (the
others run); a dataset is data, so a toolset it names by file or module is
imported only with ``--allow-toolset-files``; a call a gate refused never
scores as passed; an empty dataset is an error; a case run again leaves one
line in ``results.jsonl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tether.testing.fake_server import FakeServer, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import endpoint, tether

INTEGER_X = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
CYCLE = {
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/a"}},
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
}
REMOTE = {"type": "object", "properties": {"x": {"$ref": "https://schemas.example.com/x.json"}}}


def case(case_id: str, parameters: Any, **fields: Any) -> dict[str, Any]:
    return {
        "id": case_id,
        "prompt": f"case {case_id}",
        "tools": [{"name": "f", "description": "F.", "parameters": parameters}],
        "expected": [{"tool": "f", "arguments": {"x": [1]}}],
        **fields,
    }


def dataset(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def results(out: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_id = {line["id"]: line for line in lines}
    assert len(by_id) == len(lines), "one line per case"
    return by_id


def calls_f(arguments: str = '{"x": 1}') -> Any:
    return lambda request: tool_calls([("c1", "f", arguments)])


def test_a_case_whose_tools_cannot_be_made_is_an_error_and_the_others_run(tmp_path: Path) -> None:
    entries = [case("cycle", CYCLE), case("remote", REMOTE), case("number", 5), case("fine", INTEGER_X)]
    data = dataset(tmp_path / "mine.jsonl", *entries)
    out = tmp_path / "out"
    with FakeServer(calls_f()) as server:
        done = tether("eval", str(data), "--out", str(out), *endpoint(server))
        asked = [r["messages"][-1]["content"] for r in server.requests]
    assert done.code == 1, done  # some case has no verdict
    assert "3 case(s) had no verdict" in done.err
    assert asked == ["case fine"]  # the broken cases never reach the model
    found = results(out)
    assert found["fine"]["outcome"] == "passed"
    assert found["cycle"]["outcome"] == found["remote"]["outcome"] == found["number"]["outcome"] == "error"
    assert found["cycle"]["reason"].startswith(
        "ToolDefinitionError: tool f: the $ref cycle #/$defs/a -> #/$defs/b -> #/$defs/a never reaches into the value"
    )
    assert "tether never fetches a schema" in found["remote"]["reason"]
    assert found["number"]["reason"] == "ToolDefinitionError: tool f: parameters must be a JSON Schema object"
    report = (out / "report.html").read_text()
    assert "the $ref cycle #/$defs/a -&gt; #/$defs/b" in report
