"""tether's scorer against BFCL's official AST checker, case by case, for every single-turn category.

For every case of every category in the installed bfcl-eval data: the right
answer (built from the possible answers) and perturbed ones (a wrong type, a
missing required argument, a value outside the allowed set, an extra call,
swapped calls, an unknown tool, broken JSON, no call; a call in an
irrelevance case) get the same verdict and the same BFCL error type from
``tether.eval.check`` as from the official checker.
"""

from __future__ import annotations

import pytest
from bfcl_oracle import DATA, categories, official, perturbations

from tether.eval import check, load


@pytest.mark.parametrize("category", categories())
def test_every_verdict_agrees_with_the_official_checker(category: str) -> None:
    cases = load(DATA / f"BFCL_v4_{category}.json")
    compared, disagreements, oracle_passes = 0, [], 0
    for case in cases:
        for label, output in perturbations(case).items():
            expected = official(category, list(case.functions), case.ground_truth, output)
            got = check(category, case.functions, case.ground_truth, output)
            compared += 1
            if (got.valid, got.error_type) != expected:
                disagreements.append((case.id, label, expected, (got.valid, got.error_type)))
            if label == "oracle" and expected[0]:
                oracle_passes += 1
    assert not disagreements, disagreements[:10]
    assert compared >= 2 * len(cases)
    if cases[0].ground_truth is not None:
        # The oracle's answers are right for nearly every case (a few ground truths contradict their own
        # function documents), so the comparisons above cover passes as well as failures.
        assert oracle_passes >= 0.97 * len(cases)


def test_the_perturbations_fail_where_bfcl_says_they_fail() -> None:
    """A sanity check on the oracle itself: each kind of mistake is caught for a plain case, respellings pass."""
    case = next(c for c in load(DATA / "BFCL_v4_simple_python.json") if c.id == "simple_python_0")
    verdicts = {
        label: check(case.category, case.functions, case.ground_truth, out)
        for label, out in perturbations(case).items()
    }
    accepted = {"oracle", "restyled"}  # BFCL ignores case and ,./-_*^ in strings
    assert {label: v.valid for label, v in verdicts.items()} == {label: label in accepted for label in verdicts}
    assert verdicts["missing_required"].error_type == "simple_function_checker:missing_required"
    assert verdicts["wrong_type"].error_type == "type_error:simple"
    assert verdicts["extra_call"].error_type == "simple_function_checker:wrong_count"
