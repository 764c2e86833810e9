"""BFCL's multi-turn checker as a test oracle, and a model that plays the ground-truth trajectories.

Imports only ``multi_turn_checker`` (and what it imports: the stateful
classes and a constants module) from the installed ``bfcl-eval``. The one
step of ``eval_runner._evaluate_single_multi_turn_entry`` that matters here
(fewer turns than the ground truth: ``multi_turn:force_terminated``) is
repeated, as eval_runner imports every model handler. The checker keeps its
instances in a module global keyed by model name and case id, so each call
of ``official`` gets a model name of its own.
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23 (make test does)")

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from tether.eval.functions import tool_name
from tether.eval.multi_turn import MultiTurnCase, bfcl_class, parse_call
from tether.testing.fake_server import ReplySpec, raw, text, tool_calls

Trajectory = list[list[list[tuple[str, dict[str, Any]]]]]  # per turn, per step, the calls
_names = itertools.count()


def _source(name: str, arguments: dict[str, Any]) -> str:
    """BFCL's ``convert_to_function_call`` for one call of a function-calling model."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def official(case: MultiTurnCase, executed: Trajectory) -> tuple[bool, str]:
    """(valid, error_type) as BFCL's evaluation of a function-calling model decides."""
    if len(executed) != len(case.ground_truth):
        return False, "multi_turn:force_terminated"
    decoded = [[[_source(n, a) for n, a in step] for step in turn if step] for turn in executed]
    entry = {"id": case.id, "initial_config": case.initial_config, "involved_classes": list(case.involved_classes)}
    truth = [list(turn) for turn in case.ground_truth]
    result = multi_turn_checker(decoded, truth, entry, case.category, f"tether_oracle_{next(_names)}")
    return bool(result["valid"]), "" if result["valid"] else result["error_type"]


def keyword_call(case: MultiTurnCase, source: str) -> tuple[str, dict[str, Any]]:
    """A ground-truth call with its positional arguments named, as a model sends it."""
    name, args, kwargs = parse_call(source)
    for cls in reversed(case.involved_classes):  # a later class wins a shared name, as in BFCL
        method = getattr(bfcl_class(cls), name, None)
        if method is not None:
            bound = inspect.signature(method).bind(None, *args, **kwargs)
            return name, {k: v for k, v in list(bound.arguments.items())[1:]}
    return name, dict(kwargs)


def trajectory(case: MultiTurnCase) -> Trajectory:
    """The ground truth as a model's trajectory: one call per step."""
    return [[[keyword_call(case, source)] for source in turn] for turn in case.ground_truth]


# ---------------------------------------------------------------- perturbed trajectories

_WRONG = "zz_not_the_right_value"


def dropped_call(plan: Trajectory) -> Trajectory | None:
    """The last call of the last turn that has one, left out."""
    for t in range(len(plan) - 1, -1, -1):
        if plan[t]:
            return [*plan[:t], plan[t][:-1], *plan[t + 1 :]]
    return None


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return _WRONG
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, list):
        return [*value, _WRONG] if all(isinstance(v, str) for v in value) else value[:-1]
    return value


def wrong_argument(plan: Trajectory) -> Trajectory | None:
    """The first argument of the last call of the first turn that has one, changed."""
    for t, turn in enumerate(plan):
        for s in range(len(turn) - 1, -1, -1):
            ((name, arguments),) = turn[s]
            if arguments:
                key = next(iter(arguments))
                changed = {**arguments, key: _wrong(arguments[key])}
                if changed != arguments:
                    new_turn = [*turn[:s], [(name, changed)], *turn[s + 1 :]]
                    return [*plan[:t], new_turn, *plan[t + 1 :]]
    return None


PERTURBATIONS: dict[str, Callable[[Trajectory], Trajectory | None]] = {
    "dropped_call": dropped_call,
    "wrong_argument": wrong_argument,
}


# ---------------------------------------------------------------- the model behind a FakeServer


class TrajectoryModel:
    """A responder: finds the case by its first user message, the turn by counting user messages,
    the step by counting assistant messages since; answers with that step's calls, or in text."""

    def __init__(self, cases: Sequence[MultiTurnCase], plans: dict[str, Trajectory]) -> None:
        self.by_prompt: dict[str, list[str]] = {}
        for case in cases:
            self.by_prompt.setdefault(str(case.turns[0][0].content), []).append(case.id)
        self.plans = plans
        self.requests = 0
        self.turns: dict[str, int] = {}  # case id -> how many of its turns the model was asked about
        self.last: dict[str, list[dict[str, Any]]] = {}  # case id -> the messages of its last request

    def ambiguous(self) -> set[str]:
        return {i for ids in self.by_prompt.values() if len(ids) > 1 for i in ids}

    def __call__(self, request: dict[str, Any]) -> ReplySpec:
        self.requests += 1
        messages = request["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        ids = self.by_prompt.get(messages[users[0]]["content"])
        if not ids:
            return raw({"error": {"message": "unknown case"}}, status=400)
        turn = len(users) - 1
        self.turns[ids[0]] = max(self.turns.get(ids[0], 0), turn + 1)
        self.last[ids[0]] = messages
        step = sum(1 for m in messages[users[-1] :] if m["role"] == "assistant")
        steps = self.plans[ids[0]][turn] if turn < len(self.plans[ids[0]]) else []
        if step >= len(steps):
            return text("Done.")
        return tool_calls(
            [(f"call_{turn}_{step}_{i}", tool_name(n), json.dumps(a)) for i, (n, a) in enumerate(steps[step])]
        )
