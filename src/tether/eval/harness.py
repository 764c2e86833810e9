"""Running BFCL cases through tether's loop, scoring them, and keeping the results.

Each case is one run of an ``Agent`` with every gate on and
``propose_only=True``: the model is asked once, its calls are judged by the
gates (strict decoding, tool offered, strict schema, loop guard, budgets)
and recorded, and the run ends before anything executes. The calls the model
proposed are then scored by ``tether.eval.checker`` as BFCL scores them; but
the verdict follows the gates: a call a gate refused never ran, so it never
counts as the right call, whatever the checker says of it (BFCL's checker
would take ``math.factorial`` for the offered ``math-factorial``, which the
gate refused as ``unknown_tool``). The gates' verdicts sort the failures:

- ``passed``   the checker accepts the calls (or the lack of them) and the
  gates let every call and the reply through;
- ``mistake``  the checker refuses them and the gates let every call through:
  a wrong tool, a wrong or missing argument, a call where none was expected,
  no call where one was;
- ``refused``  a gate refused a call (invalid JSON, invalid arguments,
  unknown tool, a repeated call) or the reply itself (protocol error,
  truncated, filtered), whatever the checker says; when the checker alone
  would have passed the case, the reason says so;
- ``error``    the infrastructure failed (the model could not be reached, an
  HTTP error), or the case's tools cannot be made (a schema tether refuses,
  e.g. a ``$ref`` cycle): no verdict, the reason says which. The other cases
  run; such cases are asked again on the next run.

``results.jsonl`` gets one line per case as soon as it is scored, with
secrets redacted as in the run store's events (an argument under a
credential's key, such as ``password``, is ``[redacted]``); a later run
with the same ``--out`` skips every case already there with a verdict, and
first drops the lines of the cases it runs again (those with no verdict), so
the file keeps one line per case. Every line read back must hold a result
(``CaseResult.from_dict`` says what one holds): any other line is a
``DatasetError`` naming it, and nothing is sent or rewritten. Only the last
line may be cut short, by a process killed while it wrote it (no newline,
not JSON, perhaps half a character): that one is left out, and its case
runs again. A line whose case is of another category in this eval is
another eval's (same case ids): a ``DatasetError`` as well. ``eval.json``
beside it says what the results were made with (``tether.eval.record``):
resuming with another model, system message or model settings is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tether.core import nesting
from tether.core.budget import Compat
from tether.core.errors import ConfigurationError, DatasetError, TetherError
from tether.core.events import CALL_REJECTED, CALL_VALIDATED, RunEvent
from tether.core.machine import Status
from tether.core.messages import Message, ModelReply
from tether.core.redact import redact, redact_text
from tether.core.settings import ModelSettings
from tether.drivers.local.runner import Agent
from tether.eval.checker import Output, Verdict
from tether.eval.record import EvalRecord, check_record, write_record
from tether.models.base import Model, ModelRequest
from tether.tools import Tool

RESULTS_FILE = "results.jsonl"
DEFAULT_CONCURRENCY = 8

PASSED, MISTAKE, REFUSED, ERROR = "passed", "mistake", "refused", "error"
OUTCOMES = (PASSED, MISTAKE, REFUSED, ERROR)
_YIELDS = 3  # turns of the event loop a finished request gives the others (_Slots.complete)
REPLY_REFUSED = {Status.PROTOCOL_ERROR, Status.TRUNCATED, Status.CONTENT_FILTERED}


class EvalCase(Protocol):
    """What the harness needs of a case: a BFCL ``Case`` or a ``tether.eval.dataset.TetherCase``."""

    @property
    def id(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def messages(self) -> tuple[Message, ...]: ...
    @property
    def expected(self) -> Any:
        """What the model should propose, as the dataset says it (shown in reports)."""

    def tools(self) -> list[Tool]: ...
    def check(self, output: Output) -> Verdict: ...
    def call_name(self, tool_name: str) -> str:
        """The dataset's name for the tool the model called."""


@dataclass(slots=True)
class CaseResult:
    """One scored case: a line of ``results.jsonl``."""

    id: str
    category: str
    outcome: str  # passed, mistake, refused or error
    reason: str  # BFCL's error type, the gate's refusal, or the infrastructure error
    calls: list[dict[str, Any]] = field(default_factory=list)  # tool, arguments, gate, message
    content: str | None = None
    status: str = ""
    seconds: float = 0.0
    prompt: list[dict[str, Any]] = field(default_factory=list)  # the conversation the model was given
    expected: Any = None  # the dataset's expected calls, for reports
    scores: dict[str, Any] | None = None  # a benchmark's own measures of the case (AgentDojo's utility, security...)

    @property
    def valid(self) -> bool | None:
        """BFCL's verdict; None when there is none (an infrastructure error)."""
        return None if self.outcome == ERROR else self.outcome == PASSED

    def to_dict(self) -> dict[str, Any]:
        """The result as one line of ``results.jsonl``: a log, so with secrets redacted as the run store's events
        have them (a value under a credential's key, a credential's shape in text); it is scored before."""
        scores = {} if self.scores is None else {"scores": redact(self.scores)}
        return {
            "id": self.id,
            "category": self.category,
            "valid": self.valid,
            "outcome": self.outcome,
            "reason": redact_text(self.reason),
            "calls": redact(self.calls),
            "content": None if self.content is None else redact_text(self.content),
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "prompt": redact(self.prompt),
            "expected": redact(self.expected),
            **scores,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "a results line") -> CaseResult:
        """The result a line of ``results.jsonl`` holds; a ``DatasetError`` saying ``where`` and what is wrong
        when it holds none (``RESULT_FIELDS`` and ``SCORE_FIELDS`` say what a result holds)."""
        wrong = _not_a_result(data)
        if wrong is not None:
            raise DatasetError(f"{where}: {wrong}")
        return cls(
            data["id"],
            data["category"],
            data["outcome"],
            data.get("reason", ""),
            data.get("calls", []),
            data.get("content"),
            data.get("status", ""),
            data.get("seconds", 0.0),
            data.get("prompt") or [],
            data.get("expected"),
            data.get("scores"),
        )


# ---------------------------------------------------------------- what a results line holds

_NONE = type(None)
_JSON_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false", list: "a list"}
_JSON_NAMES |= {dict: "an object", _NONE: "null"}

# The fields of a results line that reports read, with the JSON types each may have; the first three are
# always there, and outcome is one of OUTCOMES. Each call and message is an object; a multi-turn case's
# have a whole-number turn (then every call has one).
RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "category": (str,),
    "outcome": (str,),
    "reason": (str,),
    "calls": (list,),
    "content": (str, _NONE),
    "status": (str,),
    "seconds": (float,),
    "prompt": (list, _NONE),
    "scores": (dict, _NONE),
}
_REQUIRED = ("id", "category", "outcome")
# A line's scores are AgentDojo's measures (tether.eval.agentdojo writes them, agentdojo_report sums them),
# with the JSON types each may have; the first five are always there.
SCORE_FIELDS: dict[str, tuple[type, ...]] = {
    "setting": (str,),
    "suite": (str,),
    "attack": (str,),
    "utility": (bool,),
    "security": (bool, _NONE),
    "user_task": (str,),
    "injection_task": (str, _NONE),
    "approvals": (list,),
    "injected_sinks": (list,),
    "attackable": (bool,),
    "by_answer": (bool,),
    "tokens": (int,),
}
_REQUIRED_SCORES = ("setting", "suite", "attack", "utility", "security")


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    """Whether a JSON value is of one of ``kinds`` (a boolean is no number; a whole number is a number)."""
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds) or (float in kinds and isinstance(value, int))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _wrong_fields(data: dict[str, Any], fields: dict[str, tuple[type, ...]], required: Sequence[str]) -> str | None:
    """The required keys ``data`` lacks, or the first of ``fields`` it holds with a wrong type."""
    missing = [key for key in required if key not in data]
    if missing:
        return f"no {', '.join(missing)}"
    for key, kinds in fields.items():
        if key in data and not _is(data[key], kinds):
            return f"{key} must be {' or '.join(_JSON_NAMES[kind] for kind in kinds)}"
    return None


def _not_a_result(data: Any) -> str | None:
    """What keeps ``data`` (a decoded line of ``results.jsonl``) from being a result; None when nothing does."""
    if not isinstance(data, dict):
        return f"expected a result (an object), got {_kind(data)}"
    if all(key in data for key in _REQUIRED) and data["outcome"] not in OUTCOMES:
        return f"outcome must be one of {', '.join(OUTCOMES)} (it is {json.dumps(data['outcome'])[:40]})"
    wrong = _wrong_fields(data, RESULT_FIELDS, _REQUIRED)
    if wrong is not None:
        return wrong
    calls, prompt = data.get("calls", []), data.get("prompt") or []
    for name, items in (("calls", calls), ("prompt", prompt)):
        for at, item in enumerate(items):
            if not isinstance(item, dict):
                return f"{name}[{at}] must be an object"
            if "turn" in item and not _is(item["turn"], (int,)):
                return f"{name}[{at}].turn must be a whole number"
    # A multi-turn case's report lists its calls turn by turn: then every call has its turn.
    if any("turn" in item for item in (*calls, *prompt)):
        lacking = next((at for at, call in enumerate(calls) if "turn" not in call), None)
        if lacking is not None:
            return f"calls[{lacking}] has no turn (the other calls or messages have one)"
    scores = data.get("scores")
    wrong = None if scores is None else _wrong_fields(scores, SCORE_FIELDS, _REQUIRED_SCORES)
    if wrong is not None:
        return f"scores: {wrong}" if wrong.startswith("no ") else f"scores.{wrong}"
    return None


def score(case: EvalCase, calls: Sequence[dict[str, Any]] | None, content: str | None, status: Status) -> CaseResult:
    """The verdict on what the model proposed, and which kind of failure it is."""
    output = None if calls is None else [(c["tool"], c["arguments"]) for c in calls]
    verdict = case.check(output)
    refusals = [f"{c['tool']}: {c['gate']}: {c['message']}" for c in calls or () if c["gate"] != "accepted"]
    if status in REPLY_REFUSED:
        refusals.insert(0, f"the reply was refused: {status.value}")
    if refusals:  # the verdict follows the gates: a refused call never counts as the right one
        outcome, reason = REFUSED, "; ".join(refusals)
        if verdict.valid:
            reason += " (the checker alone would pass it)"
    elif verdict.valid:
        outcome, reason = PASSED, ""
    else:
        outcome, reason = MISTAKE, verdict.error_type
    return CaseResult(case.id, case.category, outcome, reason, list(calls or ()), content, status.value)


def _described(case: EvalCase, result: CaseResult) -> CaseResult:
    """The result with the case's prompt and expected calls, so reports need nothing but results.jsonl."""
    result.prompt = [m.to_dict() for m in case.messages]
    result.expected = case.expected
    return result


class _Recorder:
    """The model, and the last reply it gave: what BFCL scores, whatever tether then did with it."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = model.name
        self.reply: ModelReply | None = None

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.reply = await self.model.complete(request)
        return self.reply

    async def aclose(self) -> None:  # the caller's model outlives the case
        pass


class _Slots:
    """The caller's model, sending at most ``limit`` requests at a time, whoever asks.

    ``run_eval`` keeps exactly that many requests in flight while cases
    remain: everything else a case does (building its tools and agent,
    judging and scoring the reply, writing the result) happens while other
    requests are waited for.
    """

    def __init__(self, model: Model, limit: int) -> None:
        self.model = model
        self.name = model.name
        self._slots = asyncio.Semaphore(limit)

    def __getattr__(self, name: str) -> Any:  # what else the model offers (its output mode, say)
        return getattr(self.model, name)

    async def complete(self, request: ModelRequest) -> ModelReply:
        async with self._slots:
            reply = await self.model.complete(request)
        # Step aside before this reply is judged and scored: the request waiting for the slot is sent,
        # and replies that came in with this one are read and free their slots too (a reply takes two
        # turns of the event loop: the socket's callback, then its task). Measured on 200 cases at
        # --concurrency 16: 1.07x the ideal with three turns, 1.11x with one.
        for _ in range(_YIELDS):
            await asyncio.sleep(0)
        return reply

    async def aclose(self) -> None:  # the caller's model outlives the eval
        pass


def _proposed(
    case: EvalCase, reply: ModelReply | None, gates: dict[str, tuple[str, str]], status: Status
) -> list[dict[str, Any]] | None:
    """The calls of the reply as the model sent them, each with the gates' verdict."""
    if reply is None or not reply.tool_calls:
        return None
    unjudged = (status.value, "the reply was refused whole") if status in REPLY_REFUSED else ("accepted", "")
    return [
        {
            "tool": case.call_name(call.name) if isinstance(call.name, str) else repr(call.name),
            "arguments": call.arguments if isinstance(call.arguments, str) else None,
            "gate": gates.get(call.id if isinstance(call.id, str) else "", unjudged)[0],
            "message": gates.get(call.id if isinstance(call.id, str) else "", unjudged)[1],
        }
        for call in reply.tool_calls
    ]


async def run_case(
    model: Model,
    case: EvalCase,
    *,
    compat: Compat | None = None,
    system: str | None = None,
    model_settings: ModelSettings | None = None,
) -> CaseResult:
    """Ask the model once with the case's tools and score the calls it proposes.

    ``system`` is the system message of a case that has none; ``model_settings`` go with every request."""
    evaluate = getattr(case, "evaluate", None)
    if evaluate is not None:  # a case that runs itself: BFCL's multi-turn cases (tether.eval.multi_turn)
        ran: CaseResult = await evaluate(model, compat=compat, system=system, model_settings=model_settings)
        return ran
    started = time.perf_counter()
    gates: dict[str, tuple[str, str]] = {}

    def note(event: RunEvent) -> None:
        if event.kind == CALL_VALIDATED:
            gates[event.data["id"]] = ("accepted", "")
        elif event.kind == CALL_REJECTED:
            envelope = json.loads(event.data["result"] or "{}")
            message = (envelope.get("error") or {}).get("message", "")
            gates[event.data["id"]] = (event.data["outcome"], message)

    recorder = _Recorder(model)
    try:
        agent = Agent(
            recorder, case.tools(), compat=compat, propose_only=True, system=system, model_settings=model_settings
        )
        result = await agent.run(list(case.messages), on_event=note)
    except TetherError as exc:
        failed = CaseResult(case.id, case.category, ERROR, f"{type(exc).__name__}: {exc}", seconds=_since(started))
        return _described(case, failed)
    if result.status is Status.MODEL_ERROR:
        failed = CaseResult(
            case.id, case.category, ERROR, result.reason or "", status="model_error", seconds=_since(started)
        )
        return _described(case, failed)
    reply = recorder.reply
    calls = _proposed(case, reply, gates, result.status)
    scored = score(case, calls, reply.content if reply is not None else None, result.status)
    scored.seconds = _since(started)
    return _described(case, scored)


def _since(started: float) -> float:
    return time.perf_counter() - started


# ---------------------------------------------------------------- many cases


def read_results(out: Path) -> dict[str, CaseResult]:
    """The results already in ``out/results.jsonl`` (the last line per case wins; a torn last line is ignored).

    A line that holds no result is a ``DatasetError`` naming it (see the module docstring).
    """
    return read_results_file(out / RESULTS_FILE)


def read_results_file(path: Path) -> dict[str, CaseResult]:
    """The results in a ``results.jsonl`` file by case id, read as ``read_results`` reads them."""
    return {case_id: result for case_id, (_, result, _) in _lines_by_case(path)[1].items()}


def _lines_by_case(path: Path) -> tuple[int, dict[str, tuple[str, CaseResult, str]]]:
    """How many lines ``path`` has, and each case's last line with its result and where it is (see the module
    docstring).

    Lines end at ``\\n`` only: JSON leaves U+2028, U+2029 and U+0085 in a
    string as they are, and ``str.splitlines`` would end a line at each.
    """
    found: dict[str, tuple[str, CaseResult, str]] = {}
    if not path.exists():
        return 0, found
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline; else a line a killed process may have torn
    start = 0  # where the line starts in the file
    for number, raw in enumerate([*lines, last] if last else lines, 1):
        where, torn = f"{path}:{number}", number > len(lines)
        try:
            line = raw.decode("utf-8")
            value = nesting.loads(line, nesting.MAX_REPLY_DEPTH) if line.strip() else None
        except UnicodeDecodeError as exc:
            if torn:
                break  # cut in the middle of a character
            raise DatasetError(f"{where}: not UTF-8 text (byte {start + exc.start})") from None
        except json.JSONDecodeError as exc:
            if torn:
                break  # cut short
            raise DatasetError(f"{where}: not JSON ({exc.msg})") from None
        except ValueError as exc:  # nested too deep, or not text
            raise DatasetError(f"{where}: {exc}") from None
        start += len(raw) + 1
        if line.strip():
            result = CaseResult.from_dict(value, where)
            found[result.id] = (line, result, where)
    return len(lines) + bool(last), found


def _keep_one_line_per_case(
    path: Path, lines: int, found: dict[str, tuple[str, CaseResult, str]], again: set[str]
) -> None:
    """Leave ``path`` one line per case, none for the cases in ``again`` (they run again).

    The file is replaced whole (a new file renamed over it), so a process
    killed meanwhile leaves the old file or the new one, never half of one;
    one that cannot be written is a ``ConfigurationError``, before any case is sent.
    """
    kept = [line for case_id, (line, _, _) in found.items() if case_id not in again]
    if len(kept) == lines:
        return  # every line a case's only one, and none to run again
    fresh = path.with_name(f".{RESULTS_FILE}.new")
    try:
        with fresh.open("w", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in kept))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(fresh, path)
    except OSError as exc:
        if fresh.is_file():
            fresh.unlink()  # half of a new file; the old one is as it was
        raise ConfigurationError(f"cannot write the results in {path.parent}: {exc.strerror}") from None


def _check_same_eval(found: dict[str, tuple[str, CaseResult, str]], cases: Sequence[EvalCase]) -> None:
    """Refuse an earlier result whose case has another category here: another eval's results with the
    same case ids (a tether eval file renamed, or another one) would be taken for this one's."""
    for case in cases:
        if case.id in found:
            _, earlier, where = found[case.id]
            if earlier.category != case.category:
                raise DatasetError(
                    f"{where}: case {case.id!r} is of category {earlier.category!r} there and {case.category!r} "
                    "here: the results of another eval? give this one another --out"
                )


class ResultsFile:
    """Appends one line per scored case, each in one ``write`` on an ``O_APPEND`` file.

    A line is in the file (the kernel's page cache) as soon as its case is
    scored, so a process killed even with SIGKILL loses no scored case and a
    later run sends none again; there is no buffer to flush. ``close`` syncs
    the file to disk once, for a machine that goes down after the eval.
    """

    def __init__(self, out: Path) -> None:
        """Open (or make) ``out/results.jsonl``; a directory or file that cannot be written is a
        ``ConfigurationError`` naming it, raised before any case is sent."""
        try:
            out.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(out / RESULTS_FILE, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigurationError(f"cannot write the results in {out}: {exc.strerror}") from None
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")  # end a line torn by a killed process before appending

    def write(self, result: CaseResult) -> None:
        os.write(self._fd, (json.dumps(result.to_dict(), ensure_ascii=False) + "\n").encode())

    def close(self) -> None:
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)


async def run_eval(
    model: Model,
    cases: Iterable[EvalCase],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    out: Path | None = None,
    compat: Compat | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    system: str | None = None,
    model_settings: ModelSettings | None = None,
    record: EvalRecord | None = None,
) -> list[CaseResult]:
    """Run and score every case not already scored in ``out``; all results, earlier ones included.

    Exactly ``concurrency`` requests are in flight while cases remain: a
    semaphore guards the request itself (``_Slots``), and twice as many
    workers take cases from one queue, so the next cases are ready to send
    the moment a slot frees. ``on_start(to_run, already_scored)`` is called once before
    the first case is sent, ``on_result`` after each case is scored (a
    progress bar's hooks). ``system`` is the system message of the cases that have none,
    ``model_settings`` go with every request (``tether eval -s/-o``). ``record`` says what the eval is run
    with (``tether.eval.record``): ``out`` keeps it in ``eval.json``, and results made with another are a
    ``ConfigurationError`` before anything is sent or rewritten.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    cases = list(cases)
    check_cases(cases)
    lines, earlier = _lines_by_case(out / RESULTS_FILE) if out is not None else (0, {})
    _check_same_eval(earlier, cases)
    done = {i: r for i, (_, r, _) in earlier.items() if r.outcome != ERROR}
    if out is not None and record is not None and check_record(out, record, bool(done)) != record:
        write_record(out, record)
    todo = deque(case for case in cases if case.id not in done)
    if on_start is not None:
        on_start(len(todo), len(cases) - len(todo))
    if out is not None and lines:
        _keep_one_line_per_case(out / RESULTS_FILE, lines, earlier, {case.id for case in todo})
    sink = ResultsFile(out) if out is not None else None
    limited = _Slots(model, concurrency)
    fresh: dict[str, CaseResult] = {}

    async def worker() -> None:
        while todo:
            case = todo.popleft()
            result = await run_case(limited, case, compat=compat, system=system, model_settings=model_settings)
            fresh[case.id] = result
            if sink is not None:
                sink.write(result)
            if on_result is not None:
                on_result(result)

    try:
        await asyncio.gather(*(worker() for _ in range(min(2 * concurrency, max(1, len(todo))))))
    finally:
        if sink is not None:
            sink.close()
    return [fresh.get(c.id) or done[c.id] for c in cases]


def check_cases(cases: Sequence[EvalCase]) -> None:
    """Refuse an eval of no cases (it would score a silent 0 of 0), or with a case id twice (results are by id)."""
    if not cases:
        raise DatasetError("no cases to run")
    counts = Counter(case.id for case in cases)
    twice = sorted(case_id for case_id, n in counts.items() if n > 1)
    if twice:
        raise DatasetError(
            f"case id(s) {', '.join(map(repr, twice[:5]))} appear more than once; results are kept by id"
        )


# ---------------------------------------------------------------- the summary


@dataclass(frozen=True, slots=True)
class Row:
    """One category's counts in a summary: cases, passed, mistakes, refused and errors."""

    category: str
    cases: int
    passed: int
    mistakes: int
    refused: int
    errors: int

    @property
    def accuracy(self) -> float | None:
        """Passed over the cases that could be scored (errors left out), or None when none could."""
        scored = self.cases - self.errors
        return self.passed / scored if scored else None

    def to_dict(self) -> dict[str, Any]:
        """The row as plain JSON data."""
        return {
            "category": self.category,
            "cases": self.cases,
            "passed": self.passed,
            "mistakes": self.mistakes,
            "refused": self.refused,
            "errors": self.errors,
        }


def summarize(results: Iterable[CaseResult]) -> list[Row]:
    """One row per category, in the order categories first appear, then a total."""
    counts: dict[str, Counter[str]] = {}
    for r in results:
        counts.setdefault(r.category, Counter())[r.outcome] += 1
    rows = [Row(cat, sum(c.values()), c[PASSED], c[MISTAKE], c[REFUSED], c[ERROR]) for cat, c in counts.items()]
    if len(rows) > 1:
        rows.append(
            Row(
                "total",
                sum(r.cases for r in rows),
                sum(r.passed for r in rows),
                sum(r.mistakes for r in rows),
                sum(r.refused for r in rows),
                sum(r.errors for r in rows),
            )
        )
    return rows


def table(rows: Sequence[Row]) -> str:
    """The summary as aligned text; accuracy leaves infrastructure errors out."""
    head = ("category", "cases", "passed", "accuracy", "mistakes", "refused", "errors")
    body = [
        (
            r.category,
            str(r.cases),
            str(r.passed),
            "-" if r.accuracy is None else f"{100 * r.accuracy:.1f}%",
            str(r.mistakes),
            str(r.refused),
            str(r.errors),
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    lines = []
    for cells in (head, *body):
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        )
    return "\n".join(lines)
