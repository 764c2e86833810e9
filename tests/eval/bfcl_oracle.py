"""BFCL's own checker as a test oracle, and model outputs built from the ground truth.

Imports only the checker modules of the installed ``bfcl-eval`` (installed
with ``--no-deps``; ``make test`` does it). ``bfcl_eval.constants.model_config``
is replaced by a stand-in before the import: the real one imports every model
handler (openai, anthropic, torch, ...) only to tell the checker whether a
model's names had ``.`` turned into ``_``. Ours are given back their dots
(``bfcl_name``), so the stand-in says no. The decoding steps of
``eval_runner._evaluate_single_ast_entry`` / ``_evaluate_single_relevance_entry``
are repeated here for the same reason (eval_runner imports the handlers); they
are a few lines, copied as they are.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

bfcl_eval = pytest.importorskip("bfcl_eval", reason="pip install --no-deps bfcl-eval==2026.3.23 (make test does)")


@dataclass(frozen=True)
class _Config:
    underscore_to_dot: bool = False


ORACLE_MODEL = "tether_oracle"  # the checker looks it up as "tether/oracle"
_stub = types.ModuleType("bfcl_eval.constants.model_config")
_stub.MODEL_CONFIG_MAPPING = {"tether/oracle": _Config()}  # type: ignore[attr-defined]
sys.modules.setdefault("bfcl_eval.constants.model_config", _stub)

from bfcl_eval.constants.enums import Language  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402
from bfcl_eval.utils import is_empty_output, is_function_calling_format_output, is_java, is_js  # noqa: E402

DATA = Path(next(iter(bfcl_eval.__path__))) / "data"


def _decode(output: list[tuple[str, str]] | str | None) -> list[dict[str, Any]]:
    """OpenAICompletionsHandler.decode_ast for a function-calling model (raises when it cannot)."""
    result: Any = output if output is not None else None
    if isinstance(output, list):
        result = [{name: arguments} for name, arguments in output]
    decoded = []
    for invoked in result:  # a text answer or None raises here, as in BFCL
        name = next(iter(invoked.keys()))
        decoded.append({name: json.loads(invoked[name])})
    return decoded


def official(
    category: str, functions: list[Any], ground_truth: Any, output: list[tuple[str, str]] | None
) -> tuple[bool, str]:
    """(valid, error_type) as BFCL's evaluation of a function-calling model decides."""
    functions = copy.deepcopy(functions)
    if "relevance" in category:
        try:
            decoded = _decode(output)
            contains_call = not is_empty_output(decoded)
        except Exception:
            contains_call = False
        success = not contains_call if "irrelevance" in category else contains_call
        if success:
            return True, ""
        return (
            False,
            "irrelevance_error:decoder_success" if "irrelevance" in category else "relevance_error:decoder_failed",
        )
    try:
        decoded = _decode(output)
    except Exception:
        return False, "ast_decoder:decoder_failed"
    if not is_function_calling_format_output(decoded):
        return False, "ast_decoder:decoder_wrong_output_format"
    language = Language.JAVA if is_java(category) else Language.JAVASCRIPT if is_js(category) else Language.PYTHON
    result = ast_checker(functions, decoded, copy.deepcopy(ground_truth), language, category, ORACLE_MODEL)
    return bool(result["valid"]), "" if result["valid"] else result["error_type"]


# ---------------------------------------------------------------- answers from the ground truth


def _first(options: Any) -> tuple[bool, Any]:
    """The first acceptable value; (False, None) when only leaving it out is acceptable."""
    for option in options:
        if option != "":
            return True, option
    return False, None


def _realize(value: Any) -> Any:
    """A ground-truth value as a model would write it: nested dicts hold lists of options."""
    if isinstance(value, dict):
        return {k: v for k, (ok, v) in ((k, _first(opts)) for k, opts in value.items()) if ok}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_realize(v) for v in value]
    return value


def answer_calls(ground_truth: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One correct set of calls: the first acceptable value of every parameter."""
    calls = []
    for entry in ground_truth:
        ((name, params),) = entry.items()
        arguments = {}
        for param, options in params.items():
            ok, value = _first(options)
            if ok:
                arguments[param] = _realize(value)
        calls.append((name, arguments))
    return calls


def categories() -> list[str]:
    from tether.eval.bfcl import SINGLE_TURN

    return list(SINGLE_TURN)
