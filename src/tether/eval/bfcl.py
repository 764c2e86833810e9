"""Berkeley Function Calling Leaderboard data: cases, and function documents as tether tools.

A BFCL dataset is a JSON-lines file ``BFCL_v4_<category>.json`` of
``{"id", "question": [[messages]], "function": [documents]}``; the ground
truth is ``possible_answer/BFCL_v4_<category>.json`` beside it, one
``{"id", "ground_truth": [{name: {param: [acceptable values]}}]}`` per case.
``irrelevance``-style categories have no ground truth: the right behaviour
is to call no tool.

The conversion of a function document to a tool (``tool_from_document``)
follows what BFCL itself offers an OpenAI function-calling model
(``convert_to_tool`` with ``GORILLA_TO_OPENAPI`` and the language hints of
``_func_doc_language_specific_pre_processing``), so scores stay comparable
with the leaderboard:

- BFCL's type words become JSON Schema types: ``dict``→``object``,
  ``float``/``double``→``number``, ``tuple``/``list``→``array``, ``any`` and
  unknown words→``string``, ``byte``/``short``/``long``/``Bigint``→``integer``.
- A parameter whose default is ``None`` also accepts ``null``.
- A ``dict`` with ``properties`` is a closed object (no other keys); one
  without is a free-form object (``additionalProperties: true``).
- Java and JavaScript parameters are strings holding source text
  (``"new int[]{1, 2}"``), as BFCL asks; the description says which type.
- ``.`` in a name becomes ``-`` (OpenAI's name pattern has no dot, and no
  BFCL name holds a ``-``), so ``bfcl_name(tool_name(n)) == n``.

The tools have no implementation: ``tether eval`` runs agents with
``propose_only=True``, so no call is ever executed.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.errors import DatasetError, ToolDefinitionError
from tether.core.messages import Message
from tether.eval.checker import Output, Verdict, check
from tether.tools.tool import NAME_PATTERN, Tool, tool_from_schema

# What BFCL offers an OpenAI model for each of its type words (bfcl_eval/constants/type_mappings.py).
GORILLA_TO_JSON_SCHEMA = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}

# Schema keywords kept from a BFCL parameter; others (``optional``) are not JSON Schema.
_KEPT = ("enum", "default", "format", "minimum", "maximum", "minItems", "maxItems")

# BFCL's multi-turn categories (tether.eval.multi_turn runs and scores them).
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
SINGLE_TURN = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
    "live_relevance",
)
_FILE_NAME = re.compile(r"^BFCL_v\d+_(?P<category>\w+)\.jsonl?$")


@dataclass(frozen=True, slots=True)
class Case:
    """One BFCL test case: the conversation, the offered functions and the ground truth."""

    id: str
    category: str
    messages: tuple[Message, ...]
    functions: tuple[dict[str, Any], ...]
    ground_truth: tuple[dict[str, Any], ...] | None  # None for (ir)relevance categories

    @property
    def language(self) -> str:
        return language_of(self.category)

    @property
    def expected(self) -> Any:
        """BFCL's possible answer (``[]`` when no call is expected)."""
        return list(self.ground_truth) if self.ground_truth is not None else []

    def tools(self) -> list[Tool]:
        return [tool_from_document(doc, self.language) for doc in self.functions]

    def check(self, output: Output) -> Verdict:
        """BFCL's AST checker's verdict on the model's calls."""
        return check(self.category, self.functions, self.ground_truth, output)

    def call_name(self, tool_name: str) -> str:
        return bfcl_name(tool_name)


def language_of(category: str) -> str:
    """``python``, ``java`` or ``javascript``, as BFCL's ``is_java``/``is_js`` decide."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return "python"


# ---------------------------------------------------------------- names


def tool_name(name: str) -> str:
    """The tool name for a BFCL function name: ``math.factorial`` → ``math-factorial``."""
    if "-" in name:
        raise ToolDefinitionError(f"BFCL function {name!r}: a name with '-' cannot be converted reversibly")
    mangled = name.replace(".", "-")
    if not NAME_PATTERN.match(mangled):
        raise ToolDefinitionError(f"BFCL function {name!r}: not a valid tool name even with '.' replaced")
    return mangled


def bfcl_name(name: str) -> str:
    """The BFCL function name of a tool name (the inverse of ``tool_name``)."""
    return name.replace("-", ".")


# ---------------------------------------------------------------- schemas

_LANGUAGE_HINT = {
    "python": " Note that the provided function is in Python 3 syntax.",
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
}
_LANGUAGE_TITLE = {"java": "Java", "javascript": "JavaScript"}


def _schema(param: Mapping[str, Any]) -> dict[str, Any]:
    """One BFCL parameter (Python flavour) as JSON Schema."""
    word = param.get("type")
    kind = GORILLA_TO_JSON_SCHEMA.get(word, "string") if isinstance(word, str) else "string"
    out: dict[str, Any] = {"type": kind}
    description = param.get("description")
    if isinstance(description, str):
        out["description"] = description + (" This is a float type value." if word == "float" else "")
    for key in _KEPT:
        if key in param:
            out[key] = param[key]
    if word == "float":
        out["format"] = "float"
    if "default" in param and param["default"] is None:
        out["type"] = [kind, "null"]  # a parameter defaulting to None may be given as null
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if kind == "array" and isinstance(param.get("items"), Mapping):
        out["items"] = _schema(param["items"])
    if kind == "object":
        properties = param.get("properties")
        if isinstance(properties, Mapping) and properties:
            out["properties"] = {name: _schema(sub) for name, sub in properties.items() if isinstance(sub, Mapping)}
            required = [r for r in param.get("required", ()) if r in out["properties"]]
            if required:
                out["required"] = required
            out["additionalProperties"] = False
        else:
            out["additionalProperties"] = True  # a free-form dict: any keys
    return out


def _source_text(param: Mapping[str, Any], language: str) -> dict[str, Any]:
    """A Java or JavaScript parameter: a string of source text, its type told in the description."""
    word = str(param.get("type", ""))
    title = _LANGUAGE_TITLE[language]
    text = str(param.get("description", ""))
    if word == "any":
        text += f" This parameter can be of any type of {title} object in string representation."
    else:
        text += f" This is {title} {word} type parameter in string representation."
    items = param.get("items")
    listed = ("ArrayList", "Array") if language == "java" else ("array",)
    if word in listed and isinstance(items, Mapping):
        text += f" The list elements are of type {items.get('type')}; they are not in string representation."
    if language == "javascript" and word == "dict" and "properties" in param:
        text += (
            " The dictionary entries have the following schema; they are not in string representation. "
            + json.dumps(param["properties"])
        )
    return {"type": "string", "description": text}


def parameters_schema(document: Mapping[str, Any], language: str = "python") -> dict[str, Any]:
    """The JSON Schema of a BFCL function document's parameters."""
    params = document.get("parameters")
    if not isinstance(params, Mapping):
        raise ToolDefinitionError(f"BFCL function {document.get('name')!r}: parameters must be an object")
    properties = params.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise ToolDefinitionError(f"BFCL function {document.get('name')!r}: properties must be an object")
    convert = _schema if language == "python" else lambda p: _source_text(p, language)
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: convert(p) for name, p in properties.items() if isinstance(p, Mapping)},
    }
    required = [r for r in params.get("required", ()) if r in out["properties"]]
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out


def _not_executable(**_: Any) -> Any:
    raise RuntimeError("BFCL tools have no implementation; run them with propose_only=True")


def tool_from_document(document: Mapping[str, Any], language: str = "python") -> Tool:
    """A tether tool for a BFCL function document (see the module docstring for the rules).

    Tools are immutable, so one made for a document serves every case that
    offers the same document (BFCL's live categories repeat them often):
    compiling a schema is most of what a case costs the host.
    """
    return _cached_tool(json.dumps(document, sort_keys=True), language)


@functools.lru_cache(maxsize=4096)
def _cached_tool(document_json: str, language: str) -> Tool:
    document = json.loads(document_json)
    name = document.get("name")
    if not isinstance(name, str):
        raise ToolDefinitionError("a BFCL function document needs a string name")
    description = str(document.get("description", "")) + _LANGUAGE_HINT[language]
    return tool_from_schema(tool_name(name), parameters_schema(document, language), _not_executable, description)


# ---------------------------------------------------------------- datasets


def _data_dir() -> Path | None:
    """``bfcl_eval/data`` of an installed bfcl-eval package, found without importing it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def resolve(dataset: str) -> Path:
    """A dataset argument: a file path, or a category name looked up in an installed bfcl-eval."""
    path = Path(dataset)
    if path.is_file():
        return path
    data = _data_dir()
    if data is not None and dataset in (*SINGLE_TURN, *MULTI_TURN):
        found = data / f"BFCL_v4_{dataset}.json"
        if found.is_file():
            return found
    hint = "" if data is not None else " (category names need `pip install --no-deps bfcl-eval`)"
    raise DatasetError(f"no dataset {dataset!r}: give a BFCL_v4_<category>.json file or a category name{hint}")


def category_of(path: Path) -> str:
    match = _FILE_NAME.match(path.name)
    if match is None:
        raise DatasetError(f"{path}: expected a file named BFCL_v4_<category>.json")
    category = match["category"]
    if category not in SINGLE_TURN and category not in MULTI_TURN:
        supported = ", ".join((*SINGLE_TURN, *MULTI_TURN))
        raise DatasetError(f"{path}: category {category!r} is not supported yet (supported: {supported})")
    return category


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None
                if not isinstance(value, dict) or not isinstance(value.get("id"), str):
                    raise DatasetError(f"{path}:{number}: expected an object with a string id")
                yield number, value
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None


def needs_ground_truth(category: str) -> bool:
    return "relevance" not in category


def load(dataset: str | Path) -> list[Any]:
    """The cases of one BFCL dataset file (and its ground truth): ``Case``s, or ``MultiTurnCase``s."""
    path = resolve(str(dataset))
    category = category_of(path)
    if category in MULTI_TURN:
        return _load_multi_turn(path, category)
    truth: dict[str, Any] = {}
    if needs_ground_truth(category):
        answers = path.parent / "possible_answer" / path.name
        if not answers.is_file():
            raise DatasetError(f"{path}: the ground truth {answers} is missing")
        truth = {entry["id"]: entry.get("ground_truth") for _, entry in _lines(answers)}
    cases = []
    for number, entry in _lines(path):
        question, functions = entry.get("question"), entry.get("function")
        if not (isinstance(question, list) and question and isinstance(question[0], list)):
            raise DatasetError(f"{path}:{number}: question must be a list of turns")
        if len(question) != 1:
            raise DatasetError(f"{path}:{number}: multi-turn cases are not supported yet")
        if not isinstance(functions, list):
            raise DatasetError(f"{path}:{number}: function must be a list of documents")
        messages = tuple(Message(m["role"], m.get("content")) for m in question[0])
        ground_truth = None
        if needs_ground_truth(category):
            found = truth.get(entry["id"])
            if not isinstance(found, list):
                raise DatasetError(f"{path}:{number}: no ground truth for case {entry['id']}")
            ground_truth = tuple(found)
        cases.append(Case(entry["id"], category, messages, tuple(functions), ground_truth))
    if not cases:
        raise DatasetError(f"{path}: no cases in it")
    return cases


def _load_multi_turn(path: Path, category: str) -> list[Any]:
    from tether.eval.multi_turn import _func_doc_dir, make_case

    answers = path.parent / "possible_answer" / path.name
    if not answers.is_file():
        raise DatasetError(f"{path}: the ground truth {answers} is missing")
    truth = {entry["id"]: entry.get("ground_truth") for _, entry in _lines(answers)}
    data = _func_doc_dir(path)
    cases = []
    for number, entry in _lines(path):
        found = truth.get(entry["id"])
        if not isinstance(found, list):
            raise DatasetError(f"{path}:{number}: no ground truth for case {entry['id']}")
        cases.append(make_case(entry, found, category, data, f"{path}:{number}"))
    if not cases:
        raise DatasetError(f"{path}: no cases in it")
    return cases
