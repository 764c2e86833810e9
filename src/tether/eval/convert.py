"""Java and JavaScript argument text to Python values, as BFCL's checker reads them.

A port of ``bfcl_eval/eval_checker/ast_eval/type_convertor`` (bfcl-eval
2026.3.23, Apache-2.0), kept rule for rule, quirks included: a value that
does not parse stays a string, which then fails the comparison. Agreement
with the official checker is tested case by case (tests/eval).
"""

from __future__ import annotations

import re
from typing import Any


class NotConvertible(Exception):
    """BFCL's converter has no rule for this type (it raises too)."""


JAVA_TYPES: dict[str, type] = {
    "byte": int,
    "short": int,
    "integer": int,
    "float": float,
    "double": float,
    "long": int,
    "boolean": bool,
    "char": str,
    "Array": list,
    "ArrayList": list,
    "Set": set,
    "HashMap": dict,
    "Hashtable": dict,
    "Queue": list,
    "Stack": list,
    "String": str,
    "any": str,
}

JS_TYPES: dict[str, type] = {
    "String": str,
    "integer": int,
    "float": float,
    "Bigint": int,
    "Boolean": bool,
    "dict": dict,
    "array": list,
    "any": str,
}


# ---------------------------------------------------------------- Java


def java_value(value: str, expected: str, nested: str | None = None) -> Any:
    if expected not in JAVA_TYPES:
        raise NotConvertible(f"unsupported type: {expected}")
    if expected in ("byte", "short", "integer"):
        return int(value) if re.match(r"^-?\d+$", value) else str(value)
    if expected == "float":
        if not re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$", value):
            return str(value)
        return float(re.sub(r"[fF]$", "", value))
    if expected == "double":
        return float(value) if re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$", value) else str(value)
    if expected == "long":
        return int(re.sub(r"[lL]$", "", value)) if re.match(r"^-?\d+[lL]$", value) else str(value)
    if expected == "boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if expected == "char":
        return value  # BFCL's pattern for a char never matches; the text stays as it is
    if expected == "ArrayList":
        return _java_arraylist(value, nested)
    if expected == "Array":
        return _java_array(value, nested)
    if expected == "HashMap":
        return _java_hashmap(value)
    if expected in ("String", "any"):
        return str(value)
    raise NotConvertible(f"{expected} conversion is not implemented")


def _java_element(text: str, nested: str | None) -> Any:
    if nested in ("char", "String"):
        return text[1:-1]
    return java_value(text, nested) if nested else _java_literal(text)


def _java_arraylist(text: str, nested: str | None) -> Any:
    match = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
    if match:
        return [_java_element(e.strip(), nested) for e in match.group(1).split(",")]
    match = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
    if match:
        return [_java_element(m.strip(), nested) for m in re.findall(r"add\((.+?)\)", match.group(1))]
    if re.search(r"new\s+ArrayList<\w*>\(\)", text):
        return []
    return text


def _java_array(text: str, nested: str | None) -> Any:
    match = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
    if not match:
        return text
    parts = [x.strip() for x in match.group(1).split(",") if x.strip()]
    return [java_value(x, nested) if nested else _java_literal(x) for x in parts]


def _java_hashmap(text: str) -> Any:
    match = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
    if match:
        entries: dict[str, Any] = {}
        if match.group(1).strip():
            for key, value in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", match.group(1)):
                entries[key] = _java_literal(value.strip())
        return entries
    if re.search(r"new\s+HashMap<.*?>\s*\(\)", text):
        return {}
    return text


def _java_literal(text: str) -> Any:
    if text == "true":
        return True
    if text == "false":
        return False
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if re.match(r"^-?\d+[lL]$", text):
        return int(text[:-1])
    if re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$", text):
        return float(re.sub(r"[fF]$", "", text))
    return _number_or_text(text)


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# ---------------------------------------------------------------- JavaScript


def js_value(value: str, expected: str, nested: str | None = None) -> Any:
    if expected not in JS_TYPES:
        raise NotConvertible(f"unsupported type: {expected}")
    if expected == "String":
        quoted = (value.startswith('"') and value.endswith('"')) or (value.startswith("'") and value.endswith("'"))
        return value[1:-1] if quoted else str(value)
    if expected == "integer":
        return int(value) if re.match(r"^-?\d+$", value) else str(value)
    if expected == "float":
        return float(value) if re.match(r"^-?\d+(\.\d+)?$", value) else str(value)
    if expected == "Bigint":
        return int(value[:-1]) if re.match(r"^-?\d+n$", value) else str(value)
    if expected == "Boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if expected == "dict":
        return _js_collection(value, "dict", nested)
    if expected == "array":
        return _js_collection(value, "array", nested)
    return str(value)  # any


def _js_collection(code: str, kind: str, nested: str | None = None) -> Any:
    code = code.strip()
    if kind == "array":
        return _js_array(code, nested)
    if code == "{}":
        return {}
    match = re.match(r"\{(.*?)\}", code)
    if not match:
        return code
    try:
        entries: dict[str, Any] = {}
        for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", match.group(1)):
            key, value = key.strip().strip("'\""), value.strip()
            if value.startswith("[") and value.endswith("]"):
                entries[key] = _js_collection(value, "array")
            elif value.startswith("{") and value.endswith("}"):
                entries[key] = _js_collection(value, "dict")
            else:
                entries[key] = _js_literal(value.strip("'\""))
        return entries
    except Exception:
        return code


def _js_array(code: str, nested: str | None) -> Any:
    pattern_2d = r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)"
    try:
        match_2d = re.match(pattern_2d, code)
        if match_2d:
            rows = []
            for index, inner in enumerate(re.findall(r"\[(.*?)\]", match_2d.group(0))):
                inner = inner.strip()
                if index == 0 and inner.startswith("["):
                    inner = inner[1:]
                rows.append([_js_literal(e.strip()) for e in inner.split(",")])
            return rows
        match = re.match(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)", code)
        if not match:
            return code
        body = match.group(1) if match.group(1) is not None else match.group(2)
        body = (body or "").strip()
        elements = body.split(",") if body else []
        if nested:
            return [
                js_value(e.strip(), nested, "String")
                if e.strip().startswith(("'", '"'))
                else js_value(e.strip(), nested)
                for e in elements
            ]
        return [_js_literal(e.strip()) for e in elements]
    except Exception:
        return code


def _js_literal(text: str) -> Any:
    text = text.strip()
    if text == "true":
        return True
    if text == "false":
        return False
    if (text.startswith('"') and text.endswith('"')) or (text.startswith("'") and text.endswith("'")):
        return text[1:-1]
    return _number_or_text(text)
