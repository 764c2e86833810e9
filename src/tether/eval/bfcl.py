"""Berkeley Function Calling Leaderboard data: datasets, their categories, and single-turn cases.

A BFCL dataset is a JSON-lines file ``BFCL_v4_<category>.json`` of
``{"id", "question": [[messages]], "function": [documents]}``; the ground
truth is ``possible_answer/BFCL_v4_<category>.json`` beside it, one
``{"id", "ground_truth": [{name: {param: [acceptable values]}}]}`` per case.
``irrelevance``-style categories have no ground truth: the right behaviour
is to call no tool.

Function documents become tools as ``tether.eval.functions`` says; the
multi-turn categories are loaded here and run by ``tether.eval.multi_turn``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core import nesting
from tether.core.errors import DatasetError
from tether.core.messages import Message
from tether.eval.checker import Output, Verdict, check, documents_problem, ground_truth_problem
from tether.eval.functions import bfcl_name, data_dir, tool_from_document
from tether.eval.multi_turn import MULTI_TURN, func_doc_dir, ground_truth_of, make_case
from tether.tools.tool import Tool

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
        """The language of the case's functions: ``python``, ``java`` or ``javascript``."""
        return language_of(self.category)

    @property
    def expected(self) -> Any:
        """BFCL's possible answer (``[]`` when no call is expected)."""
        return list(self.ground_truth) if self.ground_truth is not None else []

    def tools(self) -> list[Tool]:
        """The case's functions as tools (without implementations: eval runs only judge calls)."""
        return [tool_from_document(doc, self.language) for doc in self.functions]

    def check(self, output: Output) -> Verdict:
        """BFCL's AST checker's verdict on the model's calls."""
        return check(self.category, self.functions, self.ground_truth, output)

    def call_name(self, tool_name: str) -> str:
        """The BFCL function name of a tool name (a tool's name has ``-`` where BFCL's has ``.``)."""
        return bfcl_name(tool_name)


def language_of(category: str) -> str:
    """``python``, ``java`` or ``javascript``, as BFCL's ``is_java``/``is_js`` decide."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return "python"


# ---------------------------------------------------------------- datasets


def resolve(dataset: str) -> Path:
    """A dataset argument: a file path, or a category name looked up in an installed bfcl-eval."""
    path = Path(dataset)
    if path.is_file():
        return path
    data = data_dir()
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
                    value = nesting.loads(line, nesting.MAX_REPLY_DEPTH)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None
                except ValueError as exc:  # nested too deep, or not text
                    raise DatasetError(f"{path}:{number}: {exc}") from None
                if not isinstance(value, dict) or not isinstance(value.get("id"), str):
                    raise DatasetError(f"{path}:{number}: expected an object with a string id")
                yield number, value
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def needs_ground_truth(category: str) -> bool:
    return "relevance" not in category


def load(dataset: str | Path) -> list[Any]:
    """The cases of one BFCL dataset file (and its ground truth): ``Case``s, or ``MultiTurnCase``s."""
    path = resolve(str(dataset))
    category = category_of(path)
    if category in MULTI_TURN:
        return _load_multi_turn(path, category)
    truth: dict[str, tuple[str, Any]] = {}  # case id -> (where its ground truth is, the ground truth)
    if needs_ground_truth(category):
        answers = path.parent / "possible_answer" / path.name
        if not answers.is_file():
            raise DatasetError(f"{path}: the ground truth {answers} is missing")
        truth = {entry["id"]: (f"{answers}:{n}", entry.get("ground_truth")) for n, entry in _lines(answers)}
    cases = []
    for number, entry in _lines(path):
        question, functions = entry.get("question"), entry.get("function")
        if not (isinstance(question, list) and question and isinstance(question[0], list)):
            raise DatasetError(f"{path}:{number}: question must be a list of turns")
        if len(question) != 1:
            raise DatasetError(f"{path}:{number}: multi-turn cases are not supported yet")
        if not isinstance(functions, list):
            raise DatasetError(f"{path}:{number}: function must be a list of documents")
        turn = question[0]
        if not all(_is_message(m) for m in turn):
            said = (
                "each message of the question must be an object with a role (system, user or assistant)"
                " and text (or null) content"
            )
            raise DatasetError(f"{path}:{number}: {said}")
        if not all(isinstance(f, dict) for f in functions):
            raise DatasetError(f"{path}:{number}: each function document must be an object")
        messages = tuple(Message(m["role"], m.get("content")) for m in turn)
        ground_truth = None
        if needs_ground_truth(category):  # what the checker reads: the documents, then the ground truth
            wrong = documents_problem(functions, category)
            if wrong is not None:
                raise DatasetError(f"{path}:{number}: {wrong}")
            if entry["id"] not in truth:
                raise DatasetError(f"{path}:{number}: no ground truth for case {entry['id']}")
            where, found = truth[entry["id"]]
            wrong = ground_truth_problem(functions, found, category)
            if wrong is not None:
                raise DatasetError(f"{where}: {wrong}")
            ground_truth = tuple(found)
        cases.append(Case(entry["id"], category, messages, tuple(functions), ground_truth))
    if not cases:
        raise DatasetError(f"{path}: no cases in it")
    return cases


QUESTION_ROLES = ("system", "user", "assistant")  # a tool's result needs the call it answers, which no question has


def _is_message(message: Any) -> bool:
    """A message of a question: an object with a role of ``QUESTION_ROLES``, and text (or null) content."""
    if not isinstance(message, dict) or message.get("role") not in QUESTION_ROLES:
        return False
    return message.get("content") is None or isinstance(message["content"], str)


def _load_multi_turn(path: Path, category: str) -> list[Any]:
    answers = path.parent / "possible_answer" / path.name
    if not answers.is_file():
        raise DatasetError(f"{path}: the ground truth {answers} is missing")
    truth = {entry["id"]: (f"{answers}:{n}", entry.get("ground_truth")) for n, entry in _lines(answers)}
    data = func_doc_dir(path)
    cases = []
    for number, entry in _lines(path):
        if entry["id"] not in truth:
            raise DatasetError(f"{path}:{number}: no ground truth for case {entry['id']}")
        where, found = truth[entry["id"]]
        cases.append(make_case(entry, ground_truth_of(found, where), category, data, f"{path}:{number}"))
    if not cases:
        raise DatasetError(f"{path}: no cases in it")
    return cases
