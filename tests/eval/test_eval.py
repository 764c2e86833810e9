"""BFCL cases through tether's real loop: a FakeServer model over HTTP, every gate on, nothing executed.

The FakeServer plays an oracle model: it answers each case with calls built
from the possible answers (or with perturbed ones). The verdict tether gives
each case must be the official checker's on exactly what the model sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bfcl_oracle import DATA, Oracle, Output, categories, official, oracle_output, perturbations
from eval_helpers import eval_over_http

from tether.eval import (
    ERROR,
    MISTAKE,
    PASSED,
    REFUSED,
    Case,
    CaseResult,
    load,
    read_results,
    summarize,
    table,
)
from tether.eval.functions import tool_name
from tether.testing.fake_server import raw, tool_calls


def evaluate(cases: list[Case], outputs: dict[str, Output], **options: Any) -> tuple[list[CaseResult], Oracle]:
    oracle = Oracle(cases, outputs)

    return eval_over_http(oracle, cases, **options), oracle


def assert_agrees(cases: list[Case], outputs: dict[str, Output], results: list[CaseResult]) -> None:
    """tether's verdict is the official one, except that a case where a gate refused a call never passes;
    failures are sorted by what the gates said."""
    assert [r.id for r in results] == [c.id for c in cases]
    disagreements = []
    for case, result in zip(cases, results, strict=True):
        valid, _ = official(case.category, list(case.functions), case.ground_truth, outputs[case.id])
        refused = any(c["gate"] != "accepted" for c in result.calls)
        if result.valid != (valid and not refused):
            disagreements.append((case.id, valid, result.to_dict()))
        expected = REFUSED if refused else PASSED if valid else MISTAKE
        assert result.outcome == expected, result
        assert result.reason.endswith("(the checker alone would pass it)") == (valid and refused), result
        sent = outputs[case.id]
        assert [(c["tool"], c["arguments"]) for c in result.calls] == (sent or [])
    assert not disagreements, disagreements[:5]


def _unambiguous(cases: list[Case]) -> list[Case]:
    ambiguous = Oracle(cases, {}).ambiguous()
    assert len(ambiguous) <= 0.05 * len(cases)
    return [c for c in cases if c.id not in ambiguous]


def all_cases() -> Iterator[Case]:
    for category in categories():
        yield from load(DATA / f"BFCL_v4_{category}.json")


def test_the_oracle_model_scores_like_the_official_checker_on_every_case() -> None:
    cases = _unambiguous(list(all_cases()))
    outputs: dict[str, Output] = {c.id: oracle_output(c) if c.ground_truth is not None else None for c in cases}
    results, oracle = evaluate(cases, outputs, concurrency=16)
    assert sorted(oracle.asked) == sorted(c.id for c in cases)  # one model request per case
    assert_agrees(cases, outputs, results)
    passed = sum(r.outcome == PASSED for r in results)
    # 85 of these 3,578 ground-truth answers break their own function's schema (a value outside its enum,
    # a boolean for a string): the gate refuses them, so they never pass.
    assert passed >= 0.96 * len(cases)
    assert passed + sum(r.outcome == REFUSED for r in results) >= 0.99 * len(cases)


@pytest.mark.parametrize("category", categories())
def test_perturbed_answers_score_like_the_official_checker(category: str) -> None:
    cases = _unambiguous(load(DATA / f"BFCL_v4_{category}.json"))[:12]
    labels = sorted({label for c in cases for label in perturbations(c)})
    for label in labels:
        chosen = [c for c in cases if label in perturbations(c)]
        outputs = {c.id: perturbations(c)[label] for c in chosen}
        results, _ = evaluate(chosen, outputs, concurrency=4)
        assert_agrees(chosen, outputs, results)
        by_outcome = {r.outcome for r in results}
        if label in ("unknown_tool", "bad_json", "call_bad_json") and category.endswith("irrelevance") is False:
            assert by_outcome == {REFUSED}, (label, results[0])
        if label == "no_call" and cases[0].ground_truth is not None:
            assert by_outcome == {MISTAKE}


def test_results_file_summary_and_resume(tmp_path: Path) -> None:
    cases = load(DATA / "BFCL_v4_simple_python.json")[:6] + load(DATA / "BFCL_v4_irrelevance.json")[:4]
    outputs: dict[str, Output] = {c.id: oracle_output(c) if c.ground_truth else None for c in cases}
    outputs[cases[1].id] = None  # no call where one was expected: the model's mistake
    outputs[cases[2].id] = [("no_such_function", "{}")]  # refused by the gate
    outputs[cases[7].id] = [(cases[7].functions[0]["name"], "{}")]  # a call in an irrelevance case
    results, oracle = evaluate(cases, outputs, concurrency=3, out=tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(c.id for c in cases)
    kept = {line["id"]: line for line in lines}
    assert kept[cases[0].id]["valid"] is True and kept[cases[0].id]["calls"][0]["gate"] == "accepted"
    assert kept[cases[1].id]["outcome"] == MISTAKE and kept[cases[1].id]["reason"] == "ast_decoder:decoder_failed"
    assert kept[cases[2].id]["outcome"] == REFUSED and "unknown_tool" in kept[cases[2].id]["reason"]
    assert kept[cases[7].id]["valid"] is False
    rows = summarize(results)
    assert [(r.category, r.cases, r.passed) for r in rows] == [
        ("simple_python", 6, 4),
        ("irrelevance", 4, 3),
        ("total", 10, 7),
    ]
    printed = table(rows)
    assert "simple_python" in printed and "66.7%" in printed and "75.0%" in printed

    again, oracle = evaluate(cases, outputs, concurrency=3, out=tmp_path)
    assert oracle.asked == []  # every case already had a verdict: none is sent again
    assert [r.to_dict() for r in again] == [r.to_dict() for r in results]
    assert len(read_results(tmp_path)) == len(cases)


def test_an_infrastructure_error_is_no_verdict_and_is_retried(tmp_path: Path) -> None:
    cases = load(DATA / "BFCL_v4_simple_python.json")[:3]
    outputs: dict[str, Output] = {c.id: oracle_output(c) for c in cases}

    def go(script: Any) -> list[CaseResult]:
        return eval_over_http(script, cases, max_retries=0, concurrency=1, out=tmp_path)

    broken = go(lambda request: raw({"error": {"message": "unauthorized"}}, status=401))
    assert {r.outcome for r in broken} == {ERROR}
    assert all(r.valid is None and r.reason for r in broken)
    assert summarize(broken)[0].accuracy is None
    fixed = go(Oracle(cases, outputs))
    assert {r.outcome for r in fixed} == {PASSED}
    assert {r.outcome for r in read_results(tmp_path).values()} == {PASSED}


@pytest.mark.parametrize("finish_reason", ["stop", "length"])
def test_a_reply_tether_refuses_whole_never_passes_whatever_bfcl_says(finish_reason: str) -> None:
    """Calls under finish_reason "stop" (a protocol error) or "length" (truncated) end the run unexecuted:
    the case is refused, also when BFCL would pass the calls the model sent (the reason says so)."""
    case = load(DATA / "BFCL_v4_simple_python.json")[0]
    right = oracle_output(case)
    wrong = [(right[0][0], "{}")]
    for output, valid in ((right, True), (wrong, False)):
        official_valid, _ = official(case.category, list(case.functions), case.ground_truth, output)
        assert official_valid is valid

        def respond(request: dict[str, Any], output: Any = output) -> Any:
            calls = [(f"call_{i}", tool_name(n), a) for i, (n, a) in enumerate(output)]
            return tool_calls(calls, finish_reason=finish_reason)

        result = eval_over_http(respond, [case])[0]
        assert result.status == ("protocol_error" if finish_reason == "stop" else "truncated")
        assert result.valid is False
        assert result.outcome == REFUSED
        assert result.reason.endswith("(the checker alone would pass it)") is valid
        assert [(c["tool"], c["arguments"]) for c in result.calls] == output
        assert {c["gate"] for c in result.calls} == {result.status}


def test_exactly_concurrency_requests_are_in_flight(tmp_path: Path) -> None:
    """A slot frees when a reply arrives, and a case already prepared takes it: never more, no gaps between waves."""
    cases = load(DATA / "BFCL_v4_simple_python.json")[:24]
    oracle = Oracle(cases, {c.id: oracle_output(c) for c in cases})
    latency = 0.3
    arrivals: list[float] = []

    def respond(request: dict[str, Any]) -> Any:
        arrivals.append(time.monotonic())
        return oracle(request)

    results = eval_over_http(respond, cases, latency=latency, concurrency=4, out=tmp_path)
    assert {r.outcome for r in results} == {PASSED}
    assert len(arrivals) == 24
    # A request holds its slot for at least the latency, so no window shorter than it sees more than 4 arrive.
    in_window = [sum(1 for b in arrivals if a <= b < a + 0.9 * latency) for a in arrivals]
    assert max(in_window) == 4
    # Six waves of four: each case waiting for a slot is sent as soon as one frees, not a wave later.
    waves = [arrivals[i + 4] - arrivals[i] for i in range(20)]
    assert max(waves) < 2 * latency, waves
