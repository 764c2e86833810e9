"""What a tool may know about the run that called it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tether.core.quick import quick_init

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
        """Whether the principal holds every one of ``scopes`` (or all scopes)."""
        return ALL_SCOPES in self.scopes or scopes <= self.scopes


LOCAL_PRINCIPAL = Principal("local")


if TYPE_CHECKING:  # a default (PEP 696): a bare ToolContext means ToolContext[Any] to a type checker
    from typing_extensions import TypeVar as DefaultedTypeVar

    DepsT = DefaultedTypeVar("DepsT", default=Any)
else:  # at run time the default changes nothing, and typing_extensions costs milliseconds to import
    DepsT = TypeVar("DepsT")


@quick_init
@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT]):
    """Injected into a tool that declares a parameter of this type (``ToolContext`` or ``ToolContext[Deps]``).

    ``idempotency_key`` is ``run_id:call_id``: pass it to external systems so
    a retried call cannot take effect twice there. ``deps`` is what the
    application passed as ``agent.run(..., deps=...)``: never shown to the
    model, never stored.

    ``mark_untrusted()`` says that this call's result holds text someone
    other than the run's principal could have written (a comment by another
    user, a fetched page). The result then taints the run exactly as a tool
    declared ``untrusted_output=True`` does for every result: from then on,
    each side-effecting call needs approval. Mark before returning or
    raising; a mark cannot be taken back. The mark is not kept in the
    ledger: a side-effecting call's result recovered from it after a crash
    taints only if the tool is declared ``untrusted_output=True``.
    """

    run_id: str
    call_id: str
    principal: Principal
    deadline_at: float | None = None
    deps: DepsT = None  # type: ignore[assignment]  # None when the run was given no deps
    _marks: set[str] = field(default_factory=set, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        """A key unique to this call (run id and call id): pass it on so a retried call is done once."""
        return f"{self.run_id}:{self.call_id}"

    def mark_untrusted(self) -> None:
        """This call's result holds text the principal did not write: it taints the run."""
        self._marks.add(UNTRUSTED)

    @property
    def untrusted(self) -> bool:
        """Whether this call's result was marked untrusted (``mark_untrusted``)."""
        return UNTRUSTED in self._marks


UNTRUSTED = "untrusted"


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What a run's instructions, output validators and history processors know of it (``RunContext[Deps]``).

    Made for each use, before each model request (``step`` is the request's
    number, from 1) or for each answer: ``deps`` and ``principal`` are the
    run's (``agent.run(..., deps=..., principal=...)``); a resumed run gets
    them again from ``agent.resume``.
    """

    run_id: str
    principal: Principal
    step: int
    deps: DepsT = None  # type: ignore[assignment]  # None when the run was given no deps
