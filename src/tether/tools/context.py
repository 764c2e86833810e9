"""What a tool may know about the run that called it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic

from typing_extensions import TypeVar  # a default (PEP 696): a bare ToolContext means ToolContext[Any]

ALL_SCOPES = "*"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a run acts for. Tools are offered only if their scopes are held.

    The scope ``"*"`` holds every scope; it is the default for a local,
    single-user run.
    """

    id: str
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({ALL_SCOPES}))
    roles: frozenset[str] = frozenset()

    def allows(self, scopes: frozenset[str]) -> bool:
        return ALL_SCOPES in self.scopes or scopes <= self.scopes


LOCAL_PRINCIPAL = Principal("local")


DepsT = TypeVar("DepsT", default=Any)


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT]):
    """Injected into a tool that declares a parameter of this type (``ToolContext`` or ``ToolContext[Deps]``).

    ``idempotency_key`` is ``run_id:call_id``: pass it to external systems so
    a retried call cannot take effect twice there. ``deps`` is what the
    application passed as ``agent.run(..., deps=...)``: never shown to the
    model, never stored.
    """

    run_id: str
    call_id: str
    principal: Principal
    deadline_at: float | None = None
    deps: DepsT = None  # type: ignore[assignment]  # None when the run was given no deps

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.call_id}"
