"""``tether eval`` on awkward datasets, as a user runs it: a real subprocess against the FakeServer.

A case whose tool schemas cannot become tools is that case's error (the
others run); a dataset is data, so a toolset it names by file or module is
imported only with ``--allow-toolset-files``; a call a gate refused never
scores as passed; an empty dataset is an error; a case run again leaves one
line in ``results.jsonl``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from eval_helpers import eval_over_http

from tether.eval import load
from tether.testing.fake_server import FakeServer, raw, text, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import clean_env, endpoint, tether

SRC = Path(__file__).resolve().parents[2] / "src"
FIXTURE = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "bfcl" / "BFCL_v4_simple_python.json"

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


TOOLS_MODULE = '''
from pathlib import Path

from tether import tool

Path(__file__).with_name("imported.txt").write_text("this module ran")


@tool(read_only=True)
def f(x: int) -> int:
    """F."""
    return x
'''


def test_a_dataset_imports_a_toolset_module_or_file_only_with_the_flag(tmp_path: Path) -> None:
    (tmp_path / "my_tools.py").write_text(TOOLS_MODULE)
    marker = tmp_path / "imported.txt"
    env = clean_env(PYTHONPATH=os.pathsep.join([str(SRC), str(tmp_path)]))
    expected = [{"tool": "f", "arguments": {"x": [1]}}]
    with FakeServer(calls_f()) as server:
        for name in (str(tmp_path / "my_tools.py"), "my_tools", "my_tools:f"):
            data = dataset(
                tmp_path / "mine.jsonl", {"id": "a", "prompt": "p", "toolsets": [name], "expected": expected}
            )
            refused = tether("eval", str(data), "--out", str(tmp_path / "out"), *endpoint(server), env=env)
            assert refused.code == 3, refused
            assert f"toolset {name!r} is not a registered toolset (calc, clock, files, tickets)" in refused.err
            assert "only with --allow-toolset-files" in refused.err
            assert not marker.exists()  # nothing of it ran
        assert server.requests == []

        allowed = tether(
            "eval", str(data), "--allow-toolset-files", "--out", str(tmp_path / "out"), *endpoint(server), env=env
        )
        assert allowed.code == 0, allowed
        assert marker.exists()
        assert results(tmp_path / "out")["a"]["outcome"] == "passed"

        # The user's own --toolset is the user's choice, as for tether run; so is a registered name in the file.
        marker.unlink()
        chosen = dataset(tmp_path / "chosen.jsonl", {"id": "b", "prompt": "q", "expected": expected})
        done = tether(
            "eval", str(chosen), "--toolset", "my_tools", "--out", str(tmp_path / "o2"), *endpoint(server), env=env
        )
        assert done.code == 0, done
        assert marker.exists()
    calc = dataset(tmp_path / "calc.jsonl", {"id": "c", "prompt": "r", "toolsets": ["calc"], "expected": []})
    with FakeServer([text("no call")]) as server:
        assert tether("eval", str(calc), "--out", str(tmp_path / "o3"), *endpoint(server)).code == 0


def test_a_call_a_gate_refused_never_scores_as_passed(tmp_path: Path) -> None:
    """BFCL's checker would pass ``math.factorial`` (offered as ``math-factorial``): the gate said unknown_tool."""
    bfcl_case = next(c for c in load(FIXTURE) if c.id == "simple_python_1")
    assert bfcl_case.functions[0]["name"] == "math.factorial"
    right = json.dumps({"number": 5})
    assert bfcl_case.check([("math.factorial", right)]).valid  # the checker alone passes it
    for called, outcome in (("math-factorial", "passed"), ("math.factorial", "refused")):
        scored = eval_over_http(lambda request, called=called: tool_calls([("c1", called, right)]), [bfcl_case])[0]
        assert scored.outcome == outcome, scored
    assert scored.valid is False
    assert scored.reason.startswith("math.factorial: unknown_tool: no tool named 'math.factorial'")
    assert scored.reason.endswith("(the checker alone would pass it)")

    # tether's own format: the expected value is one the tool's schema refuses.
    small = {"type": "object", "properties": {"x": {"type": "integer", "maximum": 5}}, "required": ["x"]}
    data = dataset(
        tmp_path / "mine.jsonl", {**case("big", small), "expected": [{"tool": "f", "arguments": {"x": [7]}}]}
    )
    with FakeServer(calls_f('{"x": 7}')) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "out"), "--json", *endpoint(server))
    assert done.code == 0, done
    assert json.loads(done.out.splitlines()[0])["passed"] == 0
    found = results(tmp_path / "out")["big"]
    assert (found["outcome"], found["valid"]) == ("refused", False)
    assert found["reason"].startswith("f: invalid_arguments: x: must be <= 5")


def test_a_dataset_with_no_cases_or_a_case_id_twice_is_an_error(tmp_path: Path) -> None:
    bfcl = tmp_path / "BFCL_v4_simple_python.json"
    bfcl.write_text("\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / bfcl.name).write_text("")
    blank = dataset(tmp_path / "blank.jsonl")
    one = dataset(tmp_path / "one.jsonl", case("a", INTEGER_X))
    other = dataset(tmp_path / "other.jsonl", case("a", INTEGER_X))
    with FakeServer(calls_f()) as server:
        for argv, message in (
            ([str(bfcl)], f"{bfcl}: no cases in it"),
            ([str(blank)], f"{blank}: no cases in it"),
            ([str(one), str(other)], "case id(s) 'a' appear more than once"),
        ):
            done = tether("eval", *argv, "--out", str(tmp_path / "out"), *endpoint(server))
            assert done.code == 3 and f"error: {message}" in done.err, done
        assert server.requests == []


def test_a_case_run_again_leaves_one_line_in_the_results(tmp_path: Path) -> None:
    data = dataset(tmp_path / "mine.jsonl", *(case(i, INTEGER_X) for i in ("a", "b", "c")))
    out = tmp_path / "out"
    failing = {"b"}

    def respond(request: dict[str, Any]) -> Any:
        if request["messages"][-1]["content"] == "case b" and failing:
            return raw({"error": {"message": "no such key"}}, status=401)  # never retried: an error, no verdict
        return tool_calls([("c1", "f", '{"x": 1}')])

    with FakeServer(respond) as server:
        first = tether("eval", str(data), "--out", str(out), *endpoint(server))
        assert first.code == 1, first
        assert {k: v["outcome"] for k, v in results(out).items()} == {"a": "passed", "b": "error", "c": "passed"}
        failing.clear()
        again = tether("eval", str(data), "--out", str(out), *endpoint(server))
        assert again.code == 0, again
        assert len(server.requests) == 4  # the second run asked only for b
    lines = (out / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == ["a", "b", "c"]
    assert {k: v["outcome"] for k, v in results(out).items()} == {"a": "passed", "b": "passed", "c": "passed"}
