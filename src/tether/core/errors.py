"""tether's own exceptions, every one of them, in one tree.

Foreign errors (aiohttp, json, sqlite3, psycopg, the MCP SDK) are mapped to
the most specific one below with ``raise ... from exc``, so callers catch
only these. Each class carries the exit code the CLI ends with
(``exit_code``); ``tree()`` renders the tree below from the classes, and a
test keeps the two equal::

    TetherError (exit 1)  An error tether raises on purpose
    ├── ConfigurationError (exit 3)  A setting is missing or wrong; says what to set
    │   ├── KeyRefused (exit 3)  A Temporal payload this process cannot decrypt, or not encrypted while it holds a key
    │   ├── DatasetError (exit 3)  An eval dataset that cannot be read, or that names what it may not (a toolset file)
    │   └── MCPServerError (exit 3)  An MCP server that cannot be started, reached or used as a toolset
    ├── ToolDefinitionError (exit 3)  A @tool or raw schema cannot be used
    ├── TransitionError (exit 1)  An event the run state machine does not allow
    ├── RunPoisoned (exit 1)  The machine refused input after an earlier error
    ├── ApprovalMismatch (exit 7)  A decision (approval or reconciliation) names a call or arguments not pending
    │   └── NotWaiting (exit 7)  A Temporal run has no such call waiting
    ├── RunFailed (exit 1)  ``RunResult.raise_for_status()`` on a run that did not complete
    ├── StoreError (exit 3)  The run store cannot be opened, read or written
    │   ├── NoStore (exit 3)  A SQLite run store named to be read is not there (nothing is made in its place)
    │   ├── RunNotFound (exit 3)  No such run or conversation (or not the caller's)
    │   ├── AmbiguousRun (exit 3)  A run id prefix that several runs start with
    │   ├── LeaseHeld (exit 5)  A live driver holds the run
    │   └── TamperedRun (exit 6)  Its rows fail the audit check; nothing of it is acted on
    └── ModelError (exit 4)  The model endpoint failed to give a usable reply
        ├── ModelConnectionError (exit 4)  Could not connect
        ├── ModelTimeout (exit 4)  Connect or read timed out
        ├── ModelResponseError (exit 4)  Body or stream is not a usable reply
        │   └── ReplyTooLarge (exit 4)  A reply grew past the adapter's ``max_reply_bytes``; it was read no further
        ├── ModelHTTPError (exit 4)  Non-2xx status
        │   ├── AuthenticationError (exit 4)  401 / 403, never retried
        │   ├── RateLimited (exit 4)  429, retried honouring Retry-After
        │   └── ServerError (exit 4)  5xx, retried with backoff
        └── FallbackExhausted (exit 4)  Every model of a ``FallbackModel`` failed; names each failure

A run that ends ``model_error`` exits 17 (its status's code); a
``ModelError`` raised outside a run (``tether eval`` on an unreachable
endpoint, say) exits 4.
"""

from __future__ import annotations

from typing import ClassVar, Protocol


class TetherError(Exception):
    """An error tether raises on purpose."""

    exit_code: ClassVar[int] = 1


def tree() -> str:
    """The tree of ``TetherError`` and its subclasses, each with its exit code and its summary line."""
    lines: list[str] = []

    def walk(cls: type[TetherError], prefix: str, branch: str) -> None:
        summary = (cls.__doc__ or "").strip().splitlines()[0].rstrip(".")
        lines.append(f"{branch}{cls.__name__} (exit {cls.exit_code})  {summary}")
        children = [c for c in cls.__subclasses__() if c.__module__.startswith("tether.")]  # not an application's
        for index, child in enumerate(children):
            last = index == len(children) - 1
            walk(child, prefix + ("    " if last else "│   "), prefix + ("└── " if last else "├── "))

    walk(TetherError, "", "")
    return "\n".join(lines)


class ConfigurationError(TetherError):
    """A setting is missing or wrong; says what to set."""

    exit_code: ClassVar[int] = 3


class KeyRefused(ConfigurationError):
    """A Temporal payload this process cannot decrypt, or not encrypted while it holds a key.

    Under a key it does not hold, altered after it was encrypted, encrypted while the process holds no key, or not
    encrypted while it holds one (``plaintext`` in ``TETHER_TEMPORAL_KEY`` reads those).
    """


class DatasetError(ConfigurationError):
    """An eval dataset that cannot be read, or that names what it may not (a toolset file).

    A dataset names registered toolsets only, unless ``--allow-toolset-files``.
    """


class MCPServerError(ConfigurationError):
    """An MCP server that cannot be started, reached or used as a toolset."""


class ToolDefinitionError(TetherError):
    """A @tool or raw schema cannot be used."""

    exit_code: ClassVar[int] = 3


class TransitionError(TetherError):
    """An event the run state machine does not allow."""

    def __init__(self, status: str, event: str) -> None:
        super().__init__(f"event {event} is not allowed in status {status}")
        self.status = status
        self.event = event


class RunPoisoned(TetherError):
    """The machine refused input after an earlier error."""


class ApprovalMismatch(TetherError):
    """A decision (approval or reconciliation) names a call or arguments not pending."""

    exit_code: ClassVar[int] = 7


class NotWaiting(ApprovalMismatch):
    """A Temporal run has no such call waiting.

    Refused by the workflow's update validator, before anything enters the run's history.
    """


class _Named(Protocol):
    @property
    def value(self) -> str: ...


class _Ended(Protocol):
    """What ``RunFailed`` reads of a run's result (``tether.core.report.RunResult``)."""

    @property
    def run_id(self) -> str: ...

    @property
    def status(self) -> _Named: ...

    @property
    def reason(self) -> str | None: ...


class RunFailed(TetherError):
    """``RunResult.raise_for_status()`` on a run that did not complete.

    A pause (for an approval, a reconciliation) is not a completion either.
    """

    def __init__(self, result: _Ended) -> None:
        why = f": {result.reason}" if result.reason else ""
        super().__init__(f"run {result.run_id} ended {result.status.value}{why}")
        self.result = result


class StoreError(TetherError):
    """The run store cannot be opened, read or written."""

    exit_code: ClassVar[int] = 3


class NoStore(StoreError):
    """A SQLite run store named to be read is not there (nothing is made in its place)."""


class RunNotFound(StoreError):
    """No such run or conversation (or not the caller's)."""


class AmbiguousRun(StoreError):
    """A run id prefix that several runs start with."""


class LeaseHeld(StoreError):
    """A live driver holds the run."""

    exit_code: ClassVar[int] = 5

    def __init__(self, message: str, until: float | None = None) -> None:
        super().__init__(message)
        self.until = until  # when the holder's lease runs out, if known


class TamperedRun(StoreError):
    """Its rows fail the audit check; nothing of it is acted on.

    Raised for a run, or a conversation (its row, its chain of turns, any turn's rows).
    """

    exit_code: ClassVar[int] = 6


class ModelError(TetherError):
    """The model endpoint failed to give a usable reply."""

    exit_code: ClassVar[int] = 4
    retryable: ClassVar[bool] = False


class ModelConnectionError(ModelError):
    """Could not connect."""

    retryable: ClassVar[bool] = True


class ModelTimeout(ModelError):
    """Connect or read timed out."""

    retryable: ClassVar[bool] = True


class ModelResponseError(ModelError):
    """Body or stream is not a usable reply."""


class ReplyTooLarge(ModelResponseError):
    """A reply grew past the adapter's ``max_reply_bytes``; it was read no further."""

    def __init__(self, max_bytes: int, adapter: str = "the model adapter") -> None:
        super().__init__(
            f"the reply is larger than max_reply_bytes ({max_bytes} bytes); if a real reply is that large, "
            f"pass a larger max_reply_bytes to {adapter}"
        )
        self.max_bytes = max_bytes
        self.adapter = adapter


class ModelHTTPError(ModelError):
    """Non-2xx status."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


class AuthenticationError(ModelHTTPError):
    """401 / 403, never retried."""


class RateLimited(ModelHTTPError):
    """429, retried honouring Retry-After."""

    retryable: ClassVar[bool] = True


class ServerError(ModelHTTPError):
    """5xx, retried with backoff."""

    retryable: ClassVar[bool] = True


class FallbackExhausted(ModelError):
    """Every model of a ``FallbackModel`` failed; names each failure.

    ``errors`` holds ``(model name, error)`` in the order the models were asked.
    """

    def __init__(self, errors: list[tuple[str, ModelError]]) -> None:
        tried = "; ".join(f"{name}: {type(exc).__name__}: {exc}" for name, exc in errors)
        super().__init__(f"every model failed ({tried})")
        self.errors = errors
