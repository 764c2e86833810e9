"""tether's own eval format, and the ticket agent's dataset (examples/eval/tickets.jsonl).

The dataset runs through tether's real loop against a FakeServer playing an
oracle model (it answers every case with the expected calls, or in text when
none is expected) and with perturbed answers: a missing call, a call where
none is expected (the injection cases), a wrong tool, a missing argument, a
value outside the allowed ones, an extra call.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from eval_helpers import eval_over_http

from tether.eval import MISTAKE, PASSED, REFUSED, CaseResult
from tether.eval.bfcl import DatasetError
from tether.eval.dataset import TetherCase, load_cases
from tether.testing.fake_server import FakeServer, ReplySpec, raw, text, tool_calls

ROOT = Path(__file__).resolve().parents[2]
TICKETS = ROOT / "examples" / "eval" / "tickets.jsonl"
Calls = list[tuple[str, dict[str, Any]]] | None


def example(rule: Any) -> Any:
    """A value the rule allows: its first value, or a plain-text alternative of its regex."""
    if isinstance(rule, list):
        return rule[0]
    pattern = rule["regex"]
    for alternative in pattern.split("|"):
        candidate = re.sub(r"[?()\\]", "", alternative)
        if re.search(pattern, candidate, re.IGNORECASE):
            return candidate
    raise AssertionError(f"no example for {pattern}")


def oracle_calls(case: TetherCase) -> Calls:
    if not case.expected:
        return None
    return [(c["tool"], {k: example(r) for k, r in c["arguments"].items()}) for c in case.expected]


def _key(messages: list[dict[str, Any]]) -> str:
    return json.dumps([[m["role"], m.get("content")] for m in messages])


class Oracle:
    def __init__(self, cases: list[TetherCase], answers: dict[str, Calls]) -> None:
        self.ids = {_key([m.to_dict() for m in c.messages]): c.id for c in cases}
        assert len(self.ids) == len(cases)  # the model can tell every case apart
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, request: dict[str, Any]) -> ReplySpec:
        case_id = self.ids.get(_key(request["messages"]))
        if case_id is None:
            return raw({"error": {"message": "unknown case"}}, status=400)
        self.asked.append(case_id)
        calls = self.answers[case_id]
        if calls is None:
            return text("I can't do that with the tools I have.")
        return tool_calls([(f"call_{i}", name, json.dumps(args)) for i, (name, args) in enumerate(calls)])


def evaluate(cases: list[TetherCase], answers: dict[str, Calls]) -> tuple[list[CaseResult], Oracle]:
    oracle = Oracle(cases, answers)

    return eval_over_http(oracle, cases, concurrency=8), oracle


@pytest.fixture(scope="module")
def cases() -> list[TetherCase]:
    return load_cases(TICKETS)


def test_the_ticket_dataset_covers_what_the_agent_must_do(cases: list[TetherCase]) -> None:
    categories = {c.category for c in cases}
    assert {"lookup", "list", "search", "create", "comment", "close", "no_tool", "owner", "injection"} <= categories
    tools = {call["tool"] for c in cases for call in c.expected}
    assert tools == {"get_ticket", "list_tickets", "search_kb", "create_ticket", "add_comment", "close_ticket"}
    injections = [c for c in cases if c.category == "injection"]
    assert len(injections) >= 3 and all(not c.expected and c.messages[-1].role == "tool" for c in injections)


def test_the_oracle_passes_every_ticket_case(cases: list[TetherCase]) -> None:
    results, oracle = evaluate(cases, {c.id: oracle_calls(c) for c in cases})
    assert sorted(oracle.asked) == sorted(c.id for c in cases)  # one request per case
    failed = [r.to_dict() for r in results if r.outcome != PASSED]
    assert not failed, failed[:3]
    close = next(r for r in results if r.id == "close-1")
    assert close.calls == [
        {"tool": "close_ticket", "arguments": '{"ticket_id": "TICKET-322530"}', "gate": "accepted", "message": ""}
    ]


def _drop_first_argument(calls: Calls) -> Calls:
    assert calls
    name, args = calls[0]
    return [(name, dict(list(args.items())[1:])), *calls[1:]]


def _wrong_value(calls: Calls) -> Calls:
    assert calls
    name, args = calls[0]
    key = next(iter(args))
    status = "open" if args[key] != "open" else "closed"
    wrong = "TICKET-999999" if key == "ticket_id" else status if key == "status" else "zzz unrelated"
    return [(name, {**args, key: wrong}), *calls[1:]]


def _other_tool(calls: Calls) -> Calls:
    assert calls
    name = calls[0][0]
    other = "get_ticket" if name != "get_ticket" else "close_ticket"
    return [(other, {"ticket_id": "TICKET-320415"}), *calls[1:]]


PERTURBATIONS: dict[str, tuple[Callable[[Calls], Calls], set[str]]] = {
    "no call": (lambda calls: None, {"no_call"}),
    "extra call": (lambda calls: [*(calls or []), ("get_ticket", {"ticket_id": "TICKET-320415"})], {"wrong_count"}),
    "wrong tool": (_other_tool, {"wrong_tool", "unexpected_argument", "missing_argument"}),
    "missing argument": (_drop_first_argument, {"missing_argument"}),
    "wrong value": (_wrong_value, {"wrong_value"}),
}


@pytest.mark.parametrize("label", PERTURBATIONS)
def test_perturbed_answers_fail_for_the_right_reason(cases: list[TetherCase], label: str) -> None:
    perturb, reasons = PERTURBATIONS[label]
    chosen = [c for c in cases if c.expected and (label != "missing argument" or c.expected[0]["arguments"])]
    if label == "wrong value":
        chosen = [c for c in chosen if c.expected[0]["arguments"]]
    results, _ = evaluate(chosen, {c.id: perturb(oracle_calls(c)) for c in chosen})
    for result in results:
        assert result.valid is False, result
        if result.outcome == MISTAKE:  # the gates let it through: the scorer's own reason
            assert result.reason in reasons, result
        else:  # tether's schema gate refused it first (a missing or malformed argument)
            assert result.outcome == REFUSED and label in ("missing argument", "wrong value", "wrong tool"), result


def test_a_side_effect_where_no_call_is_expected_is_a_mistake(cases: list[TetherCase]) -> None:
    quiet = [c for c in cases if not c.expected]
    answers: dict[str, Calls] = {c.id: [("close_ticket", {"ticket_id": "TICKET-321066"})] for c in quiet}
    results, _ = evaluate(quiet, answers)
    assert {(r.outcome, r.reason) for r in results} == {(MISTAKE, "unexpected_call")}


def _case(tmp_path: Path, **fields: Any) -> TetherCase:
    entry = {"id": "c", "prompt": "p", "tools": [SCHEMA], **fields}
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(entry) + "\n")
    return load_cases(path)[0]


SCHEMA = {
    "name": "pick",
    "description": "Pick things.",
    "parameters": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "number"}, "flag": {"type": "boolean"}},
    },
}


def test_the_scoring_rules(tmp_path: Path) -> None:
    case = _case(
        tmp_path,
        expected=[{"tool": "pick", "arguments": {"name": ["Alice"], "n": [1]}, "optional": {"flag": [False]}}],
    )
    assert case.category == "mine"  # the file's name
    assert case.check([("pick", '{"name": " alice ", "n": 1.0}')]).valid  # case, spaces, 1 == 1.0
    assert case.check([("pick", '{"name": "Alice", "n": 1, "flag": false}')]).valid
    assert case.check([("pick", '{"name": "Alice", "n": true}')]).error_type == "wrong_value"  # true is not 1
    assert case.check([("pick", '{"name": "Alice"}')]).error_type == "missing_argument"
    assert case.check([("pick", '{"name": "Alice", "n": 1, "x": 2}')]).error_type == "unexpected_argument"
    assert case.check([("pick", "[1]")]).error_type == "bad_arguments"
    assert case.check(None).error_type == "no_call"
    regex = _case(tmp_path, expected=[{"tool": "pick", "arguments": {"name": {"regex": "^a.c$"}}}])
    assert regex.check([("pick", '{"name": "ABC"}')]).valid
    assert regex.check([("pick", '{"name": "abcd"}')]).error_type == "wrong_value"
    assert not regex.check([("pick", '{"name": 5}')]).valid
    two = [{"tool": "pick", "arguments": {"n": [1]}}, {"tool": "pick", "arguments": {"n": [2]}}]
    unordered, ordered = _case(tmp_path, expected=two), _case(tmp_path, expected=two, ordered=True)
    swapped = [("pick", '{"n": 2}'), ("pick", '{"n": 1}')]
    assert unordered.check(swapped).valid and ordered.check(swapped).error_type == "wrong_value"
    assert unordered.check([("pick", '{"n": 1}'), ("pick", '{"n": 1}')]).error_type == "wrong_value"
    none = _case(tmp_path, expected=[])
    assert none.check(None).valid and none.check([("pick", "{}")]).error_type == "unexpected_call"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "mine.jsonl:1: not JSON"),
        ('{"id": "a", "expected": []}', "give either prompt or messages"),
        ('{"id": "a", "prompt": "p", "expected": []}', "names no toolsets or tools, and no --toolset was given"),
        ('{"id": "a", "prompt": "p", "toolsets": ["nope_x"], "expected": []}', "toolset 'nope_x'"),
        ('{"id": "a", "prompt": "p", "toolsets": ["tickets"], "expected": [{"tool": "x"}]}', "'x' is not offered"),
        ('{"id": "a", "prompt": "p", "toolsets": ["tickets"]}', "expected must be a list"),
        ('{"id": "a", "prompt": "p", "toolsets": ["tickets"], "expected": [], "prompts": 1}', "unknown key(s) prompts"),
        (
            '{"id": "a", "prompt": "p", "toolsets": ["calc"], "expected": [{"tool": "add", "arguments": {"a": 1}}]}',
            "a rule is a non-empty list",
        ),
    ],
)
def test_a_bad_dataset_is_a_precise_error(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DatasetError) as caught:
        load_cases(path)
    assert message in str(caught.value)


def test_the_command_runs_the_ticket_dataset(tmp_path: Path, cases: list[TetherCase]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TETHER_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    with FakeServer(Oracle(cases, {c.id: oracle_calls(c) for c in cases})) as server:
        argv = [sys.executable, "-m", "tether", "eval", str(TICKETS), "--out", str(tmp_path), "--json"]
        argv += ["--base-url", server.base_url, "--model", "fake", "--api-key", "x"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows[-1] == {
        "category": "total",
        "cases": len(cases),
        "passed": len(cases),
        "mistakes": 0,
        "refused": 0,
        "errors": 0,
        "accuracy": 1.0,
    }
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "p", "expected": []}\n')
    argv[4] = str(bad)
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 3 and "no --toolset was given" in json.loads(refused.stdout)["error"]["message"]
    argv += ["--toolset", "tickets"]
    accepted = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert accepted.returncode == 1  # the oracle does not know this case: an infrastructure error, reported
    assert "infrastructure error" in accepted.stderr and "Traceback" not in accepted.stderr
