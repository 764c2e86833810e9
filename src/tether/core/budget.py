"""Budgets and run policy as value objects, each default defined once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.core.errors import ConfigurationError

DEFAULT_MAX_STEPS = 8
DEFAULT_MAX_TOOL_CALLS = 32
DEFAULT_MAX_REPAIRS = 1
DEFAULT_LOOP_LIMIT = 3
DEFAULT_FALLBACK_ANSWER = "I could not complete this request with the available tools."


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits checked before every model request and before executing calls.

    ``None`` means unlimited. ``deadline_seconds`` counts from the start of
    the run. ``max_repairs`` is how many consecutive replies with invalid
    calls the model may try to repair; ``loop_limit`` is how many times in a
    row the same call may be requested before it is refused.
    """

    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_calls: int | None = DEFAULT_MAX_TOOL_CALLS
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None
    deadline_seconds: float | None = None
    max_repairs: int = DEFAULT_MAX_REPAIRS
    loop_limit: int = DEFAULT_LOOP_LIMIT

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ConfigurationError("max_steps must be at least 1")
        if self.max_repairs < 0:
            raise ConfigurationError("max_repairs must not be negative")
        if self.loop_limit < 2:
            raise ConfigurationError("loop_limit must be at least 2")


@dataclass(frozen=True, slots=True)
class Compat:
    """Per-provider leniency, off by default.

    There is deliberately no switch for tool calls that arrive with
    ``finish_reason="length"``: truncated output is never executed.
    """

    allow_stop_with_tool_calls: bool = False
    synthesize_missing_ids: bool = False


@dataclass(frozen=True, slots=True)
class RunConfig:
    budget: Budget = field(default_factory=Budget)
    compat: Compat = field(default_factory=Compat)
    fallback_answer: str = DEFAULT_FALLBACK_ANSWER

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies every field and costs more than a whole checkpoint.
        b, c = self.budget, self.compat
        return {
            "budget": {name: getattr(b, name) for name in b.__dataclass_fields__},
            "compat": {name: getattr(c, name) for name in c.__dataclass_fields__},
            "fallback_answer": self.fallback_answer,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        return cls(
            budget=Budget(**data["budget"]),
            compat=Compat(**data["compat"]),
            fallback_answer=data["fallback_answer"],
        )
