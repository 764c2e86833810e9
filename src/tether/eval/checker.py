"""BFCL's AST checker for single-turn categories, as tether's own scorer.

A port of ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` and the
decoding steps of ``eval_runner.py`` for a function-calling model (bfcl-eval
2026.3.23, Apache-2.0). The rules are BFCL's, quirks included, because the
point is that a score here means what it means on the leaderboard: strings
compare without case, spaces and ``,./-_*^``; an integer passes for a
``float``; a parameter is optional only if ``""`` is among its acceptable
values; parallel categories accept the calls in any order. tests/eval checks
every verdict against the official checker. Where that checker raises on
what a model sent (a list of objects that may be left out, given an item
that is no object), the verdict is ``type_error:nested``.

``check(case, output)`` takes what the model said: its calls as
``(bfcl_name, arguments_text)`` pairs, or None when it answered with text.
It reads the case's function documents and ground truth as BFCL writes
them; ``documents_problem`` and ``ground_truth_problem`` say what in other
ones it could not read, so that the loader refuses such a case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.eval.convert import JAVA_TYPES, JS_TYPES, NotConvertible, java_value, js_value

PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_NESTED_PYTHON = ("array", "tuple")
_NESTED_CONVERTED = ("Array", "ArrayList", "array")


@dataclass(frozen=True, slots=True)
class Verdict:
    """A checker's verdict on a case's calls: whether they are right, and BFCL's error type if not."""

    valid: bool
    error_type: str = ""  # BFCL's own error type, e.g. "simple_function_checker:missing_required"
    errors: list[Any] = field(default_factory=list)


_VALID = Verdict(True)


def _fail(error_type: str, message: Any) -> Verdict:
    return Verdict(False, error_type, [message])


# ---------------------------------------------------------------- decoding


Output = Sequence[tuple[str, str | None]] | None  # arguments None: not a string at all


def decode(output: Output) -> list[dict[str, Any]] | None:
    """BFCL's decoding of a function-calling reply; None when it does not decode."""
    if output is None:
        return None  # a text answer: BFCL's decoder fails on it
    decoded = []
    for name, arguments in output:
        if arguments is None:
            return None  # json.loads would refuse it too
        try:
            decoded.append({name: json.loads(arguments)})
        except (TypeError, ValueError, RecursionError):
            return None
    return decoded


def _is_call_format(decoded: list[dict[str, Any]]) -> bool:
    return all(len(item) == 1 and type(next(iter(item.values()))) is dict for item in decoded)


def check(category: str, functions: Sequence[Mapping[str, Any]], ground_truth: Any, output: Output) -> Verdict:
    """Score one case's output as BFCL does."""
    decoded = decode(output)
    if "relevance" in category:
        called = decoded is not None and _is_call_format(decoded) and bool(decoded) and decoded != [{}]
        if "irrelevance" in category:
            return _fail("irrelevance_error:decoder_success", "a call was made") if called else _VALID
        return _VALID if called else _fail("relevance_error:decoder_failed", "no call was made")
    if decoded is None:
        return _fail("ast_decoder:decoder_failed", "the output does not decode as function calls")
    if not _is_call_format(decoded):
        return _fail("ast_decoder:decoder_wrong_output_format", "the output is not in function-call format")
    language = _language(category)
    try:
        return _ast_check(list(functions), decoded, list(ground_truth), language, category)
    except NotConvertible as exc:
        return _fail("type_error:unconvertible", str(exc))


def _language(category: str) -> str:
    return "javascript" if "javascript" in category else "java" if "java" in category else "python"


def _ast_check(
    functions: list[Any], output: list[dict[str, Any]], answers: list[Any], language: str, category: str
) -> Verdict:
    if "parallel" in category:
        return _parallel_no_order(functions, output, answers, language)
    if "multiple" in category:
        if len(output) != len(answers):
            return _fail("multiple_function_checker:wrong_count", "Wrong number of functions.")
        expected = next(iter(answers[0]))
        return _simple(_find(functions, expected), output[0], answers[0], language)
    if len(output) != 1:
        return _fail("simple_function_checker:wrong_count", "Wrong number of functions.")
    return _simple(functions[0], output[0], answers[0], language)


def _find(functions: list[Any], name: str) -> Any:
    return next((f for f in functions if f["name"] == name), None)


def _parallel_no_order(
    functions: list[Any], output: list[dict[str, Any]], answers: list[Any], language: str
) -> Verdict:
    if len(output) != len(answers):
        return _fail("parallel_function_checker_no_order:wrong_count", "Wrong number of functions.")
    matched: list[int] = []
    for index, answer in enumerate(answers):
        function = _find(functions, next(iter(answer)))
        result = _VALID
        errors: list[Any] = []
        for at, call in enumerate(output):
            if at in matched:
                continue
            result = _simple(function, call, answer, language)
            if result.valid:
                matched.append(at)
                break
            errors.append(
                {f"Model Result Index {at}": {"sub_error": result.errors, "sub_error_type": result.error_type}}
            )
        if not result.valid:
            message = f"Could not find a matching function for index {index} of possible answers."
            return Verdict(False, "parallel_function_checker_no_order:cannot_find_match", [message, *errors])
    return _VALID


# ---------------------------------------------------------------- one call


def _simple(function: Mapping[str, Any], call: dict[str, Any], answer: Mapping[str, Any], language: str) -> Verdict:
    possible = next(iter(answer.values()))
    name = function["name"]
    details = function["parameters"]["properties"]
    if name not in call:
        return _fail("simple_function_checker:wrong_func_name", f"Function name {name!r} not found in model output.")
    params = call[name]
    for required in function["parameters"]["required"]:
        if required not in params:
            return _fail("simple_function_checker:missing_required", f"Missing required parameter: {required!r}.")
    for param, raw in params.items():
        if param not in details or param not in possible:
            return _fail("simple_function_checker:unexpected_param", f"Unexpected parameter: {param!r}.")
        verdict = _check_param(param, raw, details[param], possible[param], language)
        if not verdict.valid:
            return verdict
    for param, values in possible.items():
        if param not in params and "" not in values:
            return _fail(
                "simple_function_checker:missing_optional",
                f"Optional parameter {param!r} not provided and not marked as optional.",
            )
    return _VALID


def _check_param(param: str, value: Any, detail: Mapping[str, Any], possible: list[Any], language: str) -> Verdict:
    described = detail["type"]
    nested: type | None = None
    if language in ("java", "javascript"):
        table, convert = (JAVA_TYPES, java_value) if language == "java" else (JS_TYPES, js_value)
        if described not in table:
            raise NotConvertible(f"unsupported type: {described}")
        expected = table[described]
        if type(value) is not str:
            kind = "type_error:java" if language == "java" else "type_error:js"
            message = f"Incorrect type for parameter {param!r}. Expected type String, got {type(value).__name__}."
            return _fail(kind, message)
        if described in _NESTED_CONVERTED:
            inner = detail["items"]["type"]
            nested = table[inner]
            value = convert(value, described, inner)
        else:
            value = convert(value, described)
    else:
        expected = PYTHON_TYPES[described]
        if described in _NESTED_PYTHON:
            nested = PYTHON_TYPES[detail["items"]["type"]]
    if described == "tuple" and type(value) is tuple:
        value = list(value)
    if language == "python" and described == "float" and type(value) is int:
        value = float(value)

    typed = _type_check(param, value, possible, described, expected, nested)
    if not typed.valid:
        return Verdict(False, typed.error_type, typed.errors)
    if not typed.is_variable:
        if expected is dict:
            return _dict_check(param, value, possible)
        if expected is list and nested is dict:
            return _list_dict_check(param, value, possible)
        if expected is str:
            return _string_check(param, value, possible)
        if expected is list:
            return _list_check(param, value, possible)
    if value not in possible:
        return _fail("value_error:others", f"Invalid value for parameter {param!r}: {value!r}.")
    return _VALID


@dataclass(frozen=True, slots=True)
class _Typed:
    valid: bool
    is_variable: bool = False
    error_type: str = ""
    errors: list[Any] = field(default_factory=list)


def _answer_type(possible: list[Any]) -> type | None:
    return next((type(a) for a in possible if a != ""), None)


def _type_check(
    param: str, value: Any, possible: list[Any], described: str, expected: type, nested: type | None
) -> _Typed:
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    if type(value) is expected:
        if nested is None:
            return _Typed(True, is_variable)
        items: Any = value
        for option in possible:
            ok = True
            if type(option) is list:
                for item in items:
                    inner = _type_check(param, item, option, nested.__name__, nested, None)
                    if not inner.valid:
                        ok = False
                        break
            if ok:
                return _Typed(True, is_variable)
        # BFCL goes on to the variable check, but its result is already marked invalid by then
        message = f"Nested type checking failed for parameter {param!r}."
        if answer_type is not None and type(value) is answer_type:
            return _Typed(False, True, "type_error:nested", [message])
        return _Typed(False, False, "type_error:simple", [message])
    if answer_type is not None and type(value) is answer_type:
        return _Typed(True, True)
    message = f"Incorrect type for parameter {param!r}. Expected type {described}, got {type(value).__name__}."
    return _Typed(False, False, "type_error:simple", [message])


def standardize(text: str) -> str:
    """BFCL's string normal form: no spaces or ``,./-_*^``, lower case, ``'`` as ``"``."""
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _string_check(param: str, value: str, possible: list[Any]) -> Verdict:
    if standardize(value) not in [standardize(p) for p in possible if type(p) is str]:
        return _fail("value_error:string", f"Invalid value for parameter {param!r}: {value!r}.")
    return _VALID


def _std(item: Any) -> Any:
    return standardize(item) if type(item) is str else item


def _list_check(param: str, value: list[Any], possible: list[Any]) -> Verdict:
    options = [[_std(x) for x in option] for option in possible]
    if [_std(x) for x in value] not in options:
        return _fail("value_error:list/tuple", f"Invalid value for parameter {param!r}: {value!r}.")
    return _VALID


def _dict_check(param: str, value: dict[str, Any], possible: list[Any]) -> Verdict:
    result = _fail("dict_checker:unclear", "")
    for option in possible:
        if option == "":
            continue
        result = Verdict(False, "dict_checker:unclear", [])
        ok = True
        for key, item in value.items():
            if key not in option:
                result, ok = _fail("value_error:dict_key", f"Unexpected dict key parameter: {key!r}."), False
                break
            if _std(item) not in [_std(x) for x in option[key]]:
                result, ok = _fail("value_error:dict_value", f"Invalid value for parameter {key!r}: {item!r}."), False
                break
        for key, allowed in option.items():
            if key not in value and "" not in allowed:
                result, ok = _fail("value_error:dict_key", f"Missing dict key parameter: {key!r}."), False
                break
        if ok:
            return _VALID
    return result


def _list_dict_check(param: str, value: list[Any], possible: list[Any]) -> Verdict:
    result = Verdict(False, "list_dict_checker:unclear")
    for option in possible:
        if len(value) != len(option):
            result = _fail("value_error:list_dict_count", "Wrong number of dictionaries in the list.")
            continue
        ok = True
        for at, item in enumerate(value):
            if type(item) is not dict:  # BFCL's checker raises here: its nested type check let "" pass any item
                result = _fail("type_error:nested", f"Nested type checking failed for parameter {param!r}.")
            else:
                result = _dict_check(param, item, [option[at]])
            if not result.valid:
                ok = False
                break
        if ok:
            return _VALID
    return result


# ---------------------------------------------------------------- what the checker reads


def _types(language: str) -> dict[str, type]:
    return PYTHON_TYPES if language == "python" else JAVA_TYPES if language == "java" else JS_TYPES


def documents_problem(functions: Sequence[Any], category: str) -> str | None:
    """What in a case's function documents the checker cannot read; None when it reads them all.

    Each is an object with a string name and parameters: an object of
    properties, each an object with a string type, and the list of the
    required ones' names. A Python parameter's type (and an array's or a
    tuple's items' type) is one of ``PYTHON_TYPES``; a Java or JavaScript
    list's items have a type of the language's table (a parameter of a type
    outside it gets BFCL's verdict ``type_error:unconvertible``).
    """
    language = _language(category)
    table = _types(language)
    nested = _NESTED_PYTHON if language == "python" else _NESTED_CONVERTED
    for at, function in enumerate(functions):
        name = function.get("name")
        if not isinstance(name, str):
            return f"functions[{at}] needs a string name"
        parameters = function.get("parameters")
        if not isinstance(parameters, dict):
            return f"{name}: parameters must be an object"
        properties, required = parameters.get("properties"), parameters.get("required")
        if not isinstance(properties, dict):
            return f"{name}: parameters.properties must be an object"
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return f"{name}: parameters.required must be a list of names"
        for param, detail in properties.items():
            if not isinstance(detail, dict) or not isinstance(detail.get("type"), str):
                return f"{name}.{param} must be an object with a type"
            described = detail["type"]
            if language == "python" and described not in table:
                return f"{name}.{param}: type {described!r} is not one of {', '.join(table)}"
            if described in nested and described in table:
                items = detail.get("items")
                if not isinstance(items, dict):
                    return f"{name}.{param}: items must be an object with a type"
                if items.get("type") not in table:
                    return f"{name}.{param}: items: type {items.get('type')!r} is not one of {', '.join(table)}"
    return None


def ground_truth_problem(functions: Sequence[Mapping[str, Any]], ground_truth: Any, category: str) -> str | None:
    """What in a case's ground truth the checker cannot read (its documents read, ``documents_problem``); or None.

    It is a non-empty list of calls, each ``{function: {parameter: [acceptable
    values]}}`` of a function the case offers. An object parameter's
    acceptable values are ``""`` or objects of lists (or strings), a list
    parameter's ``""`` or lists (of such objects, for a list of objects),
    unless the first of them is of another type: BFCL then compares the
    value as it is.
    """
    if not isinstance(ground_truth, list) or not ground_truth:
        return "ground_truth must be a non-empty list of calls, each {function: {parameter: [acceptable values]}}"
    offered = {f["name"]: f for f in reversed(functions)}  # the first of a name, as _find takes it
    simple, language = "parallel" not in category and "multiple" not in category, _language(category)
    for at, call in enumerate(ground_truth):
        where = f"ground_truth[{at}]"
        if not isinstance(call, dict) or len(call) != 1:
            return f"{where} must be an object of one function's name: {{function: {{parameter: [acceptable values]}}}}"
        ((name, possible),) = call.items()
        if name not in offered:
            return f"{where}: the case offers no {name!r}"
        if not isinstance(possible, dict):
            return f"{where}.{name} must be an object of parameters, each with its acceptable values"
        function = functions[0] if simple else offered[name]  # what the checker holds the call to
        properties = function["parameters"]["properties"]
        for param, values in possible.items():
            if not isinstance(values, list):
                return f"{where}.{name}.{param}: the acceptable values must be a list"
            wrong = _values_problem(values, properties[param], language) if param in properties else None
            if wrong is not None:
                return f"{where}.{name}.{param}{wrong}"
    return None


_OBJECT_VALUES = ': an object\'s acceptable values must be "" or objects of lists (or strings)'
_LIST_VALUES = ': a list\'s acceptable values must be "" or lists'


def _object_of_lists(value: Any) -> bool:
    """``""``, or an object each of whose keys has a list (or a string, as in BFCL's simple_java_64) to look in."""
    return value == "" or (isinstance(value, dict) and all(isinstance(v, list | str) for v in value.values()))


def _values_problem(values: list[Any], detail: Mapping[str, Any], language: str) -> str | None:
    """What in one parameter's acceptable values ``_check_param`` cannot compare a value of its type with."""
    table, described = _types(language), detail["type"]
    if described not in table:
        return None  # BFCL's unconvertible verdict, before any value is compared
    expected = table[described]
    nested = _NESTED_PYTHON if language == "python" else _NESTED_CONVERTED
    inner = table[detail["items"]["type"]] if described in nested else None
    answer_type = _answer_type(values)
    if answer_type is not None and answer_type != expected:
        return None  # compared as they are (_type_check's variable)
    for at, option in enumerate(values):
        if expected is dict and not _object_of_lists(option):
            return f"[{at}]{_OBJECT_VALUES}"
        if expected is list and option != "" and not isinstance(option, list):
            return f"[{at}]{_LIST_VALUES}"
        if expected is list and inner is dict and option != "":
            wrong = next((i for i, item in enumerate(option) if not _object_of_lists(item)), None)
            if wrong is not None:
                return f"[{at}][{wrong}]{_OBJECT_VALUES}"
    return None
