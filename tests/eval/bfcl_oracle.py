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
from collections.abc import Sequence
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

from tether.eval import Case  # noqa: E402
from tether.eval.functions import tool_name  # noqa: E402
from tether.testing.fake_server import ReplySpec, raw, text, tool_calls  # noqa: E402

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


# ---------------------------------------------------------------- Java and JavaScript source text


def _java(value: Any, kind: str | None) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "long" and isinstance(value, int):
        return f"{value}L"
    if kind == "float" and isinstance(value, int | float):
        return f"{value}f"
    if isinstance(value, int | float):
        return repr(value)
    return str(value)


def _java_source(value: Any, kind: str, nested: str | None) -> str:
    if isinstance(value, str):
        return value
    if kind == "Array" and isinstance(value, list):
        return "new Object[]{" + ", ".join(_java(v, nested) for v in value) + "}"
    if kind == "ArrayList" and isinstance(value, list):
        quote = nested in ("String", "char")
        items = [f'"{v}"' if quote else _java(v, nested) for v in value]
        return "new ArrayList<>(Arrays.asList(" + ", ".join(items) + "))"
    if kind == "HashMap" and isinstance(value, dict):
        puts = " ".join(
            f'put("{k}", {json.dumps(v) if isinstance(v, str) else _java(v, None)});' for k, v in value.items()
        )
        return "new HashMap<String, Object>() {{ " + puts + " }}"
    return _java(value, kind)


def _js(value: Any) -> str:
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_js(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _js_source(value: Any, kind: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return _js(value)
    return _js(value)


def source_arguments(function: dict[str, Any], arguments: dict[str, Any], language: str) -> dict[str, Any]:
    """Arguments as a Java or JavaScript model writes them: each one a string of source text."""
    if language == "python":
        return arguments
    properties = function["parameters"]["properties"]
    out = {}
    for name, value in arguments.items():
        param = properties.get(name, {})
        kind, nested = param.get("type", ""), (param.get("items") or {}).get("type")
        out[name] = _java_source(value, kind, nested) if language == "java" else _js_source(value, kind)
    return out


def oracle_output(case: Any) -> list[tuple[str, str]]:
    """The correct calls of a case as (BFCL name, arguments JSON text)."""
    functions = {f["name"]: f for f in case.functions}
    return [
        (name, json.dumps(source_arguments(functions[name], arguments, case.language)))
        for name, arguments in answer_calls(list(case.ground_truth))
    ]


# ---------------------------------------------------------------- perturbed answers

_NOT_ALLOWED = "zz_not_an_allowed_value"


def _wrong_type(value: Any) -> Any:
    if isinstance(value, str):
        return 12345
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, int | float):
        return "a string"
    return "a string"  # list, dict, null


def _outside(value: Any) -> Any:
    if isinstance(value, str):
        return _NOT_ALLOWED
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return 987654321
    if isinstance(value, list):
        return [_NOT_ALLOWED]
    if isinstance(value, dict):
        return {_NOT_ALLOWED: 1}
    return _NOT_ALLOWED


def _edit_first_argument(output: list[tuple[str, str]], edit: Any) -> list[tuple[str, str]] | None:
    name, text = output[0]
    arguments = json.loads(text)
    if not arguments:
        return None
    key = next(iter(arguments))
    arguments[key] = edit(arguments[key])
    return [(name, json.dumps(arguments)), *output[1:]]


def _edit_matching(output: list[tuple[str, str]], wanted: Any, edit: Any) -> list[tuple[str, str]] | None:
    """``output`` with the first argument that ``wanted`` picks changed by ``edit``; None if none matches."""
    for at, (name, arguments_text) in enumerate(output):
        arguments = json.loads(arguments_text)
        for key, value in arguments.items():
            if wanted(value):
                arguments[key] = edit(value)
                return [*output[:at], (name, json.dumps(arguments)), *output[at + 1 :]]
    return None


def _restyle(text: str) -> str:
    """Another spelling BFCL accepts: other case, other punctuation among ``,./-_*^``."""
    return text.upper().replace(" ", "_") + "."


def perturbations(case: Any) -> dict[str, list[tuple[str, str]] | None]:
    """Outputs to score: the right answer, and ways a model gets it wrong."""
    if case.ground_truth is None:
        outputs: dict[str, list[tuple[str, str]] | None] = {"no_call": None}
        if case.functions:
            name = case.functions[0]["name"]
            outputs["call"] = [(name, "{}")]
            outputs["call_bad_json"] = [(name, "{oops")]
        return outputs
    right = oracle_output(case)
    outputs = {"oracle": right, "no_call": None, "extra_call": [*right, right[0]]}
    if len(right) > 1:
        outputs["swapped"] = list(reversed(right))
    outputs["unknown_tool"] = [("no_such_function", right[0][1]), *right[1:]]
    outputs["bad_json"] = [(right[0][0], right[0][1][:-1]), *right[1:]]
    function = next(f for f in case.functions if f["name"] == right[0][0])
    arguments = json.loads(right[0][1])
    required = [r for r in function["parameters"].get("required", ()) if r in arguments]
    if required:
        del arguments[required[0]]
        outputs["missing_required"] = [(right[0][0], json.dumps(arguments)), *right[1:]]
    for label, wanted, change in (
        ("restyled", lambda v: isinstance(v, str) and v.strip(), _restyle),
        ("int_for_float", lambda v: isinstance(v, float) and v.is_integer(), int),
        ("float_for_int", lambda v: isinstance(v, int) and not isinstance(v, bool), float),
        (
            "string_list_restyled",
            lambda v: isinstance(v, list) and v and isinstance(v[0], str),
            lambda v: [_restyle(v[0]), *v[1:]],
        ),
    ):
        edited = _edit_matching(right, wanted, change)
        if edited is not None:
            outputs[label] = edited
    for label, edit in (("wrong_type", _wrong_type), ("outside_set", _outside)):
        edited = _edit_first_argument(right, edit)
        if edited is not None:
            outputs[label] = edited
    return outputs


# ---------------------------------------------------------------- the oracle model behind a FakeServer

Output = list[tuple[str, str]] | None


def request_key(messages: Sequence[Any], tools: Sequence[str]) -> str:
    return json.dumps([[[m["role"], m["content"]] for m in messages], sorted(tools)])


def case_key(case: Case) -> str:
    messages = [{"role": m.role, "content": m.content} for m in case.messages]
    return request_key(messages, [tool_name(f["name"]) for f in case.functions])


def reply(output: Output) -> ReplySpec:
    if output is None:
        return text("I cannot help with that using these tools.")
    return tool_calls([(f"call_{i}", tool_name(name), arguments) for i, (name, arguments) in enumerate(output)])


class Oracle:
    """A responder: finds the case a request is for, and answers with the output chosen for it."""

    def __init__(self, cases: Sequence[Case], outputs: dict[str, Output]) -> None:
        self.by_key: dict[str, list[str]] = {}
        for case in cases:
            self.by_key.setdefault(case_key(case), []).append(case.id)
        self.outputs = outputs
        self.asked: list[str] = []

    def ambiguous(self) -> set[str]:
        """Cases whose request is identical to another case's (the model cannot tell them apart)."""
        return {i for ids in self.by_key.values() if len(ids) > 1 for i in ids}

    def __call__(self, request: dict[str, Any]) -> ReplySpec:
        names = [t["function"]["name"] for t in request.get("tools") or ()]
        ids = self.by_key.get(request_key(request["messages"], names))
        if not ids:
            return raw({"error": {"message": "unknown case"}}, status=400)
        self.asked.append(ids[0])
        return reply(self.outputs[ids[0]])
