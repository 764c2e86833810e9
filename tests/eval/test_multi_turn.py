"""BFCL multi-turn cases through tether's real loop: a FakeServer model over HTTP plays trajectories,
tether executes the calls on BFCL's stateful classes, and its verdict must be BFCL's own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from html import escape
from pathlib import Path
from typing import Any

import pytest
from bfcl_multi_turn_oracle import PERTURBATIONS, Trajectory, TrajectoryModel, dropped_call, official, trajectory
from eval_helpers import eval_over_http

from tether.core.messages import Message
from tether.eval import MISTAKE, PASSED, CaseResult, MultiTurnCase, load, read_results
from tether.eval.functions import data_dir
from tether.eval.multi_turn import (
    MAX_STEPS_PER_TURN,
    MULTI_TURN,
    execute,
    executed_turns,
    instantiate,
    methods,
    parse_call,
)
from tether.testing.fake_server import FakeServer, Reply, ReplySpec, text, tool_calls


def evaluate(
    cases: list[MultiTurnCase],
    plans: dict[str, Trajectory],
    model: type[TrajectoryModel] = TrajectoryModel,
    **options: Any,
) -> tuple[list[CaseResult], TrajectoryModel]:
    responder = model(cases, plans)

    return eval_over_http(responder, cases, **options), responder


def unambiguous(cases: list[MultiTurnCase]) -> list[MultiTurnCase]:
    ambiguous = TrajectoryModel(cases, {}).ambiguous()
    assert len(ambiguous) <= 0.1 * len(cases)
    return [c for c in cases if c.id not in ambiguous]


def assert_agrees(
    cases: list[MultiTurnCase], results: list[CaseResult], responder: TrajectoryModel
) -> list[tuple[bool, str]]:
    """tether's verdict on what it executed is BFCL's on the same calls, case by case.

    The turns run are those the model was asked about (fewer than the case has when it was forced to quit)."""
    assert [r.id for r in results] == [c.id for c in cases]
    verdicts, disagreements = [], []
    for case, result in zip(cases, results, strict=True):
        executed = executed_turns(result.calls, responder.turns[case.id])
        valid, error_type = official(case, executed)
        verdicts.append((valid, error_type))
        ours = result.reason.split(": ", 1)[0] if result.reason else ""
        if result.valid != valid or (not valid and ours != error_type):
            disagreements.append((case.id, valid, error_type, result.outcome, result.reason[:200]))
    assert not disagreements, disagreements[:5]
    return verdicts


@pytest.mark.parametrize("category", MULTI_TURN)
def test_the_ground_truth_trajectories_score_like_the_official_checker_on_every_case(category: str) -> None:
    cases = unambiguous(load(category))
    plans = {c.id: trajectory(c) for c in cases}
    results, responder = evaluate(cases, plans, concurrency=8)
    verdicts = assert_agrees(cases, results, responder)
    # The only calls not executed are ground-truth calls tether's gates refuse: one breaks its own
    # function document (*_173 closes a ticket by a string id where the document asks for an integer),
    # one calls a function held out until a later turn (multi_turn_miss_func_49 calls tail in turn 1).
    refused = {r.id for r in results for c in r.calls if not c["executed"]}
    assert {c["gate"] for r in results for c in r.calls if not c["executed"]} <= {"invalid_arguments", "unknown_tool"}
    assert len(refused) <= 2
    assert {r.id for r in results if r.outcome == "refused"} == refused
    # A turn of more than 21 ground-truth calls, played one call per step, meets BFCL's step limit
    # (multi_turn_long_context_38 and _46): the model is forced to quit after 21 steps, a mistake.
    limit = MAX_STEPS_PER_TURN + 1
    forced = {c.id for c in cases if any(len(turn) > limit for turn in c.ground_truth)}
    assert {r.id for r in results if r.outcome == MISTAKE} == forced
    assert all(sum(c["executed"] for c in r.calls) == limit for r in results if r.id in forced)
    passed = sum(r.outcome == PASSED for r in results)
    assert passed == sum(valid for valid, _ in verdicts)
    assert passed == len(cases) - len(refused) - len(forced)
    assert passed >= 0.95 * len(cases)
    # every call of the ground truth was a step of its own, and each turn ended with a text answer
    asked = [c for c in cases if c.id not in forced]
    calls = sum(len(turn) for c in asked for turn in c.ground_truth)
    assert responder.requests - limit * len(forced) == calls + sum(len(c.turns) for c in asked)


@pytest.mark.parametrize("category", MULTI_TURN)
@pytest.mark.parametrize("label", sorted(PERTURBATIONS))
def test_perturbed_trajectories_fail_with_the_official_verdict(label: str, category: str) -> None:
    cases = unambiguous(load(category))
    plans = {}
    for case in cases:
        plan = PERTURBATIONS[label](trajectory(case))
        if plan is not None:
            plans[case.id] = plan
    chosen = [c for c in cases if c.id in plans]
    results, responder = evaluate(chosen, plans, concurrency=8)
    verdicts = assert_agrees(chosen, results, responder)
    failing = [r for r in results if r.outcome != PASSED]
    assert len(failing) >= 0.8 * len(chosen)  # some changed arguments leave state and results as they were
    # refused only where a gate refused a ground-truth call (*_173, multi_turn_miss_func_49, as above)
    refused = {r.id for r in results for c in r.calls if not c["executed"]}
    assert {r.id for r in failing if r.outcome != MISTAKE} == refused and len(refused) <= 2
    kinds = {error_type for valid, error_type in verdicts if not valid}
    assert kinds <= {
        "multi_turn:instance_state_mismatch",
        "multi_turn:execution_response_mismatch",
        "multi_turn:empty_turn_model_response",
        "multi_turn:force_terminated",  # long_context's turns of more than 21 calls (see above)
    }


def test_results_show_each_turns_calls_and_resume_skips_scored_cases(tmp_path: Path) -> None:
    cases = load("multi_turn_base")[:3]
    plans = {c.id: trajectory(c) for c in cases}
    plans[cases[1].id] = [[], *plans[cases[1].id][1:]]  # nothing done in the first turn
    results, _ = evaluate(cases, plans, concurrency=2, out=tmp_path)
    lines = {line["id"]: line for line in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    first = lines[cases[0].id]
    assert first["outcome"] == PASSED and first["valid"] is True
    assert [(c["turn"], c["step"], c["tool"]) for c in first["calls"]][:2] == [(0, 0, "cd"), (0, 1, "mkdir")]
    assert json.loads(first["calls"][0]["arguments"]) == {"folder": "document"}
    assert first["expected"][0][0] == "cd(folder='document')"
    assert [m["turn"] for m in first["prompt"]] == list(range(len(cases[0].turns)))
    second = lines[cases[1].id]
    assert second["outcome"] == MISTAKE
    assert second["reason"].startswith("multi_turn:empty_turn_model_response: ")
    again, responder = evaluate(cases, plans, concurrency=2, out=tmp_path)
    assert responder.requests == 0  # every case already had a verdict
    assert [r.to_dict() for r in again] == [r.to_dict() for r in results]
    assert len(read_results(tmp_path)) == 3


def test_a_model_still_calling_after_bfcls_step_limit_is_forced_to_quit() -> None:
    case = load("multi_turn_base")[0]
    calls = 0

    def respond(request: dict[str, Any]) -> Any:
        nonlocal calls
        calls += 1
        return tool_calls([(f"call_{calls}", "pwd" if calls % 2 else "ls", "{}")])  # never the same call twice in a row

    result = eval_over_http(respond, [case])[0]
    assert calls == MAX_STEPS_PER_TURN + 1  # as BFCL: 21 steps of calls, then the case is given up
    assert [c["executed"] for c in result.calls] == [True] * calls  # BFCL executes the 21st step's calls too
    assert result.outcome == MISTAKE  # BFCL's limit, the model's failing: not a refusal by a gate
    assert result.valid is False
    assert result.reason.startswith("multi_turn:force_terminated")
    assert {c["turn"] for c in result.calls} == {0}
    assert official(case, executed_turns(result.calls, 1)) == (False, "multi_turn:force_terminated")


def test_a_call_the_gates_refuse_is_not_executed_and_the_case_is_refused() -> None:
    case = load("multi_turn_base")[0]
    plan = trajectory(case)
    replies = iter(
        [tool_calls([("call_x", "cd", json.dumps({"folder": 7}))])]  # an integer where a string is required
        + [tool_calls([("call_y", "cd", json.dumps({"folder": "document", "force": True}))])]  # not in the document
        + [tool_calls([("call_z", "mkdir", "{}")])]  # the required dir_name missing
        + [tool_calls([(f"c{i}", n, json.dumps(a))]) for i, ((n, a),) in enumerate(plan[0])]
    )

    def respond(request: dict[str, Any]) -> Any:
        return next(replies, None) or text("Done.")

    result = eval_over_http(respond, [case])[0]
    for refused in result.calls[:3]:
        assert refused["gate"] == "invalid_arguments" and refused["executed"] is False
    assert all(c["executed"] for c in result.calls[3:])
    assert result.outcome == "refused" and "invalid_arguments" in result.reason


def test_tether_eval_runs_a_multi_turn_category_from_the_command_line(tmp_path: Path) -> None:
    from test_eval_cli import _env

    cases = load("multi_turn_base")[:3]
    plans = {c.id: trajectory(c) for c in cases}
    plans[cases[2].id] = dropped_call(plans[cases[2].id]) or []
    responder = TrajectoryModel(cases, plans)
    argv = [sys.executable, "-m", "tether", "eval", "multi_turn_base", "--limit", "3", "--out", str(tmp_path)]
    argv += ["--model", "fake", "--api-key", "x", "--json", "--base-url"]
    with FakeServer(responder) as server:
        done = subprocess.run([*argv, server.base_url], capture_output=True, text=True, env=_env(), timeout=120)
        assert done.returncode == 0, done.stderr
        (row,) = [json.loads(line) for line in done.stdout.splitlines()]
        assert (row["category"], row["cases"], row["passed"], row["mistakes"]) == ("multi_turn_base", 3, 2, 1)
        sent = responder.requests
        again = subprocess.run([*argv, server.base_url], capture_output=True, text=True, env=_env(), timeout=120)
        assert again.returncode == 0 and responder.requests == sent  # resumed: nothing sent again
    page = (tmp_path / "report.html").read_text()
    assert page.count('data-testid="failing-case"') == 1 and cases[2].id in page
    assert page.count('data-testid="turn"') == len(cases[2].turns)


def test_without_bfcl_eval_a_multi_turn_case_says_what_to_install() -> None:
    from test_eval_cli import _env

    script = (
        "import sys; sys.modules['bfcl_eval'] = None\n"  # as if it were not installed
        "import tether.eval, tether.eval.multi_turn as m\n"
        "assert 'bfcl_eval' not in [n for n, v in sys.modules.items() if v is not None]\n"
        "try:\n    m.bfcl_class('GorillaFileSystem')\nexcept tether.eval.DatasetError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install --no-deps bfcl-eval==2026.3.23 mpmath" in done.stdout


def _play(cases: list[MultiTurnCase], steps: list[list[tuple[str, dict[str, Any]]]], **options: Any) -> Any:
    """Each case's single turn played as ``steps`` (one list of calls per step), then "Done."; the results
    and, per case, the tool results the model was shown (found by the first user message)."""
    by_prompt = {str(c.turns[0][0].content): c.id for c in cases}
    shown: dict[str, list[str]] = {c.id: [] for c in cases}

    def respond(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        case = by_prompt[next(m["content"] for m in messages if m["role"] == "user")]
        step = sum(1 for m in messages if m["role"] == "assistant")
        shown[case] = [m["content"] for m in messages if m["role"] == "tool"]
        if step >= len(steps):
            return text("Done.")
        return tool_calls([(f"c{step}_{i}", n, json.dumps(a)) for i, (n, a) in enumerate(steps[step])])

    return eval_over_http(respond, cases, **options), shown


def _balance(case: MultiTurnCase) -> Any:
    travel = instantiate(case.involved_classes, case.initial_config, case.long_context)["TravelAPI"]
    return travel.get_credit_card_balance(access_token="abc123xyz", card_id=EXTENSION_CARD)["card_balance"]


EXTENSION_CARD = "1234567812345678"  # a card long_context adds to every TravelAPI (BFCL's module-level dict)


def test_concurrent_cases_of_one_class_share_no_state() -> None:
    (base,) = [c for c in load("multi_turn_long_context") if c.id == "multi_turn_long_context_153"]
    book = "book_flight(access_token='abc123xyz', card_id='1234567812345678', travel_date='2026-11-15', "
    book += "travel_from='LAX', travel_to='JFK', travel_class='economy')"
    check = "get_credit_card_balance(access_token='abc123xyz', card_id='1234567812345678')"
    cases = [
        replace(base, id=f"twin_{i}", turns=((Message("user", f"Twin {i}: book LAX-JFK and tell me the balance."),),))
        for i in (1, 2)
    ]
    cases = [replace(c, ground_truth=((book, check),)) for c in cases]
    assert _balance(cases[0]) == 5000.0
    steps = [[parse_keywords(book)], [parse_keywords(check)]]
    results, shown = _play(cases, steps, concurrency=2)
    # each twin booked 1200 on its own card: neither saw the other's booking (which, shared, left
    # too little for a second one), and both pass
    assert shown["twin_1"] == shown["twin_2"] and '"booking_status": true' in shown["twin_1"][0]
    assert [re.findall(r'"card_balance": ?([0-9.]+)', shown[c.id][-1]) for c in cases] == [["3800.0"]] * 2
    assert [r.outcome for r in results] == [PASSED, PASSED]
    assert _balance(cases[0]) == 5000.0  # nor did a later case


def parse_keywords(source: str) -> tuple[str, dict[str, Any]]:
    name, args, kwargs = parse_call(source)
    assert not args
    return name, kwargs


def test_a_value_a_bfcl_method_returns_is_the_callers_own() -> None:
    """VehicleControlAPI's long-context weather writes a module-level dict and returns it."""
    (case,) = [c for c in load("multi_turn_long_context") if "VehicleControlAPI" in c.involved_classes][:1]
    docs = [d for d in case.functions if d["name"] == "get_outside_temperature_from_google"]
    first, second = (
        case.bound_tools(docs, instantiate(case.involved_classes, case.initial_config, True))[0].function
        for _ in range(2)
    )
    seen = first()
    before = json.dumps(seen)
    second(), second()  # the second instance's next readings differ from its first
    assert json.dumps(seen) == before


def test_an_exception_in_a_bfcl_method_is_the_calls_error_result_with_bfcls_message() -> None:
    (base,) = [c for c in load("multi_turn_base") if "TravelAPI" in c.involved_classes][:1]
    raises = "compute_exchange_rate(base_currency='USD', target_currency='XYZ', value=1.0)"  # a ValueError
    case = replace(base, turns=base.turns[:1], ground_truth=((raises,),))
    results, shown = _play([case], [[parse_keywords(raises)]])
    (result,) = results
    (call,) = result.calls
    assert (call["gate"], call["executed"]) == ("accepted", True)
    (error,) = shown[case.id]
    # what BFCL's own run shows the model, and the result its checker compares
    assert "Error during execution: No available exchange rate for the given currencies." in error
    assert result.outcome == PASSED
    assert official(case, executed_turns(result.calls, 1)) == (True, "")


@pytest.mark.parametrize(
    "source",
    [
        "f(x={[1]: 2})",  # a literal Python cannot build (an unhashable key)
        "f(**extra)",  # arguments that are not written out
        "f(x=1, x=2)",  # a repeated keyword
        "f(x=" + "-" * 100_000 + "1)",  # too deep for Python's parser
        "f(x=__import__('os').system('true'))",  # code, never run
    ],
)
def test_a_ground_truth_call_is_parsed_as_literals_and_anything_else_is_a_precise_error(source: str) -> None:
    from tether.eval import DatasetError

    with pytest.raises(DatasetError, match=r"^ground-truth call "):
        parse_call(source)


def test_the_report_and_eval_compare_read_multi_turn_results(tmp_path: Path) -> None:
    from test_eval_cli import _env
    from test_eval_report import HOSTILE, _open_in_browser

    from tether.eval.report import write_report

    cases = unambiguous(load("multi_turn_base"))[:4]
    good = {c.id: trajectory(c) for c in cases}
    fixed, broken = cases[2], cases[1]
    runs = {"a": {**good, fixed.id: dropped_call(good[fixed.id]) or []}, "b": {**good, broken.id: []}}

    class Hostile(TrajectoryModel):  # `broken` answers with markup
        def __call__(self, request: dict[str, Any]) -> ReplySpec:
            spec = super().__call__(request)
            first = next(m["content"] for m in request["messages"] if m["role"] == "user")
            answers = isinstance(spec, Reply) and not spec.tool_calls
            return text(f"No. {HOSTILE}") if answers and first == broken.turns[0][0].content else spec

    for name, plans in runs.items():  # in B, `broken` makes no call in any turn
        results, _ = evaluate(cases, plans, Hostile, out=tmp_path / name)
        write_report(tmp_path / name, results)

    compare = [sys.executable, "-m", "tether", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")]
    document = json.loads(subprocess.run([*compare, "--json"], capture_output=True, text=True, env=_env()).stdout)
    assert {(c["id"], c["change"], c["before"], c["after"]) for c in document["changes"]} == {
        (fixed.id, "fixed", MISTAKE, PASSED),
        (broken.id, "broken", PASSED, MISTAKE),
    }
    (change,) = [c for c in document["changes"] if c["id"] == broken.id]
    assert change["reason_after"].startswith("multi_turn:empty_turn_model_response: ")
    assert document["accuracy"] == {"multi_turn_base": {"a": 0.75, "b": 0.75}}
    shown = subprocess.run(compare, capture_output=True, text=True, env=_env())
    assert shown.returncode == 0 and "2 case(s) changed: 1 fixed, 1 broken" in shown.stdout
    assert "multi_turn_base: accuracy 75.0% -> 75.0%" in shown.stdout

    page = (tmp_path / "b" / "report.html").read_text()
    (failing,) = page.split('<details data-testid="failing-case"')[1:]
    assert f'data-case="{broken.id}"' in failing
    # every turn is shown, each with no call, and the expected calls turn by turn
    assert failing.count('data-testid="turn"') == len(broken.turns)
    assert failing.count("no call") == len(broken.turns)
    assert escape(broken.ground_truth[0][0], quote=False) in failing
    _open_in_browser(tmp_path / "b" / "report.html", broken.id, "multi_turn_base=75.0%", tmp_path)


def test_a_scenario_a_bfcl_class_cannot_load_is_that_cases_error_and_the_others_run() -> None:
    cases = load("multi_turn_base")[:2]
    broken = replace(cases[0], initial_config={"GorillaFileSystem": {"root": 5}})  # not a directory tree
    results, _ = evaluate([broken, cases[1]], {c.id: trajectory(c) for c in cases}, concurrency=2)
    assert results[0].outcome == "error" and results[0].valid is None
    assert results[0].reason.startswith("DatasetError: GorillaFileSystem: the initial_config cannot be loaded (")
    assert results[1].outcome == PASSED


def test_a_turn_that_is_not_one_user_message_is_a_precise_error(tmp_path: Path) -> None:
    from tether.eval import DatasetError

    data = data_dir()
    assert data is not None
    name = "BFCL_v4_multi_turn_base.json"
    entry, truth = (json.loads((data / d / name).read_text().splitlines()[0]) for d in (".", "possible_answer"))
    entry["question"][1] = [{"role": "system", "content": "Be terse."}, *entry["question"][1]]
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / name).write_text(json.dumps(truth) + "\n")
    (tmp_path / name).write_text(json.dumps(entry) + "\n")
    with pytest.raises(DatasetError, match=r"BFCL_v4_multi_turn_base.json:1: turn 1 must be one user message"):
        load(tmp_path / name)


def test_the_model_reads_a_long_context_result_whole_as_bfcl_shows_it() -> None:
    (base,) = [c for c in load("multi_turn_long_context") if c.id == "multi_turn_long_context_100"]
    call = "get_stock_info(symbol='NVDA')"  # 31,7xx characters with long_context's moving averages
    case = replace(base, turns=base.turns[:1], ground_truth=((call,),))
    results, shown = _play([case], [[parse_keywords(call)]])
    (result,) = shown[case.id]
    expected = execute(methods(instantiate(case.involved_classes, case.initial_config, True)), *parse_call(call))
    assert len(expected) > 20_000  # above tether's default limit for a tool's result
    assert json.loads(result)["result"] == json.loads(expected)
    assert results[0].outcome == PASSED
