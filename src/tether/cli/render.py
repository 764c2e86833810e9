"""Readable, one-line-per-fact rendering of run events for the terminal."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tether.runner import (
    APPROVAL_REQUESTED,
    CALL_EXECUTED,
    CALL_REJECTED,
    MODEL_REPLIED,
    RUN_STARTED,
    STEP_STARTED,
    TEXT,
    RunEvent,
    RunResult,
)

SHORT = 120


def short(text: str, limit: int = SHORT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result_summary(content: str) -> str:
    try:
        data = json.loads(content)
    except ValueError:
        return short(content)
    if data.get("ok"):
        result = data.get("result")
        return short(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
    return short(str(data.get("error", {}).get("message", "")))


class Renderer:
    def __init__(self, echo: Callable[..., Any], stream: bool = False) -> None:
        self.echo = echo
        self.stream = stream
        self._streamed = False

    def __call__(self, event: RunEvent) -> None:
        data = event.data
        if event.kind == RUN_STARTED:
            self.echo(f"run {event.run_id}")  # first, so a run that dies can still be found
        elif event.kind == STEP_STARTED:
            self.echo(f"step {event.step}")
        elif event.kind == TEXT and self.stream:
            self.echo(data["text"], nl=False)
            self._streamed = True
        elif event.kind == MODEL_REPLIED:
            if self._streamed:
                self.echo("")
                self._streamed = False
            if "error" in data:
                self.echo(f"  model error: {short(data['error'])}")
            else:
                calls = f", {data['tool_calls']} call(s)" if data["tool_calls"] else ""
                self.echo(f"  model: finish_reason={data['finish_reason']}{calls}")
        elif event.kind in (CALL_EXECUTED, CALL_REJECTED):
            summary = _result_summary(data["result"]) if "result" in data else ""
            verb = "ran" if event.kind == CALL_EXECUTED else "refused"
            self.echo(f"  call {data['id']} {data['tool']}: {verb} -> {data['outcome']} {summary}".rstrip())
        elif event.kind == APPROVAL_REQUESTED:
            why = f": {data['reason']}" if data.get("reason") else ""
            self.echo(f"  call {data['id']} {data['tool']}: waiting for approval{why}")

    def finish(self, result: RunResult) -> None:
        if result.output is not None:
            self.echo(f"answer: {result.output}")
        reason = f" ({result.reason})" if result.reason else ""
        self.echo(
            f"run {result.run_id}: {result.status.value}{reason}; "
            f"{len(result.steps)} step(s), {result.usage.total_tokens} tokens"
        )
