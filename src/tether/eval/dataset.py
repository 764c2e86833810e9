"""tether's own eval format: JSON lines, one case a line, scored without BFCL.

A case says what the model is given and which calls it should propose in
its next reply::

    {"id": "lookup-1",                          required, unique in the file
     "category": "lookup",                      optional; the file's name (without .jsonl) when left out
     "system": "You are ...",                   optional system message
     "prompt": "What is TICKET-318204 about?",  a prompt ...
     "messages": [{"role": "user", "content": "..."}, ...],    ... or a conversation (OpenAI's shape:
                                                assistant tool_calls, tool results) — one of the two
     "toolsets": ["tickets"],                   registered toolsets by name (calc, clock, files, tickets) ...
     "tools": [{"name": "...", "description": "...", "parameters": {JSON Schema}}],  ... and/or tool schemas
     "expected": [{"tool": "get_ticket",
                   "arguments": {"ticket_id": ["TICKET-318204"]},
                   "optional": {"top_k": [3, 5]}}],
     "ordered": false}                          optional: the calls must come in the order given

``"expected": []`` means *no call expected*: the model should answer in
text (no tool fits, or the conversation holds an instruction it must not
follow). A case with neither ``toolsets`` nor ``tools`` gets the toolsets
given to ``load_cases`` (``tether eval --toolset``). A dataset is data: a
toolset it names by module or file (which would run that code) is refused
unless ``allow_toolset_files`` (``tether eval --allow-toolset-files``).

An argument's rule is a list of acceptable values, or ``{"regex": R}`` (a
string that ``re.search`` finds R in, ignoring case). Values compare as JSON
does, except that strings ignore case and surrounding spaces and ``1`` equals
``1.0`` (never ``true``). Arguments under ``arguments`` are required; those
under ``optional`` may be left out; any other argument is wrong. The
proposed calls must be exactly the expected ones — no more, no fewer — in
any order unless ``ordered``.

Verdicts (``Verdict.error_type``): ``no_call``, ``unexpected_call``,
``wrong_count``, ``wrong_tool``, ``bad_arguments`` (not a JSON object),
``missing_argument``, ``unexpected_argument``, ``wrong_value``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core import nesting
from tether.core.errors import DatasetError, ToolDefinitionError
from tether.core.messages import Message
from tether.eval.checker import Output, Verdict
from tether.tools import Tool
from tether.tools.tool import tool_from_schema

NO_CALL, UNEXPECTED_CALL, WRONG_COUNT, WRONG_TOOL = "no_call", "unexpected_call", "wrong_count", "wrong_tool"
BAD_ARGUMENTS, MISSING, UNEXPECTED_ARGUMENT, WRONG_VALUE = (
    "bad_arguments",
    "missing_argument",
    "unexpected_argument",
    "wrong_value",
)
_CASE_KEYS = {"id", "category", "system", "prompt", "messages", "toolsets", "tools", "expected", "ordered", "note"}


# ---------------------------------------------------------------- argument rules


@dataclass(frozen=True, slots=True)
class Rule:
    """What one argument may be: one of ``values``, or a string ``pattern`` finds."""

    values: tuple[Any, ...] = ()
    pattern: re.Pattern[str] | None = None

    def allows(self, value: Any) -> bool:
        if self.pattern is not None:
            return isinstance(value, str) and self.pattern.search(value) is not None
        return any(_same(value, v) for v in self.values)

    def to_json(self) -> Any:
        return {"regex": self.pattern.pattern} if self.pattern is not None else list(self.values)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    tool: str
    arguments: Mapping[str, Rule]
    optional: Mapping[str, Rule]

    def mismatch(self, tool: str, arguments_text: str | None) -> tuple[str, str] | None:
        """Why a proposed call is not this one (error type, message); None when it is."""
        if tool != self.tool:
            return WRONG_TOOL, f"expected {self.tool}, got {tool}"
        try:
            arguments = json.loads(arguments_text) if arguments_text is not None else None
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            return BAD_ARGUMENTS, f"{tool}: the arguments are not a JSON object"
        for name in self.arguments:
            if name not in arguments:
                return MISSING, f"{tool}: argument {name!r} is missing"
        for name, value in arguments.items():
            rule = self.arguments.get(name) or self.optional.get(name)
            if rule is None:
                return UNEXPECTED_ARGUMENT, f"{tool}: argument {name!r} was not expected"
            if not rule.allows(value):
                given, allowed = (json.dumps(v, ensure_ascii=False) for v in (value, rule.to_json()))
                return WRONG_VALUE, f"{tool}: argument {name!r} is {given}, not {allowed}"
        return None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tool": self.tool, "arguments": {k: r.to_json() for k, r in self.arguments.items()}}
        if self.optional:
            data["optional"] = {k: r.to_json() for k, r in self.optional.items()}
        return data


# ---------------------------------------------------------------- cases


@dataclass(frozen=True, slots=True)
class TetherCase:
    """One case of tether's own format (see the module docstring)."""

    id: str
    category: str
    messages: tuple[Message, ...]
    offered: tuple[Tool, ...]
    calls: tuple[ExpectedCall, ...]  # () when no call is expected
    ordered: bool = False
    broken: str = ""  # why one of its tool schemas cannot become a tool: the case is then an error, not run

    @property
    def expected(self) -> Any:
        """The expected calls, as the dataset writes them."""
        return [c.to_json() for c in self.calls]

    def tools(self) -> list[Tool]:
        """The tools the case offers; a ``ToolDefinitionError`` when one of them cannot be used."""
        if self.broken:
            raise ToolDefinitionError(self.broken)
        return list(self.offered)

    def call_name(self, tool_name: str) -> str:
        """The tool's own name: tether's cases name tools as they are."""
        return tool_name

    def check(self, output: Output) -> Verdict:
        """Whether the model's calls are the expected ones."""
        if not self.calls:
            if output:
                return _fail(UNEXPECTED_CALL, f"no call was expected; got {', '.join(n for n, _ in output)}")
            return Verdict(True)
        if not output:
            return _fail(NO_CALL, f"expected {', '.join(c.tool for c in self.calls)}; the model answered in text")
        if len(output) != len(self.calls):
            return _fail(WRONG_COUNT, f"expected {len(self.calls)} call(s), got {len(output)}")
        if self.ordered:
            for want, (tool, arguments) in zip(self.calls, output, strict=True):
                wrong = want.mismatch(tool, arguments)
                if wrong is not None:
                    return _fail(*wrong)
            return Verdict(True)
        return _match_any_order(self.calls, output)


def _fail(error_type: str, message: str) -> Verdict:
    return Verdict(False, error_type, [message])


def _match_any_order(calls: Sequence[ExpectedCall], output: Sequence[tuple[str, str | None]]) -> Verdict:
    """Pair each expected call with a distinct proposed one (backtracking: cases hold a few calls)."""

    def pair(i: int, used: frozenset[int]) -> bool:
        if i == len(calls):
            return True
        return any(
            j not in used and calls[i].mismatch(*output[j]) is None and pair(i + 1, used | {j})
            for j in range(len(output))
        )

    if pair(0, frozenset()):
        return Verdict(True)
    wanted, got = sorted(c.tool for c in calls), sorted(name for name, _ in output)
    if wanted != got:
        return _fail(WRONG_TOOL, f"expected {', '.join(wanted)}; got {', '.join(got)}")
    # Say why the first expected call that fits no proposed call does not fit the closest one.
    for want in calls:
        misses = [want.mismatch(*got) for got in output]
        if all(m is not None for m in misses):
            same_tool = [m for m, got in zip(misses, output, strict=True) if got[0] == want.tool]
            wrong = (same_tool or misses)[0]
            assert wrong is not None
            return _fail(*wrong)
    return _fail(WRONG_VALUE, "no one-to-one pairing of the proposed calls with the expected ones")


# ---------------------------------------------------------------- loading


TICKETS_TOOLS = Path(__file__).resolve().parent / "tickets_tools.json"


def _schema_tools() -> list[Tool]:
    """The ticket example's tools (examples/tickets), schemas only: an eval never executes a call.

    Kept as data, so that the library holds no ticket code; a test of the
    example checks that they are the example's tools' schemas.
    """
    schemas = json.loads(TICKETS_TOOLS.read_text(encoding="utf-8"))
    return [_schema_tool(schema, str(TICKETS_TOOLS)) for schema in schemas]


# Toolsets only evals offer (their tools are never executed); anything else goes to tether.toolsets.
EVAL_TOOLSETS: dict[str, Callable[[], list[Tool]]] = {"tickets": _schema_tools}


def toolset(name: str) -> list[Tool]:
    if name in EVAL_TOOLSETS:
        return EVAL_TOOLSETS[name]()
    from tether.toolsets import load_toolset

    return load_toolset(name, files_root=".")


def registered_toolsets() -> list[str]:
    """The toolsets a dataset may name by itself: the eval's own and tether's built-in ones."""
    from tether.toolsets import TOOLSETS

    return sorted({*EVAL_TOOLSETS, *TOOLSETS})


ALLOW_FILES_FLAG = "--allow-toolset-files"


def is_tether_dataset(path: Path) -> bool:
    """A ``.jsonl`` file not named like BFCL's data."""
    return path.suffix == ".jsonl" and not path.name.startswith("BFCL_")


def load_cases(
    path: str | Path, toolsets: Sequence[str] = (), *, allow_toolset_files: bool = False
) -> list[TetherCase]:
    """The cases of a tether eval file; every mistake in it is a ``DatasetError`` naming the line.

    A dataset is data: the toolsets its cases name must be registered ones
    (``registered_toolsets``) unless ``allow_toolset_files``, since a module
    or a file would be imported, running its code. ``toolsets`` (the
    caller's, for cases that name none) may be anything ``load_toolset`` takes.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: JSON may hold U+2028 as it is
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    offered: dict[str, list[Tool]] = {}

    def tools_of(names: Sequence[str], where: str, named_by_dataset: bool = True) -> list[Tool]:
        found = []
        for name in names:
            # The eval's own toolsets first: they need no import of tether.toolsets (and its tools).
            if named_by_dataset and not allow_toolset_files and name not in EVAL_TOOLSETS:
                registered = registered_toolsets()
                if name not in registered:
                    raise DatasetError(
                        f"{where}: toolset {name!r} is not a registered toolset ({', '.join(registered)}); a "
                        f"dataset imports a module or a file, running its code, only with {ALLOW_FILES_FLAG}"
                    )
            if name not in offered:
                try:
                    offered[name] = toolset(name)
                except Exception as exc:  # a ConfigurationError, or a module failing to import
                    raise DatasetError(f"{where}: toolset {name!r}: {exc}") from None
            found.extend(offered[name])
        return found

    cases: list[TetherCase] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            entry = nesting.loads(line, nesting.MAX_REPLY_DEPTH)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
        except ValueError as exc:  # nested too deep, or not text
            raise DatasetError(f"{where}: {exc}") from None
        case = _case(entry, where, path.stem, toolsets, tools_of)
        if case.id in seen:
            raise DatasetError(f"{where}: case id {case.id!r} appears twice")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise DatasetError(f"{path}: no cases in it")
    return cases


def _case(
    entry: Any,
    where: str,
    default_category: str,
    default_toolsets: Sequence[str],
    tools_of: Callable[..., list[Tool]],
) -> TetherCase:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
        raise DatasetError(f"{where}: expected an object with a non-empty string id")
    unknown = sorted(set(entry) - _CASE_KEYS)
    if unknown:
        raise DatasetError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_CASE_KEYS))})")
    category = entry.get("category", default_category)
    if not isinstance(category, str) or not category:
        raise DatasetError(f"{where}: category must be a non-empty string")
    messages = _messages(entry, where)
    tools: list[Tool] = []
    names = entry.get("toolsets")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DatasetError(f"{where}: toolsets must be a list of names")
        tools += tools_of(names, where)
    schemas = entry.get("tools")
    broken: list[str] = []  # why a tool schema cannot become a tool
    unmade: list[str] = []  # and those tools' names
    if schemas is not None:
        if not isinstance(schemas, list):
            raise DatasetError(f"{where}: tools must be a list of {{name, description, parameters}}")
        for schema in schemas:
            try:
                tools.append(_schema_tool(schema, where))
            except ToolDefinitionError as exc:  # this case's error when it runs; the others run
                unmade.append(schema["name"])
                broken.append(str(exc))
    if names is None and schemas is None:
        if not default_toolsets:
            raise DatasetError(f"{where}: the case names no toolsets or tools, and no --toolset was given")
        tools = tools_of(default_toolsets, where, named_by_dataset=False)
    known = {t.name for t in tools} | set(unmade)
    if len(known) != len(tools) + len(unmade):
        raise DatasetError(f"{where}: two offered tools share a name")
    expected = entry.get("expected")
    if not isinstance(expected, list):
        raise DatasetError(f"{where}: expected must be a list of calls ([] when no call is expected)")
    calls = tuple(_expected_call(c, where, known) for c in expected)
    ordered = entry.get("ordered", False)
    if not isinstance(ordered, bool):
        raise DatasetError(f"{where}: ordered must be true or false")
    return TetherCase(entry["id"], category, messages, tuple(tools), calls, ordered, "; ".join(broken))


def _messages(entry: dict[str, Any], where: str) -> tuple[Message, ...]:
    prompt, conversation, system = entry.get("prompt"), entry.get("messages"), entry.get("system")
    if (prompt is None) == (conversation is None):
        raise DatasetError(f"{where}: give either prompt or messages")
    out: list[Message] = []
    if system is not None:
        if not isinstance(system, str):
            raise DatasetError(f"{where}: system must be a string")
        out.append(Message("system", system))
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f"{where}: prompt must be a non-empty string")
        return (*out, Message("user", prompt))
    if not isinstance(conversation, list) or not conversation:
        raise DatasetError(f"{where}: messages must be a non-empty list")
    for i, message in enumerate(conversation):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant", "tool"):
            raise DatasetError(f"{where}: messages[{i}] needs a role: system, user, assistant or tool")
        if not (message.get("content") is None or isinstance(message["content"], str)):
            raise DatasetError(f"{where}: messages[{i}]: content must be text or null")
        try:
            calls = [
                {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                if "function" in c
                else c
                for c in message.get("tool_calls") or ()
            ]
            out.append(Message.from_dict({**message, "tool_calls": calls}))
        except (KeyError, TypeError):
            raise DatasetError(f"{where}: messages[{i}]: a tool call needs an id, a name and arguments") from None
    return tuple(out)


def _schema_tool(schema: Any, where: str) -> Tool:
    if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
        raise DatasetError(f"{where}: each of tools needs a name, a description and parameters")
    parameters = schema.get("parameters", {"type": "object", "properties": {}})

    def not_executable(**_: Any) -> Any:
        raise RuntimeError("eval tools have no implementation; run them with propose_only=True")

    return tool_from_schema(schema["name"], parameters, not_executable, str(schema.get("description", "")))


def _rules(value: Any, where: str, tool: str, key: str) -> dict[str, Rule]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: {tool}: {key} must be an object of argument rules")
    rules = {}
    for name, rule in value.items():
        if isinstance(rule, list) and rule:
            rules[name] = Rule(values=tuple(rule))
        elif isinstance(rule, dict) and set(rule) == {"regex"} and isinstance(rule["regex"], str):
            try:
                rules[name] = Rule(pattern=re.compile(rule["regex"], re.IGNORECASE))
            except re.error as exc:
                raise DatasetError(f"{where}: {tool}.{name}: bad regex: {exc}") from None
        else:
            raise DatasetError(f'{where}: {tool}.{name}: a rule is a non-empty list of values or {{"regex": ...}}')
    return rules


def _expected_call(call: Any, where: str, known: set[str]) -> ExpectedCall:
    if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
        raise DatasetError(f"{where}: each expected call needs a tool name")
    tool = call["tool"]
    if tool not in known:
        raise DatasetError(f"{where}: expected tool {tool!r} is not offered (offered: {', '.join(sorted(known))})")
    extra = sorted(set(call) - {"tool", "arguments", "optional"})
    if extra:
        raise DatasetError(f"{where}: {tool}: unknown key(s) {', '.join(extra)}")
    arguments = _rules(call.get("arguments", {}), where, tool, "arguments")
    optional = _rules(call.get("optional"), where, tool, "optional")
    both = sorted(set(arguments) & set(optional))
    if both:
        raise DatasetError(f"{where}: {tool}: {', '.join(both)} both required and optional")
    return ExpectedCall(tool, arguments, optional)


def load_dataset(dataset: str | Path, toolsets: Sequence[str] = (), *, allow_toolset_files: bool = False) -> list[Any]:
    """A tether eval file (``*.jsonl`` not named ``BFCL_…``) or a BFCL dataset, by its name."""
    from tether.eval.bfcl import load

    path = Path(dataset)
    if is_tether_dataset(path):
        if not path.is_file():
            raise DatasetError(f"no dataset {str(dataset)!r}: the file does not exist")
        return load_cases(path, toolsets, allow_toolset_files=allow_toolset_files)
    return load(dataset)
