"""Readable, one-line-per-fact rendering of run events for the terminal.

Each fact is printed once: a streamed answer is not repeated as ``answer:``,
and why a run failed is left to the one ``error:`` line on stderr.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from tether.core.events import (
    APPROVAL_REQUESTED,
    CALL_EXECUTED,
    CALL_REJECTED,
    CALL_VALIDATED,
    MODEL_REPLIED,
    RUN_STARTED,
    STEP_STARTED,
    TEXT,
    RunEvent,
)
from tether.core.machine import Status
from tether.core.redact import redact
from tether.core.report import RunResult

SHORT = 120
SHORT_VALUE = 40  # an argument's string value longer than this is cut, saying how long it was


def short(text: str, limit: int = SHORT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shortened(value: Any) -> Any:
    if isinstance(value, str) and len(value) > SHORT_VALUE:
        return f"{value[: SHORT_VALUE - 1]}…({len(value)} chars)"
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    return value


def arguments_preview(arguments: dict[str, Any] | None) -> str:
    """A call's arguments on one line: secrets redacted, long values cut; empty when not a JSON object."""
    if arguments is None:
        return ""
    return short(json.dumps(_shortened(redact(arguments)), ensure_ascii=False))


def _result_summary(content: str) -> str:
    try:
        data = json.loads(content)
    except ValueError:
        return short(content)
    if data.get("ok"):
        result = data.get("result")
        return short(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
    return short(str(data.get("error", {}).get("message", "")))


def call_line(data: dict[str, Any], arguments: dict[str, Any] | None) -> str:
    """``call ID TOOL {arguments}``, the start of every line about a call."""
    preview = arguments_preview(arguments)
    return f"call {data['id']} {data['tool']}" + (f" {preview}" if preview else "")


def _indented(echo: Callable[..., Any], line: str, **options: Any) -> Any:
    return echo("    " + line if line else line, **options)


# Control characters but tab and newline, as visible escapes: a model's answer (or a tool's result, an argument)
# printed raw could move the cursor, rewrite what is on the screen or retitle the terminal.
_VISIBLE: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
# And the bidi overrides, embeddings and isolates: they reorder what follows on the screen, so that an argument a
# person approves (``"\u202emoc.live@bob"``) would read as another value than it is.
_VISIBLE |= {c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
# And the invisible ones: the direction marks (which move the punctuation beside them), the zero-width space, the
# word joiner and invisible operators, the byte order mark, with which "payee" and "pay\u200bee" look alike. The
# zero-width (non-)joiners are left alone: scripts and emoji are written with them.
_VISIBLE |= {c: f"\\u{c:04x}" for c in (0x061C, 0x200B, 0x200E, 0x200F, *range(0x2060, 0x2065), 0xFEFF)}


def visible(text: str) -> str:
    """``text`` with its control characters (an escape sequence's ESC among them), bidi controls and invisible
    characters shown as escapes, not obeyed."""
    return text.translate(_VISIBLE)


class Renderer:
    def __init__(self, echo: Callable[..., Any], stream: bool = False) -> None:
        self.echo: Callable[..., Any] = lambda line="", **options: echo(visible(line), **options)
        self.stream = stream
        self._streaming: list[str] = []  # this step's streamed text so far
        self._streamed = ""  # the last step's whole streamed text
        self._arguments: dict[str, dict[str, Any] | None] = {}  # call id -> validated arguments
        self._top: str | None = None  # the run this renders (its first event's); others are its child runs

    def __call__(self, event: RunEvent) -> None:
        data = event.data
        if self._top is None:
            self._top = event.run_id
        # A sub-agent's child run reports here too: its lines are indented under the call that drives it.
        echo = self.echo if event.run_id == self._top else functools.partial(_indented, self.echo)
        if event.kind == RUN_STARTED:
            echo(f"run {event.run_id}")  # first, so a run that dies can still be found
        elif event.kind == STEP_STARTED:
            echo(f"step {event.step}")
        elif event.kind == TEXT and self.stream:
            self.echo(data["text"], nl=False)
            self._streaming.append(data["text"])
        elif event.kind == MODEL_REPLIED:
            if self._streaming:
                self.echo("")
            self._streamed, self._streaming = "".join(self._streaming), []
            if "error" in data:
                echo("  model: no reply")  # the error itself is the run's reason, printed once at the end
            else:
                calls = f", {data['tool_calls']} call(s)" if data["tool_calls"] else ""
                fallback = f", by {data.get('model')} (fallback)" if data.get("skipped") else ""
                echo(f"  model: finish_reason={data['finish_reason']}{calls}{fallback}")
        elif event.kind == CALL_VALIDATED:
            self._arguments[data["id"]] = data.get("arguments")
        elif event.kind in (CALL_EXECUTED, CALL_REJECTED):
            summary = _result_summary(data["result"]) if "result" in data else ""
            verb = "ran" if event.kind == CALL_EXECUTED else "refused"
            arguments = self._arguments.get(data["id"], data.get("arguments"))
            echo(f"  {call_line(data, arguments)}: {verb} -> {data['outcome']} {summary}".rstrip())
        elif event.kind == APPROVAL_REQUESTED:
            why = f": {data['reason']}" if data.get("reason") else ""
            echo(f"  {call_line(data, data.get('arguments'))}: waiting for approval{why}")

    def finish(self, result: RunResult) -> None:
        if result.output is not None and not (self.stream and self._streamed == result.output):
            self.echo(f"answer: {result.output}")
        # A failed run's reason goes to stderr, once; a paused run's says what it waits for.
        failed = result.status.terminal and result.status is not Status.COMPLETED
        reason = f" ({result.reason})" if result.reason and not failed else ""
        self.echo(
            f"run {result.run_id}: {result.status.value}{reason}; "
            f"{len(result.steps)} step(s), {result.usage.total_tokens} tokens"
        )
