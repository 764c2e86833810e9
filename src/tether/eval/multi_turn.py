"""BFCL's multi-turn categories: stateful tools, one conversation per case, and BFCL's state and response checks.

A multi-turn case (``BFCL_v4_multi_turn_<kind>.json``) is a conversation of
user turns over instances of BFCL's stateful classes (``GorillaFileSystem``,
``MathAPI``, ``MessageAPI``, ``TwitterAPI``, ``TicketAPI``, ``TradingBot``,
``TravelAPI``, ``VehicleControlAPI``), each loaded with the case's
``initial_config``. The ground truth is a list of calls per turn, as Python
source (``"cd(folder='document')"``).

Running a case (``MultiTurnCase.evaluate``): the classes are instantiated
from the installed ``bfcl-eval`` package (imported only here, only when a
multi-turn case runs), their methods offered as tether tools built from
BFCL's function documents by the same conversion as single-turn cases
(``tool_from_document``), and each user turn is a turn of one tether
``Conversation``: every gate on, the calls executed on the case's instances
(each case has its own, see ``instantiate``), as many steps as the model
wants until it answers in text. BFCL's step limit: after
``MAX_STEPS_PER_TURN + 1`` steps of calls, all executed, the model is not
asked again and is forced to quit (``multi_turn:force_terminated`` when turns
are left).
In ``multi_turn_miss_func`` a function is held out until a later turn, whose
user message is BFCL's "I have updated some more functions...".

Scoring (``check_turns``) is a port of BFCL's ``multi_turn_checker``
(bfcl-eval 2026.3.23, Apache-2.0): the calls tether executed, turn by turn,
are executed again on fresh instances, the ground truth on others; after
each turn whose ground truth is not empty,

1. the model must have made a call in that turn (``multi_turn:empty_turn_model_response``);
2. every public attribute of every instance must equal the ground truth's
   (``multi_turn:instance_state_mismatch``);
3. every result of the turn's ground-truth calls must be among the results
   of the model's calls so far, in any order (``multi_turn:execution_response_mismatch``).

A call a gate refused was never executed, so it counts for nothing (BFCL,
which has no gates, would have executed it). tests/eval checks every verdict
against BFCL's own checker.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tether.core.budget import Budget, Compat
from tether.core.errors import DatasetError, TetherError
from tether.core.machine import Status
from tether.core.messages import Message, ModelReply
from tether.core.settings import ModelSettings
from tether.eval.checker import Output, Verdict
from tether.eval.functions import bfcl_name, data_dir, tool_from_document
from tether.eval.harness import ERROR, MISTAKE, PASSED, REFUSED, REPLY_REFUSED, CaseResult
from tether.models.base import Model, ModelRequest
from tether.tools import Tool, ToolError

# BFCL's multi-turn categories (tether.eval.bfcl loads their files, this module runs and scores their cases).
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
MAX_STEPS_PER_TURN = 20  # BFCL's MAXIMUM_STEP_LIMIT
RESULT_CHARS = 1_000_000  # BFCL shows a result whole (long_context's reach ~32k characters, tether's default 20k)
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
INSTALL_HINT = "pip install --no-deps bfcl-eval==2026.3.23 mpmath"

_SOURCE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_FUNCTION_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
_STATELESS = frozenset({"MathAPI"})
_FORBIDDEN = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})

EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
FORCE_TERMINATED = "multi_turn:force_terminated"

# One BFCL call at a time, in the tools' threads and the checker alike: some methods write a
# module-level object and return it (VehicleControlAPI's long-context weather).
_RUNNING = threading.Lock()

Call = tuple[str, Mapping[str, Any]]  # (BFCL function name, arguments)
Turns = Sequence[Sequence[Sequence[Call]]]  # per turn, per step, the calls executed


# ---------------------------------------------------------------- BFCL's classes, executed


def bfcl_class(name: str) -> type:
    """One of BFCL's stateful classes, imported from the installed bfcl-eval package."""
    module = _CLASS_MODULES.get(name)
    if module is None:
        raise DatasetError(f"BFCL class {name!r} is not supported (supported: {', '.join(_CLASS_MODULES)})")
    try:
        found: type = getattr(importlib.import_module(f"{_SOURCE}.{module}"), name)
    except ImportError as exc:
        raise DatasetError(f"BFCL multi-turn cases need the bfcl-eval package ({exc}): {INSTALL_HINT}") from None
    return found


def instantiate(classes: Sequence[str], config: Mapping[str, Any], long_context: bool) -> dict[str, Any]:
    """Fresh instances of the case's classes, each loaded with its part of the initial configuration.

    Each instance is deep-copied once loaded: the long-context scenarios put BFCL's module-level
    objects into the state (``TravelAPI``'s extra credit cards), which calls then change; a copy
    keeps every case's state its own (and BFCL's module as it was).
    """
    made = {}
    for name in classes:
        instance = bfcl_class(name)()
        if name not in _STATELESS:
            try:
                instance._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
            except Exception as exc:  # a scenario the class cannot read: the case's error, not the eval's
                raise DatasetError(
                    f"{name}: the initial_config cannot be loaded ({type(exc).__name__}: {exc})"
                ) from None
            instance = copy.deepcopy(instance)
        made[name] = instance
    return made


def methods(instances: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """Public methods by name; a later class wins a shared name, as in BFCL's mapping."""
    found: dict[str, Callable[..., Any]] = {}
    for instance in instances.values():
        for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
            if not name.startswith("_"):
                found[name] = method
    return found


def result_text(value: Any) -> str:
    """A call's result as BFCL compares it: a string as is, a dict as JSON, anything else by ``str``."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def execute(found: Mapping[str, Callable[..., Any]], name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """One call, with BFCL's result text (``Error during execution: ...`` when it raises)."""
    if name in _FORBIDDEN:
        return f"Error during execution: Function call {name} is not allowed."
    method = found.get(name)
    if method is None:
        return f"Error during execution: name '{name}' is not defined"
    try:
        with _RUNNING:
            return result_text(method(*args, **kwargs))
    except Exception as exc:  # the classes report misuse by raising; BFCL records the message
        return f"Error during execution: {exc}"


def parse_call(source: str) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """A ground-truth call ``name(arg, key=value)`` with literal arguments, parsed (never evaluated)."""
    try:
        node = ast.parse(source, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a plain name")
        names = [k.arg for k in node.keywords]
        if None in names:
            raise ValueError("arguments passed with ** are not written out")
        if len(set(names)) != len(names):
            raise ValueError("a keyword argument is repeated")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError) as exc:  # TypeError: a literal Python cannot build ({[1]: 2})
        raise DatasetError(f"ground-truth call {source!r}: {exc}") from None
    except (RecursionError, MemoryError):
        raise DatasetError(f"ground-truth call {source[:80]!r}...: nested too deeply to parse") from None
    return node.func.id, args, kwargs


# ---------------------------------------------------------------- the checker


def _fail(error_type: str, message: str, details: Any = None) -> Verdict:
    return Verdict(False, error_type, [message] if details is None else [message, details])


def _state_differences(model: Any, truth: Any) -> dict[str, Any]:
    return {
        name: {"model": getattr(model, name), "ground_truth": value}
        for name, value in vars(truth).items()
        if not name.startswith("_") and getattr(model, name) != value
    }


def _missing(expected: Sequence[str], got: Sequence[str]) -> list[str]:
    """The expected results not among ``got``, each result of ``got`` used once."""
    left = list(got)
    missing = []
    for item in expected:
        if item in left:
            left.remove(item)
        else:
            missing.append(item)
    return missing


def check_turns(
    ground_truth: Sequence[Sequence[str]],
    turns: Turns,
    classes: Sequence[str],
    config: Mapping[str, Any],
    long_context: bool = False,
) -> Verdict:
    """BFCL's multi-turn verdict on the calls executed, per turn and step (see the module docstring)."""
    if len(turns) != len(ground_truth):
        return _fail(
            FORCE_TERMINATED,
            f"The model was forced to quit: {len(turns)} turn(s) of {len(ground_truth)} were run.",
        )
    model_instances = instantiate(classes, config, long_context)
    truth_instances = instantiate(classes, config, long_context)
    model_methods, truth_methods = methods(model_instances), methods(truth_instances)
    so_far: list[str] = []
    for index, (expected, steps) in enumerate(zip(ground_truth, turns, strict=True)):
        for step in steps:
            so_far.extend(execute(model_methods, name, (), arguments) for name, arguments in step)
        truth_results = [execute(truth_methods, *parse_call(source)) for source in expected]
        if not expected:
            continue  # nothing to achieve in this turn: whatever the model did counts from the next turn on
        if not any(steps):
            return _fail(EMPTY_TURN, f"Model response list is empty for turn {index}")
        for name, truth in truth_instances.items():
            differences = _state_differences(model_instances[name], truth)
            if differences:
                message = f"Model instance for {name} does not match the state with ground truth instance."
                return _fail(STATE_MISMATCH, f"turn {index}: {message}", differences)
        missing = _missing(truth_results, so_far)
        if missing:
            message = (
                "Model response execution results so far does not contain all the ground truth "
                f"response execution results for turn {index}."
            )
            return _fail(RESPONSE_MISMATCH, message, {"missing_items": missing})
    return Verdict(True)


# ---------------------------------------------------------------- cases


@dataclass(frozen=True, slots=True)
class MultiTurnCase:
    """One BFCL multi-turn case: the user's turns, the classes and their state, the ground truth per turn."""

    id: str
    category: str
    turns: tuple[tuple[Message, ...], ...]  # () for a turn that only adds held-out functions
    functions: tuple[dict[str, Any], ...]  # offered from the first turn
    involved_classes: tuple[str, ...]
    initial_config: dict[str, Any]
    ground_truth: tuple[tuple[str, ...], ...]
    missed: dict[int, tuple[dict[str, Any], ...]] = field(default_factory=dict)  # turn -> functions added then
    path: tuple[str, ...] = ()  # BFCL's list of the functions the ground truth uses

    @property
    def long_context(self) -> bool:
        """Whether the case is of BFCL's long-context category: its classes load their long scenarios."""
        return "long_context" in self.category

    @property
    def messages(self) -> tuple[Message, ...]:
        """The user's messages, turn after turn (what reports show as the conversation)."""
        return tuple(m for turn in self.user_turns() for m in turn)

    @property
    def expected(self) -> Any:
        """BFCL's expected calls, turn by turn."""
        return [list(turn) for turn in self.ground_truth]

    def user_turns(self) -> list[tuple[Message, ...]]:
        """Each turn's messages, BFCL's prompt in place of the empty turns that add functions."""
        return [turn or (Message("user", ADDED_FUNCTIONS_PROMPT),) for turn in self.turns]

    def tools(self) -> list[Tool]:
        """The tools of the first turn, unbound (for compiling ahead; ``evaluate`` binds them)."""
        return [tool_from_document(doc) for doc in self.functions]

    def call_name(self, tool_name: str) -> str:
        """The name BFCL knows a tool by."""
        return bfcl_name(tool_name)

    def check(self, output: Output) -> Verdict:
        """A one-turn reading of the harness's protocol: the calls as one step of the only turn."""
        calls = [(name, json.loads(text or "{}")) for name, text in output or ()]
        return self.check_turns([[calls]] if calls else [[]])

    def check_turns(self, turns: Turns) -> Verdict:
        """BFCL's multi-turn checker's verdict on the calls of every turn (final state and responses)."""
        return check_turns(self.ground_truth, turns, self.involved_classes, self.initial_config, self.long_context)

    async def evaluate(
        self,
        model: Model,
        *,
        compat: Compat | None = None,
        system: str | None = None,
        model_settings: ModelSettings | None = None,
    ) -> CaseResult:
        """Run the case's turns through one tether conversation and score them."""
        return await run_conversation(self, model, compat=compat, system=system, model_settings=model_settings)

    def bound_tools(self, functions: Sequence[Mapping[str, Any]], instances: Mapping[str, Any]) -> list[Tool]:
        """The tools for ``functions``, each executing its method on the case's live instances."""
        found = methods(instances)
        tools = []
        for doc in functions:
            tool = tool_from_document(doc)
            tools.append(replace(tool, function=_bound(found, str(doc["name"])), max_result_chars=RESULT_CHARS))
        return tools


def _bound(found: Mapping[str, Callable[..., Any]], name: str) -> Callable[..., Any]:
    method = found.get(name)

    def call(**arguments: Any) -> Any:
        if method is None:
            raise RuntimeError(f"no BFCL method {name!r} on this case's instances")
        with _RUNNING:  # the value is read before another case's call can change it
            try:
                value = method(**arguments)
            except Exception as exc:  # the classes report misuse by raising: the model reads what BFCL shows
                raise ToolError(f"Error during execution: {exc}") from exc
            if type(value) is dict:
                try:
                    return json.loads(json.dumps(value))  # the model reads it as JSON: a copy of its own
                except (TypeError, ValueError):
                    pass
            return result_text(value)

    return call


# ---------------------------------------------------------------- loading


def function_docs(classes: Sequence[str], data: Path) -> list[dict[str, Any]]:
    """BFCL's function documents of the classes, in their order (``multi_turn_func_doc/``)."""
    docs: list[dict[str, Any]] = []
    for name in classes:
        file = _FUNCTION_DOCS.get(name)
        if file is None:
            raise DatasetError(f"BFCL class {name!r} is not supported (supported: {', '.join(_FUNCTION_DOCS)})")
        path = data / "multi_turn_func_doc" / file
        try:
            docs.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        except OSError as exc:
            raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    return docs


def func_doc_dir(path: Path) -> Path:
    """Where ``multi_turn_func_doc/`` is: beside the dataset, else in the installed bfcl-eval."""
    if (path.parent / "multi_turn_func_doc").is_dir():
        return path.parent
    data = data_dir()
    if data is None or not (data / "multi_turn_func_doc").is_dir():
        raise DatasetError(f"{path}: BFCL's multi_turn_func_doc/ is not beside it and bfcl-eval is not installed")
    return data


def ground_truth_of(truth: Any, where: str) -> tuple[tuple[str, ...], ...]:
    """A case's ground truth as its possible_answer line holds it: turns, each a list of calls written as text,
    each parsed once (``parse_call``); a ``DatasetError`` naming ``where`` and the first part that is not."""
    if not isinstance(truth, list):
        raise DatasetError(f"{where}: ground_truth must be a list of turns, each a list of calls")
    for index, turn in enumerate(truth):
        if not isinstance(turn, list):
            raise DatasetError(f"{where}: ground_truth[{index}] must be a list of calls")
        for at, source in enumerate(turn):
            if not isinstance(source, str):
                raise DatasetError(f"{where}: ground_truth[{index}][{at}] must be a call written as text")
            try:
                parse_call(source)
            except DatasetError as exc:
                raise DatasetError(f"{where}: ground_truth[{index}][{at}]: {exc}") from None
    return tuple(tuple(turn) for turn in truth)


def make_case(
    entry: Mapping[str, Any], truth: Sequence[Sequence[str]], category: str, data: Path, where: str
) -> MultiTurnCase:
    """A case from one line of the dataset and its ground truth (``ground_truth_of``), as BFCL's loader prepares it."""
    try:
        classes = tuple(entry["involved_classes"])
        functions = function_docs(classes, data)
        missed: dict[int, tuple[dict[str, Any], ...]] = {}
        for turn, names in (entry.get("missed_function") or {}).items():
            held = []
            for name in names:
                at = next((i for i, doc in enumerate(functions) if doc["name"] == name), None)
                if at is not None:
                    held.append(functions.pop(at))
            missed[int(turn)] = tuple(held)
        turns = tuple(tuple(Message.from_dict(dict(m)) for m in turn) for turn in entry["question"])
        ground_truth = tuple(tuple(str(c) for c in turn) for turn in truth)
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{where}: not a BFCL multi-turn case ({type(exc).__name__}: {exc})") from None
    if len(ground_truth) != len(turns):
        raise DatasetError(f"{where}: {len(turns)} turn(s) but {len(ground_truth)} in the ground truth")
    for index, turn_messages in enumerate(turns):  # a turn is what the user says next, or nothing
        if turn_messages and (len(turn_messages) != 1 or turn_messages[0].role != "user"):
            roles = ", ".join(m.role for m in turn_messages)
            raise DatasetError(f"{where}: turn {index} must be one user message or none (it has: {roles})")
    return MultiTurnCase(
        str(entry["id"]),
        category,
        turns,
        tuple(functions),
        classes,
        dict(entry.get("initial_config") or {}),
        ground_truth,
        missed,
        tuple(entry.get("path") or ()),
    )


# ---------------------------------------------------------------- running one case


class StepRecorder:
    """The model, with every reply of a case kept: one reply is one step.

    BFCL's step limit: after ``MAX_STEPS_PER_TURN + 1`` steps of calls in a
    turn (all executed), the model is not asked again; the turn ends with an
    empty answer that is never sent to the model, and ``forced`` says so.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = model.name
        self.replies: list[ModelReply] = []
        self.turn_steps = 0  # requests of the current turn (``new_turn`` resets it)
        self.forced = False

    def new_turn(self) -> None:
        self.turn_steps = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.turn_steps > MAX_STEPS_PER_TURN:
            self.forced = True
            return ModelReply(choices=1, finish_reason="stop", content="")
        self.turn_steps += 1
        reply = await self.model.complete(request)
        self.replies.append(reply)
        return reply

    async def aclose(self) -> None:  # the caller's model outlives the case
        pass


def turn_budget() -> Budget:
    """Room for BFCL's per-turn limit, which ``StepRecorder`` enforces: 21 steps of calls, all executed,
    and the step that would ask the model a 22nd time (never sent)."""
    return Budget(max_steps=MAX_STEPS_PER_TURN + 2, max_tool_calls=None)


async def run_conversation(
    case: MultiTurnCase,
    model: Model,
    *,
    compat: Compat | None = None,
    system: str | None = None,
    model_settings: ModelSettings | None = None,
) -> CaseResult:
    """Each user turn a turn of one conversation, the calls executed on live instances; then the verdict.

    ``system`` and ``model_settings`` are the agent's (``tether eval -s/-o``)."""
    from tether.core.events import CALL_EXECUTED, CALL_REJECTED, CALL_VALIDATED, RunEvent
    from tether.drivers.local.conversation import Conversation
    from tether.drivers.local.runner import Agent

    started = time.perf_counter()
    options: dict[str, Any] = {"compat": compat, "system": system, "model_settings": model_settings}
    recorder = StepRecorder(model)
    calls: list[dict[str, Any]] = []
    step_of: dict[str, dict[str, Any]] = {}  # call id -> its record, for the current step
    turn, seen = 0, 0

    def take_replies() -> None:
        nonlocal seen
        for reply in recorder.replies[seen:]:
            step_of.clear()
            step = sum(1 for _ in {(c["turn"], c["step"]) for c in calls if c["turn"] == turn})
            for call in reply.tool_calls:
                record = {
                    "turn": turn,
                    "step": step,
                    "tool": bfcl_name(call.name) if isinstance(call.name, str) else repr(call.name),
                    "arguments": call.arguments if isinstance(call.arguments, str) else None,
                    "gate": "",
                    "message": "",
                    "executed": False,
                }
                calls.append(record)
                if isinstance(call.id, str):
                    step_of[call.id] = record
        seen = len(recorder.replies)

    def note(event: RunEvent) -> None:
        if event.kind in (CALL_VALIDATED, CALL_REJECTED, CALL_EXECUTED):
            take_replies()
            record = step_of.get(event.data.get("id", ""))
            if record is None:
                return
            if event.kind == CALL_VALIDATED:
                record["gate"] = "accepted"
            elif event.kind == CALL_EXECUTED:
                record["executed"] = True
            else:
                envelope = json.loads(event.data["result"] or "{}")
                record["gate"] = event.data["outcome"]
                record["message"] = (envelope.get("error") or {}).get("message", "")

    refusals: list[str] = []
    content: str | None = None
    status = Status.COMPLETED
    try:
        live = instantiate(case.involved_classes, case.initial_config, case.long_context)
        functions = list(case.functions)
        agent = Agent(recorder, case.bound_tools(functions, live), budget=turn_budget(), **options)
        conversation = agent.conversation()
        for turn, messages in enumerate(case.user_turns()):
            if case.missed.get(turn):
                functions += case.missed[turn]
                agent = Agent(recorder, case.bound_tools(functions, live), budget=turn_budget(), **options)
                conversation = Conversation(
                    agent,
                    conversation.id,
                    conversation.principal,
                    conversation.budget,
                    history=conversation.messages,
                    turns=conversation.turns,
                )
            recorder.new_turn()
            result = await conversation.send(str(messages[-1].content), on_event=note)
            take_replies()
            status = Status.MAX_STEPS if recorder.forced else result.status
            for record in calls:
                if record["turn"] == turn and not record["gate"]:
                    record["gate"], record["message"] = status.value, "the reply was refused whole"
            if status is Status.MODEL_ERROR:
                failed = CaseResult(case.id, case.category, ERROR, result.reason or "", calls, status="model_error")
                return _described(case, failed, started)
            if status in REPLY_REFUSED or status in (Status.REPAIR_EXHAUSTED, Status.LOOP_DETECTED):
                refusals.append(f"turn {turn}: the reply was refused: {status.value}")
            content = result.output
            if status in (Status.MAX_STEPS, Status.BUDGET_EXHAUSTED):
                turn += 1
                break  # BFCL's force quit: the later turns are not run
        else:
            turn += 1
    except TetherError as exc:
        failed = CaseResult(case.id, case.category, ERROR, f"{type(exc).__name__}: {exc}", calls)
        return _described(case, failed, started)
    verdict = case.check_turns(executed_turns(calls, turn))
    refusals += [
        f"turn {c['turn']}: {c['tool']}: {c['gate']}: {c['message']}"
        for c in calls
        if c["gate"] not in ("accepted", *(s.value for s in REPLY_REFUSED), Status.REPAIR_EXHAUSTED.value)
    ]
    why = f"{verdict.error_type}: {verdict.errors[0]}" if verdict.errors else verdict.error_type
    if verdict.valid:
        outcome, reason = PASSED, ""
    elif refusals:
        outcome, reason = REFUSED, "; ".join([why, *refusals])  # BFCL's verdict first, then what was refused
    else:
        outcome, reason = MISTAKE, why
    return _described(case, CaseResult(case.id, case.category, outcome, reason, calls, content, status.value), started)


def _described(case: MultiTurnCase, result: CaseResult, started: float) -> CaseResult:
    result.seconds = time.perf_counter() - started
    result.prompt = [{**m.to_dict(), "turn": i} for i, turn in enumerate(case.user_turns()) for m in turn]
    result.expected = case.expected
    return result


def executed_turns(calls: Sequence[Mapping[str, Any]], turns: int) -> list[list[list[Call]]]:
    """The executed calls of ``results.jsonl``'s call list, per turn and per step."""
    out: list[list[list[Call]]] = [[] for _ in range(turns)]
    steps: dict[tuple[int, int], list[Call]] = {}
    for call in calls:
        if not call.get("executed"):
            continue
        key = (int(call["turn"]), int(call["step"]))
        if key not in steps:
            steps[key] = []
            out[key[0]].append(steps[key])
        steps[key].append((str(call["tool"]), json.loads(call["arguments"])))
    return out


__all__ = [
    "ADDED_FUNCTIONS_PROMPT",
    "MAX_STEPS_PER_TURN",
    "MULTI_TURN",
    "MultiTurnCase",
    "check_turns",
    "execute",
    "executed_turns",
    "func_doc_dir",
    "ground_truth_of",
    "instantiate",
    "make_case",
    "methods",
    "parse_call",
    "result_text",
    "run_conversation",
]
