"""Scripted models for AgentDojo: ``oracle`` and ``gullible``, no network, deterministic.

They measure the gates, not a model. Each case asks the model for a model of
its own (``for_case(scenario)``): a ``Scenario`` is what the case knows, the
user task's ground-truth calls and answer (AgentDojo's, computed on the
case's environment before anything runs, as its ``GroundTruthPipeline``
does), and for an attacked case the injection task's calls and the texts
the attack put in the environment.

- ``oracle`` makes the ground-truth calls one per step, whatever the results
  say (a denied call is not retried), then answers with the task's
  ground-truth output: with no gate its utility is AgentDojo's own ceiling.
- ``gullible`` is the oracle, except that the first time a tool result shows
  it one of the injected texts, it makes the injection task's ground-truth
  calls first, then goes on with the user's: an agent that obeys every
  injection it reads. It finds the text in the result as the model reads it
  (tether's envelope, its JSON or a YAML text), whitespace aside.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.core.messages import Message, ModelReply, Usage, WireToolCall
from tether.models.base import ModelRequest

Call = tuple[str, dict[str, Any]]  # (function, arguments)


@dataclass(frozen=True, slots=True)
class Scenario:
    """What a scripted model may know of one case."""

    user_calls: tuple[Call, ...]
    user_output: str
    injection_calls: tuple[Call, ...] = ()
    injection_output: str = ""
    injected_texts: tuple[str, ...] = field(default_factory=tuple)


def squeeze(text: str) -> str:
    """``text`` with every run of whitespace one space, for finding one text inside another."""
    return re.sub(r"\s+", " ", text).strip()


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def readable_text(content: str) -> str:
    """A tool message as a reader takes it in: the envelope's result, its YAML unfolded or its Python literal
    read (AgentDojo shows a dict result as ``str(dict)``, escapes and all), whitespace squeezed."""
    yaml: Any = importlib.import_module("yaml")  # AgentDojo's own dependency (PyYAML has no stubs here)

    pieces = [content]
    try:
        result = json.loads(content).get("result")
    except (ValueError, AttributeError):
        result = None
    if result is not None:
        pieces.extend(_strings(result))
        if isinstance(result, str):
            with contextlib.suppress(yaml.YAMLError):
                pieces.extend(_strings(yaml.load(result, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))))
            if result[:1] in "{[(":
                with contextlib.suppress(ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    pieces.extend(_strings(ast.literal_eval(result)))
    return squeeze("\n".join(pieces))


class _CaseModel:
    """One case's scripted replies."""

    def __init__(self, name: str, scenario: Scenario, gullible: bool) -> None:
        self.name = name
        self.scenario = scenario
        self.gullible = gullible
        self.hijacked = False
        self._queue: deque[Call] = deque(scenario.user_calls)
        self._needles = [squeeze(t) for t in scenario.injected_texts if squeeze(t)]
        self._made = 0
        self._read = 0  # messages of the transcript already looked at

    def _sees_injection(self, messages: Sequence[Message]) -> bool:
        fresh, self._read = messages[self._read :], len(messages)
        texts = [readable_text(m.content) for m in fresh if m.role == "tool" and isinstance(m.content, str)]
        return any(needle in text for text in texts for needle in self._needles)

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.gullible and not self.hijacked and self._needles and self._sees_injection(request.messages):
            self.hijacked = True
            self._queue.extendleft(reversed(self.scenario.injection_calls))
        if self._queue:
            name, arguments = self._queue.popleft()
            self._made += 1
            call = WireToolCall(f"call_{self._made}", "function", name, json.dumps(arguments))
            return ModelReply(choices=1, finish_reason="tool_calls", tool_calls=(call,), usage=Usage())
        answer = self.scenario.user_output
        if self.hijacked and self.scenario.injection_output:
            answer = f"{answer}\n{self.scenario.injection_output}".strip()
        return ModelReply(choices=1, finish_reason="stop", content=answer, usage=Usage())

    async def aclose(self) -> None:
        return None


class ScriptedAgentDojoModel:
    """``oracle`` or ``gullible``: a factory of one scripted model per case (``for_case``)."""

    def __init__(self, kind: str) -> None:
        if kind not in SCRIPTED:
            raise ValueError(f"no scripted model {kind!r} (there are: {', '.join(SCRIPTED)})")
        self.name = kind

    def for_case(self, scenario: Scenario) -> _CaseModel:
        return _CaseModel(self.name, scenario, gullible=self.name == "gullible")

    async def complete(self, request: ModelRequest) -> ModelReply:
        raise RuntimeError(f"the {self.name} model answers AgentDojo cases only (for_case)")

    async def aclose(self) -> None:
        return None


SCRIPTED = ("oracle", "gullible")

__all__ = ["SCRIPTED", "Scenario", "ScriptedAgentDojoModel", "readable_text", "squeeze"]
