"""Odd ground truth and odd results lines through the real ``tether eval``: a ``DatasetError`` naming where, exit 3.

Each file kind the command reads (BFCL's possible answers, single-turn and
multi-turn, BFCL's function documents, tether eval files, ``results.jsonl``
of an earlier run, on resume and in ``compare``) gets every wrong shape;
the command must name the file and line and send nothing, never show a
traceback (``cli_helpers.tether`` fails on one), never rewrite the file.
A line torn by a killed process (the last one, cut short) is still left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.eval import Verdict, check
from tether.testing.fake_server import FakeServer, ReplySpec, text, tool_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from cli_helpers import Completed, endpoint, tether

EXIT_CONFIGURATION = 3

PARAMETERS = {
    "type": "dict",
    "properties": {
        "x": {"type": "integer"},
        "options": {"type": "dict", "properties": {"a": {"type": "integer"}}},
        "rows": {"type": "array", "items": {"type": "dict"}},
        "sizes": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["x"],
}
FUNCTION = {"name": "multiply", "description": "Multiply.", "parameters": PARAMETERS}
QUESTION = [[{"role": "user", "content": "What is 2 times 3?"}]]
# A call that reaches every parameter's check in the scorer.
ARGUMENTS = json.dumps({"x": 1, "options": {"a": 1}, "rows": [{"a": 1}], "sizes": [1]})


def calls_what_is_offered(request: dict[str, Any]) -> ReplySpec:
    """The model: calls the first tool offered with every parameter, or answers in text."""
    if request.get("tools"):
        return tool_calls([("c1", request["tools"][0]["function"]["name"], ARGUMENTS)])
    return text("no tool")


def eval_bfcl(tmp_path: Path, category: str, function: Any, answer: str) -> tuple[Completed, list[Any]]:
    """``tether eval`` on a one-case BFCL file of ``category`` whose possible_answer line is ``answer``."""
    data = tmp_path / f"BFCL_v4_{category}.json"
    data.write_text(json.dumps({"id": "c1", "question": QUESTION, "function": [function]}) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / data.name).write_text(answer + "\n")
    with FakeServer(calls_what_is_offered) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "out"), *endpoint(server))
        return done, server.requests


GOOD_TRUTH = [{"multiply": {"x": [1], "options": [{"a": [1]}], "rows": [[{"a": [1]}]], "sizes": [[1]]}}]


NOT_A_LIST = "ground_truth must be a non-empty list of calls"
ONE_NAME = "ground_truth[0] must be an object of one function's name"
OBJECT_VALUES = 'an object\'s acceptable values must be "" or objects of lists (or strings)'
LIST_VALUES = 'a list\'s acceptable values must be "" or lists'
NO_GROUND_TRUTH = object()


def calls_multiply(**values: Any) -> list[Any]:
    return [{"multiply": {"x": [1], **values}}]


ODD_GROUND_TRUTH: list[tuple[Any, str]] = [
    (NO_GROUND_TRUTH, NOT_A_LIST),
    ("multiply", NOT_A_LIST),
    (5, NOT_A_LIST),
    (None, NOT_A_LIST),
    ({"multiply": {"x": [1]}}, NOT_A_LIST),
    ([], NOT_A_LIST),
    (["multiply"], ONE_NAME),
    ([5], ONE_NAME),
    ([None], ONE_NAME),
    ([GOOD_TRUTH], ONE_NAME),
    ([{}], ONE_NAME),
    ([{**GOOD_TRUTH[0], "add": {}}], ONE_NAME),
    ([{"divide": {"x": [1]}}], "ground_truth[0]: the case offers no 'divide'"),
    ([{"multiply": "x"}], "ground_truth[0].multiply must be an object"),
    ([{"multiply": [1]}], "ground_truth[0].multiply must be an object"),
    ([{"multiply": None}], "ground_truth[0].multiply must be an object"),
    ([{"multiply": {"x": 1}}], "ground_truth[0].multiply.x: the acceptable values must be a list"),
    ([{"multiply": {"x": "1"}}], "ground_truth[0].multiply.x: the acceptable values must be a list"),
    ([{"multiply": {"x": None}}], "ground_truth[0].multiply.x: the acceptable values must be a list"),
    (calls_multiply(options=[{"a": 1}]), f"ground_truth[0].multiply.options[0]: {OBJECT_VALUES}"),
    (calls_multiply(options=[{"a": [1]}, 5]), f"ground_truth[0].multiply.options[1]: {OBJECT_VALUES}"),
    (calls_multiply(rows=[[{"a": [1]}], 5]), f"ground_truth[0].multiply.rows[1]: {LIST_VALUES}"),
    (calls_multiply(rows=[[5]]), f"ground_truth[0].multiply.rows[0][0]: {OBJECT_VALUES}"),
    (calls_multiply(sizes=[[1], 5]), f"ground_truth[0].multiply.sizes[1]: {LIST_VALUES}"),
]


@pytest.mark.parametrize(
    ("ground_truth", "said"),
    ODD_GROUND_TRUTH,
    ids=["no ground_truth" if g is NO_GROUND_TRUTH else json.dumps(g)[:50] for g, _ in ODD_GROUND_TRUTH],
)
@pytest.mark.parametrize("category", ["simple_python", "parallel_multiple"])
def test_odd_bfcl_ground_truth_is_a_dataset_error_naming_its_line(
    tmp_path: Path, category: str, ground_truth: Any, said: str
) -> None:
    answer = {"id": "c1"} if ground_truth is NO_GROUND_TRUTH else {"id": "c1", "ground_truth": ground_truth}
    done, asked = eval_bfcl(tmp_path, category, FUNCTION, json.dumps(answer))
    where = f"{tmp_path / 'possible_answer' / f'BFCL_v4_{category}.json'}:1: "
    assert done.code == EXIT_CONFIGURATION, done
    assert f"error: {where}{said}" in done.err, done
    assert asked == []  # refused before any case is sent


def documented(properties: Any, required: Any = ()) -> dict[str, Any]:
    """multiply, with these properties and required names."""
    return {**FUNCTION, "parameters": {"type": "dict", "properties": properties, "required": list(required)}}


def with_parameters(**parameters: Any) -> dict[str, Any]:
    return {**FUNCTION, "parameters": parameters}


INTEGER = {"x": {"type": "integer"}}
NO_REQUIRED = "multiply: parameters.required must be a list of names"
ODD_DOCUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("no name", {"description": "No name.", "parameters": PARAMETERS}, "functions[0] needs a string name"),
    ("parameters a list", {**FUNCTION, "parameters": []}, "multiply: parameters must be an object"),
    ("no properties", with_parameters(required=[]), "multiply: parameters.properties must be an object"),
    ("no required", with_parameters(properties=INTEGER), NO_REQUIRED),
    ("required a string", with_parameters(properties=INTEGER, required="x"), NO_REQUIRED),
    ("required numbers", documented(INTEGER, [1]), NO_REQUIRED),
    ("property a string", documented({"x": "integer"}), "multiply.x must be an object with a type"),
    ("no type", documented({"x": {}}), "multiply.x must be an object with a type"),
    ("type a list", documented({"x": {"type": ["integer"]}}), "multiply.x must be an object with a type"),
    ("unknown type", documented({"x": {"type": "number"}}), "multiply.x: type 'number' is not one of string"),
    ("no items", documented({"x": {"type": "array"}}), "multiply.x: items must be an object with a type"),
    (
        "unknown items",
        documented({"x": {"type": "array", "items": {"type": "number"}}}),
        "multiply.x: items: type 'number' is not one of string",
    ),
]


@pytest.mark.parametrize(("function", "said"), [c[1:] for c in ODD_DOCUMENTS], ids=[c[0] for c in ODD_DOCUMENTS])
def test_a_function_document_the_scorer_cannot_read_is_a_dataset_error_naming_its_line(
    tmp_path: Path, function: dict[str, Any], said: str
) -> None:
    answer = json.dumps({"id": "c1", "ground_truth": [{"multiply": {"x": [1]}}]})
    done, asked = eval_bfcl(tmp_path, "simple_python", function, answer)
    assert done.code == EXIT_CONFIGURATION, done
    assert f"error: {tmp_path / 'BFCL_v4_simple_python.json'}:1: {said}" in done.err, done
    assert asked == []


def test_a_list_of_objects_that_holds_something_else_gets_a_verdict(tmp_path: Path) -> None:
    # rows may be left out (""): BFCL's nested type check then lets any item through, and its checker raises.
    ground_truth = calls_multiply(rows=["", [{"a": [1]}]])
    data = tmp_path / "BFCL_v4_simple_python.json"
    data.write_text(json.dumps({"id": "c1", "question": QUESTION, "function": [FUNCTION]}) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / data.name).write_text(json.dumps({"id": "c1", "ground_truth": ground_truth}) + "\n")
    with FakeServer(lambda request: tool_calls([("c1", "multiply", '{"x": 1, "rows": ["s"]}')])) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "out"), *endpoint(server))
    assert done.code == 0, done
    line = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert line["outcome"] == "refused"  # the schema gate refused the call, and the checker did not pass it
    for item in ("s", 5, [1]):
        said = [("multiply", json.dumps({"x": 1, "rows": [item]}))]
        verdict = Verdict(False, "type_error:nested", ["Nested type checking failed for parameter 'rows'."])
        assert check("simple_python", [FUNCTION], ground_truth, said) == verdict


MULTI_TURN_CASE = {
    "id": "multi_turn_base_0",
    "question": [[{"role": "user", "content": "Add 2 and 3."}]],
    "initial_config": {},
    "involved_classes": ["MathAPI"],
    "path": [],
}
ADD = {"name": "add", "description": "Add two numbers.", "parameters": {"type": "dict", "properties": {}}}


TURNS = "ground_truth must be a list of turns, each a list of calls"
ODD_MULTI_TURN_TRUTH: list[tuple[Any, str]] = [
    ("add(a=2, b=3)", TURNS),
    (5, TURNS),
    (None, TURNS),
    ({"0": ["add(a=2, b=3)"]}, TURNS),
    (["add(a=2, b=3)"], "ground_truth[0] must be a list of calls"),
    ([5], "ground_truth[0] must be a list of calls"),
    ([[5]], "ground_truth[0][0] must be a call written as text"),
    ([[None]], "ground_truth[0][0] must be a call written as text"),
    ([[["add(a=2, b=3)"]]], "ground_truth[0][0] must be a call written as text"),
    ([[{"add": {"a": 2}}]], "ground_truth[0][0] must be a call written as text"),
    ([["add"]], "ground_truth[0][0]: ground-truth call 'add': not a call of a plain name"),
    ([["add(2, b=)"]], "ground_truth[0][0]: ground-truth call 'add(2, b=)': invalid syntax"),
]


@pytest.mark.parametrize(("truth", "said"), ODD_MULTI_TURN_TRUTH, ids=[json.dumps(t) for t, _ in ODD_MULTI_TURN_TRUTH])
def test_odd_multi_turn_ground_truth_is_a_dataset_error_naming_its_line(tmp_path: Path, truth: Any, said: str) -> None:
    data = tmp_path / "BFCL_v4_multi_turn_base.json"
    data.write_text(json.dumps(MULTI_TURN_CASE) + "\n")
    (tmp_path / "multi_turn_func_doc").mkdir()
    (tmp_path / "multi_turn_func_doc" / "math_api.json").write_text(json.dumps(ADD) + "\n")
    (tmp_path / "possible_answer").mkdir()
    answers = tmp_path / "possible_answer" / data.name
    answers.write_text(json.dumps({"id": MULTI_TURN_CASE["id"], "ground_truth": truth}) + "\n")
    with FakeServer(calls_what_is_offered) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "out"), *endpoint(server))
        assert server.requests == []
    assert done.code == EXIT_CONFIGURATION, done
    assert f"error: {answers}:1: {said}" in done.err, done


@pytest.mark.parametrize("content", [5, ["What is 2 times 3?"], {"text": "What is 2 times 3?"}])
def test_a_message_whose_content_is_not_text_is_a_dataset_error(tmp_path: Path, content: Any) -> None:
    message = {"role": "user", "content": content}
    data = tmp_path / "BFCL_v4_simple_python.json"
    data.write_text(json.dumps({"id": "c1", "question": [[message]], "function": [FUNCTION]}) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / data.name).write_text(json.dumps({"id": "c1", "ground_truth": GOOD_TRUTH}) + "\n")
    mine = tmp_path / "mine.jsonl"
    tool = {"name": "f", "parameters": {"type": "object", "properties": {}}}
    mine.write_text(json.dumps({"id": "a", "messages": [message], "tools": [tool], "expected": []}) + "\n")
    with FakeServer(calls_what_is_offered) as server:
        bfcl = tether("eval", str(data), "--out", str(tmp_path / "bfcl"), *endpoint(server))
        own = tether("eval", str(mine), "--out", str(tmp_path / "own"), *endpoint(server))
        assert server.requests == []
    said = QUESTION_SAID
    assert bfcl.code == EXIT_CONFIGURATION and f"error: {data}:1: {said}" in bfcl.err, bfcl
    assert own.code == EXIT_CONFIGURATION and f"error: {mine}:1: messages[0]: content must be text or null" in own.err


QUESTION_SAID = (
    "each message of the question must be an object with a role (system, user or assistant) and text (or null) content"
)


@pytest.mark.parametrize("role", ["banana", "tool", "User", None])
def test_a_question_message_whose_role_is_none_a_question_holds_is_a_dataset_error(tmp_path: Path, role: Any) -> None:
    """Before, such a message reached the run (a ``tool`` result answering no call, a role no endpoint knows)."""
    data = tmp_path / "BFCL_v4_simple_python.json"
    message = {"role": role, "content": "What is 2 times 3?"}
    data.write_text(json.dumps({"id": "c1", "question": [[message]], "function": [FUNCTION]}) + "\n")
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / data.name).write_text(json.dumps({"id": "c1", "ground_truth": GOOD_TRUTH}) + "\n")
    with FakeServer(calls_what_is_offered) as server:
        done = tether("eval", str(data), "--out", str(tmp_path / "out"), *endpoint(server))
        assert server.requests == []
    assert done.code == EXIT_CONFIGURATION and f"error: {data}:1: {QUESTION_SAID}" in done.err, done


def test_a_tether_dataset_holding_unicode_line_separators_is_read(tmp_path: Path) -> None:
    prompt = "case a\u2028second line\u2029third\x85fourth"  # JSON leaves them as they are; they end no JSON line
    tool = {"name": "f", "parameters": {"type": "object", "properties": {}}}
    mine = tmp_path / "mine.jsonl"
    line = json.dumps({"id": "a", "prompt": prompt, "tools": [tool], "expected": []}, ensure_ascii=False)
    mine.write_text(line + "\n", encoding="utf-8")
    with FakeServer(calls_what_is_offered) as server:
        done = tether("eval", str(mine), "--out", str(tmp_path / "out"), *endpoint(server))
        assert [r["messages"][-1]["content"] for r in server.requests] == [prompt]
    assert done.code == 0, done


# ---------------------------------------------------------------- results.jsonl of an earlier run


def result(case_id: Any, **fields: Any) -> dict[str, Any]:
    """A results line as tether eval writes it."""
    return {
        "id": case_id,
        "category": "mine",
        "valid": True,
        "outcome": "passed",
        "reason": "",
        "calls": [{"tool": "f", "arguments": '{"x": 1}', "gate": "accepted", "message": ""}],
        "content": None,
        "status": "completed",
        "seconds": 0.1,
        "prompt": [{"role": "user", "content": f"case {case_id}"}],
        "expected": [{"tool": "f", "arguments": {"x": [1]}}],
        **fields,
    }


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in result("b").items() if k != key}


AGENTDOJO = {
    "suite": "banking",
    "user_task": "user_task_0",
    "injection_task": None,
    "attack": "none",
    "setting": "no-gate",
    "utility": True,
    "security": None,
    "approvals": [],
    "injected_sinks": [],
    "attackable": False,
    "by_answer": False,
    "tokens": 0,
}
ODD_LINES: list[tuple[str, str]] = [
    ("5", "expected a result (an object), got a number"),
    ('"b"', "expected a result (an object), got a string"),
    ("null", "expected a result (an object), got null"),
    (json.dumps([result("b")]), "expected a result (an object), got a list"),
    ("{}", "no id, category, outcome"),
    (json.dumps(without("id")), "no id"),
    (json.dumps(without("outcome")), "no outcome"),
    (json.dumps(without("category")), "no category"),
    (json.dumps(result(5)), "id must be a string"),
    (json.dumps(result(["b"])), "id must be a string"),
    (json.dumps(result("b", category=5)), "category must be a string"),
    (json.dumps(result("b", outcome=5)), "outcome must be one of passed, mistake, refused, error"),
    (json.dumps(result("b", outcome=["passed"])), "outcome must be one of passed, mistake, refused, error"),
    (json.dumps(result("b", outcome="great")), "outcome must be one of passed, mistake, refused, error"),
    (json.dumps(result("b", outcome="mistake", reason=5)), "reason must be a string"),
    (json.dumps(result("b", calls="f")), "calls must be a list"),
    (json.dumps(result("b", calls=[1, 2])), "calls[0] must be an object"),
    (json.dumps(result("b", calls=[{"tool": "f", "turn": "x"}])), "calls[0].turn must be a whole number"),
    (json.dumps(result("b", calls=[{"tool": "f", "turn": 0}, {"tool": "g"}])), "calls[1] has no turn"),
    (json.dumps(result("b", content=5)), "content must be a string or null"),
    (json.dumps(result("b", status=5)), "status must be a string"),
    (json.dumps(result("b", seconds="fast")), "seconds must be a number"),
    (json.dumps(result("b", seconds=True)), "seconds must be a number"),
    (json.dumps(result("b", prompt="case b")), "prompt must be a list or null"),
    (json.dumps(result("b", prompt=[1])), "prompt[0] must be an object"),
    (json.dumps(result("b", prompt=[{"role": "user", "turn": "x"}])), "prompt[0].turn must be a whole number"),
    (json.dumps(result("b", scores="high")), "scores must be an object or null"),
    (json.dumps(result("b", scores=[])), "scores must be an object or null"),
    (json.dumps(result("b", scores={"utility": True})), "scores: no setting, suite, attack, security"),
    (json.dumps(result("b", scores={**AGENTDOJO, "utility": "yes"})), "scores.utility must be true or false"),
    (json.dumps(result("b", scores={**AGENTDOJO, "attack": 5})), "scores.attack must be a string"),
    (json.dumps(result("b", scores={**AGENTDOJO, "approvals": 2})), "scores.approvals must be a list"),
    (json.dumps(result("b", scores={**AGENTDOJO, "tokens": "many"})), "scores.tokens must be a whole number"),
    ("{not json", "not JSON (Expecting property name enclosed in double quotes)"),
    ("[" * 5000 + "]" * 5000, "nested more than"),
]


def tether_dataset(tmp_path: Path) -> Path:
    """Cases a, b and c: each asks for f(x=1)."""
    tool = {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    path = tmp_path / "mine.jsonl"
    lines = [
        {"id": i, "prompt": f"case {i}", "tools": [tool], "expected": [{"tool": "f", "arguments": {"x": [1]}}]}
        for i in "abc"
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def earlier_run(tmp_path: Path, body: bytes) -> Path:
    """An --out directory whose results.jsonl holds ``body``; a good run to compare it with beside it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(body)
    good = tmp_path / "good"
    good.mkdir()
    (good / "results.jsonl").write_text(json.dumps(result("a")) + "\n")
    return out


def f_of_one(request: dict[str, Any]) -> ReplySpec:
    return tool_calls([("c1", "f", '{"x": 1}')])


@pytest.mark.parametrize(("line", "said"), ODD_LINES, ids=[said for _, said in ODD_LINES])
def test_a_results_line_that_is_no_result_is_refused_with_its_line_number(tmp_path: Path, line: str, said: str) -> None:
    body = f"{json.dumps(result('a'))}\n{line}\n{json.dumps(result('c'))}\n".encode()
    out = earlier_run(tmp_path, body)
    with FakeServer(f_of_one) as server:
        resumed = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert server.requests == []  # nothing sent
    compared = tether("eval", "compare", str(tmp_path / "good"), str(out / "results.jsonl"))
    where = f"error: {out / 'results.jsonl'}:2: "
    for done in (resumed, compared):
        assert done.code == EXIT_CONFIGURATION, done
        assert f"{where}{said}" in done.err, done
    assert (out / "results.jsonl").read_bytes() == body  # left as it was
    assert not (out / "report.html").exists()


def test_a_results_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    first = json.dumps(result("a")).encode() + b"\n"
    out = earlier_run(tmp_path, first + b'{"id": "b\xff"}\n')
    with FakeServer(f_of_one) as server:
        resumed = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert server.requests == []
    compared = tether("eval", "compare", str(out), str(tmp_path / "good"))
    for done in (resumed, compared):
        assert done.code == EXIT_CONFIGURATION, done
        assert f"error: {out / 'results.jsonl'}:2: not UTF-8 text (byte {len(first) + 9})" in done.err, done


@pytest.mark.parametrize("half_a_character", [False, True])
def test_a_torn_last_line_is_left_out_and_run_again(tmp_path: Path, half_a_character: bool) -> None:
    # A process killed while it wrote the line: no newline after it, and maybe half of a character's bytes.
    line = json.dumps(result("c", content="\u00e9" * 10), ensure_ascii=False).encode()
    cut = line.index("\u00e9".encode()) + 1 if half_a_character else 40
    earlier = f"{json.dumps(result('a'))}\n{json.dumps(result('b'))}\n".encode()
    out = earlier_run(tmp_path, earlier + line[:cut])
    compared = tether("eval", "compare", str(out), str(tmp_path / "good"), "--json")
    assert compared.code == 0, compared
    assert [c["id"] for c in json.loads(compared.out)["changes"]] == ["b"]  # only in A; the torn line is no case
    with FakeServer(f_of_one) as server:
        resumed = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert [r["messages"][-1]["content"] for r in server.requests] == ["case c"]
    assert resumed.code == 0, resumed
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "c"]


def test_a_result_holding_unicode_line_separators_is_read_back(tmp_path: Path) -> None:
    # JSON leaves U+2028, U+2029 and U+0085 unescaped; they end lines for str.splitlines, not in JSON lines.
    said = "first\u2028second\u2029third\x85fourth"
    out = earlier_run(tmp_path, (json.dumps(result("a", content=said), ensure_ascii=False) + "\n").encode())
    with FakeServer(f_of_one) as server:
        resumed = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert sorted(r["messages"][-1]["content"] for r in server.requests) == ["case b", "case c"]
    assert resumed.code == 0, resumed
    lines = (out / "results.jsonl").read_text(encoding="utf-8").split("\n")
    assert json.loads(lines[0])["content"] == said


def test_an_agentdojo_results_line_with_odd_scores_is_refused_on_resume(tmp_path: Path) -> None:
    pytest.importorskip("agentdojo.task_suite.load_suites")
    out = tmp_path / "no-gate"
    out.mkdir()
    odd = result("banking/none/user_task_0", category="banking/none", scores={"utility": True})
    body = (json.dumps(odd) + "\n").encode()
    (out / "results.jsonl").write_bytes(body)
    argv = ("eval", "agentdojo", "--scripted", "oracle", "--suite", "banking", "--attack", "none")
    done = tether(*argv, "--setting", "no-gate", "--limit", "1", "--out", str(tmp_path))
    assert done.code == EXIT_CONFIGURATION, done
    assert f"error: {out / 'results.jsonl'}:1: scores: no setting, suite, attack, security" in done.err, done
    assert (out / "results.jsonl").read_bytes() == body


def test_results_of_another_eval_with_the_same_case_ids_are_refused_on_resume(tmp_path: Path) -> None:
    """Another dataset's case a (another category) was taken as this one's: nothing sent, its verdict reported."""
    body = "".join(json.dumps(result(i, category="theirs")) + "\n" for i in "abc").encode()
    out = earlier_run(tmp_path, body)
    with FakeServer(f_of_one) as server:
        done = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert server.requests == []
    assert done.code == EXIT_CONFIGURATION, done
    said = f"error: {out / 'results.jsonl'}:1: case 'a' is of category 'theirs' there and 'mine' here"
    assert said in done.err, done
    assert (out / "results.jsonl").read_bytes() == body
    assert not (out / "report.html").exists()


def test_results_that_cannot_be_rewritten_on_resume_are_a_configuration_error_before_any_case(tmp_path: Path) -> None:
    """A case to run again drops its line: a file that cannot be rewritten was an OSError's traceback."""
    body = f"{json.dumps(result('a'))}\n{json.dumps(result('b', outcome='error'))}\n".encode()
    out = earlier_run(tmp_path, body)
    (out / ".results.jsonl.new").mkdir()  # where the rewritten file goes first
    with FakeServer(f_of_one) as server:
        done = tether("eval", str(tether_dataset(tmp_path)), "--out", str(out), *endpoint(server))
        assert server.requests == []
    assert done.code == EXIT_CONFIGURATION, done
    assert f"error: cannot write the results in {out}: Is a directory" in done.err, done
    assert (out / "results.jsonl").read_bytes() == body


@pytest.mark.parametrize("body", [b"", b"\n\n", b'{"id": "a", "cat'], ids=["empty", "blank-lines", "torn-line"])
@pytest.mark.parametrize("named", ["directory", "file"])
def test_compare_refuses_a_run_that_holds_no_result_named_either_way(tmp_path: Path, body: bytes, named: str) -> None:
    """The help says exit 3 when A or B holds no results: a directory's empty results.jsonl listed every case."""
    out = earlier_run(tmp_path, body)
    place = out if named == "directory" else out / "results.jsonl"
    for argv in ((str(tmp_path / "good"), str(place)), (str(place), str(tmp_path / "good"))):
        done = tether("eval", "compare", *argv)
        assert done.code == EXIT_CONFIGURATION, done
        assert f"error: {out / 'results.jsonl'}: no tether eval results in it" in done.err, done
