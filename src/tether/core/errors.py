"""tether's own exceptions.

Foreign errors (aiohttp, json, sqlite3) are mapped to the most specific one
below with ``raise ... from exc``, so callers catch only these::

    TetherError
    ├── ConfigurationError      a setting is missing or wrong; says what to set
    ├── ToolDefinitionError     a @tool or raw schema cannot be used
    ├── TransitionError         an event the run state machine does not allow
    ├── RunPoisoned             the machine refused input after an earlier error
    ├── ApprovalMismatch        a decision names a call or arguments not pending (exit 7)
    ├── StoreError              the run store cannot be opened, read or written (exit 3)
    │   ├── RunNotFound             no such run or conversation (or not the caller's)
    │   ├── AmbiguousRun            a run id prefix that several runs start with
    │   ├── LeaseHeld               a live driver holds the run (exit 5)
    │   └── TamperedRun             its rows fail the audit check; nothing of it is acted on (exit 6)
    └── ModelError              the model endpoint failed to give a usable reply
        ├── ModelConnectionError    could not connect
        ├── ModelTimeout            connect or read timed out
        ├── ModelResponseError      body or stream is not a chat completion
        │   └── ReplyTooLarge           grew past the adapter's max_reply_bytes
        └── ModelHTTPError          non-2xx status
            ├── AuthenticationError 401 / 403, never retried
            ├── RateLimited         429, retried honouring Retry-After
            └── ServerError         5xx, retried with backoff
"""

from __future__ import annotations

from typing import ClassVar


class TetherError(Exception):
    """Base of every error tether raises on purpose."""

    exit_code: ClassVar[int] = 1


class ConfigurationError(TetherError):
    exit_code: ClassVar[int] = 3


class ToolDefinitionError(TetherError):
    exit_code: ClassVar[int] = 3


class TransitionError(TetherError):
    def __init__(self, status: str, event: str) -> None:
        super().__init__(f"event {event} is not allowed in status {status}")
        self.status = status
        self.event = event


class RunPoisoned(TetherError):
    pass


class ApprovalMismatch(TetherError):
    """A decision (approval or reconciliation) names no pending call, or other arguments."""

    exit_code: ClassVar[int] = 7


class ModelError(TetherError):
    exit_code: ClassVar[int] = 4
    retryable: ClassVar[bool] = False


class ModelConnectionError(ModelError):
    retryable: ClassVar[bool] = True


class ModelTimeout(ModelError):
    retryable: ClassVar[bool] = True


class ModelResponseError(ModelError):
    pass


class ReplyTooLarge(ModelResponseError):
    """A reply grew past the adapter's ``max_reply_bytes`` while it was read (and was not read further)."""

    def __init__(self, max_bytes: int, adapter: str = "the model adapter") -> None:
        super().__init__(
            f"the reply is larger than max_reply_bytes ({max_bytes} bytes); if a real reply is that large, "
            f"pass a larger max_reply_bytes to {adapter}"
        )
        self.max_bytes = max_bytes
        self.adapter = adapter


class ModelHTTPError(ModelError):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


class AuthenticationError(ModelHTTPError):
    pass


class RateLimited(ModelHTTPError):
    retryable: ClassVar[bool] = True


class ServerError(ModelHTTPError):
    retryable: ClassVar[bool] = True


class StoreError(TetherError):
    exit_code: ClassVar[int] = 3


class RunNotFound(StoreError):
    pass


class AmbiguousRun(StoreError):
    """A run id prefix that several runs start with."""


class LeaseHeld(StoreError):
    exit_code: ClassVar[int] = 5

    def __init__(self, message: str, until: float | None = None) -> None:
        super().__init__(message)
        self.until = until  # when the holder's lease runs out, if known


class TamperedRun(StoreError):
    """The run's (or conversation's) rows fail the audit check; nothing of it is acted on."""

    exit_code: ClassVar[int] = 6
