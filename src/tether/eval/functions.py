"""BFCL's function documents as tether tools, and where an installed bfcl-eval keeps its data.

Both BFCL's single-turn cases (``tether.eval.bfcl``) and its multi-turn ones
(``tether.eval.multi_turn``) offer functions as documents; this module turns
them into tools. The conversion (``tool_from_document``) follows what BFCL
itself offers an OpenAI function-calling model (``convert_to_tool`` with
``GORILLA_TO_OPENAPI`` and the language hints of
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

The tools of single-turn cases have no implementation: ``tether eval`` runs
them with ``propose_only=True``, so no call is ever executed.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.errors import ToolDefinitionError
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


# ---------------------------------------------------------------- data


def data_dir() -> Path | None:
    """``bfcl_eval/data`` of an installed bfcl-eval package, found without importing it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"
