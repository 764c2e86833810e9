"""tether.core: messages, the run state machine, budgets, errors. No I/O.

The names below are imported from their modules on first use, as ``tether``
does with its own (``_WHERE``): building an agent needs the budget and the
messages but not the state machine, whose dataclasses are most of what
importing the core costs; a run loads it when it starts (issue 19). The
``TYPE_CHECKING`` imports give type checkers the same names, and a test keeps
them equal to the table (``tests/test_public_surface.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.core.budget import DEFAULT_FALLBACK_ANSWER as DEFAULT_FALLBACK_ANSWER
    from tether.core.budget import DEFAULT_LOOP_LIMIT as DEFAULT_LOOP_LIMIT
    from tether.core.budget import DEFAULT_MAX_REPAIRS as DEFAULT_MAX_REPAIRS
    from tether.core.budget import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
    from tether.core.budget import DEFAULT_MAX_TOOL_CALLS as DEFAULT_MAX_TOOL_CALLS
    from tether.core.budget import Budget as Budget
    from tether.core.budget import Compat as Compat
    from tether.core.budget import RunConfig as RunConfig
    from tether.core.envelope import ErrorCode as ErrorCode
    from tether.core.envelope import outcome_code as outcome_code
    from tether.core.errors import ApprovalMismatch as ApprovalMismatch
    from tether.core.errors import AuthenticationError as AuthenticationError
    from tether.core.errors import ConfigurationError as ConfigurationError
    from tether.core.errors import FallbackExhausted as FallbackExhausted
    from tether.core.errors import ModelConnectionError as ModelConnectionError
    from tether.core.errors import ModelError as ModelError
    from tether.core.errors import ModelHTTPError as ModelHTTPError
    from tether.core.errors import ModelResponseError as ModelResponseError
    from tether.core.errors import ModelTimeout as ModelTimeout
    from tether.core.errors import RateLimited as RateLimited
    from tether.core.errors import ReplyTooLarge as ReplyTooLarge
    from tether.core.errors import RunPoisoned as RunPoisoned
    from tether.core.errors import ServerError as ServerError
    from tether.core.errors import TetherError as TetherError
    from tether.core.errors import ToolDefinitionError as ToolDefinitionError
    from tether.core.errors import TransitionError as TransitionError
    from tether.core.machine import TRANSITIONS as TRANSITIONS
    from tether.core.machine import Accepted as Accepted
    from tether.core.machine import AnswerCheck as AnswerCheck
    from tether.core.machine import ApprovalDecided as ApprovalDecided
    from tether.core.machine import AwaitApproval as AwaitApproval
    from tether.core.machine import AwaitChildren as AwaitChildren
    from tether.core.machine import AwaitReconciliation as AwaitReconciliation
    from tether.core.machine import Begin as Begin
    from tether.core.machine import CallModel as CallModel
    from tether.core.machine import Cancel as Cancel
    from tether.core.machine import Catalog as Catalog
    from tether.core.machine import ChildPaused as ChildPaused
    from tether.core.machine import ChildResumed as ChildResumed
    from tether.core.machine import ChildRun as ChildRun
    from tether.core.machine import Command as Command
    from tether.core.machine import Event as Event
    from tether.core.machine import Finish as Finish
    from tether.core.machine import ModelFailed as ModelFailed
    from tether.core.machine import ModelReplied as ModelReplied
    from tether.core.machine import OutcomeUnknown as OutcomeUnknown
    from tether.core.machine import PendingCall as PendingCall
    from tether.core.machine import Reconciled as Reconciled
    from tether.core.machine import Rejected as Rejected
    from tether.core.machine import Retried as Retried
    from tether.core.machine import Run as Run
    from tether.core.machine import RunState as RunState
    from tether.core.machine import RunTools as RunTools
    from tether.core.machine import Status as Status
    from tether.core.machine import ToolsFinished as ToolsFinished
    from tether.core.machine import Validated as Validated
    from tether.core.machine import fingerprint as fingerprint
    from tether.core.machine import mermaid_diagram as mermaid_diagram
    from tether.core.messages import Message as Message
    from tether.core.messages import ModelReply as ModelReply
    from tether.core.messages import ToolCall as ToolCall
    from tether.core.messages import Usage as Usage
    from tether.core.messages import WireToolCall as WireToolCall
    from tether.core.settings import ModelSettings as ModelSettings

# Each name, and the module it comes from.
_WHERE = {
    "Accepted": "tether.core.machine",
    "AnswerCheck": "tether.core.machine",
    "ApprovalDecided": "tether.core.machine",
    "ApprovalMismatch": "tether.core.errors",
    "AuthenticationError": "tether.core.errors",
    "AwaitApproval": "tether.core.machine",
    "AwaitChildren": "tether.core.machine",
    "AwaitReconciliation": "tether.core.machine",
    "Begin": "tether.core.machine",
    "Budget": "tether.core.budget",
    "CallModel": "tether.core.machine",
    "Cancel": "tether.core.machine",
    "Catalog": "tether.core.machine",
    "ChildPaused": "tether.core.machine",
    "ChildResumed": "tether.core.machine",
    "ChildRun": "tether.core.machine",
    "Command": "tether.core.machine",
    "Compat": "tether.core.budget",
    "ConfigurationError": "tether.core.errors",
    "DEFAULT_FALLBACK_ANSWER": "tether.core.budget",
    "DEFAULT_LOOP_LIMIT": "tether.core.budget",
    "DEFAULT_MAX_REPAIRS": "tether.core.budget",
    "DEFAULT_MAX_STEPS": "tether.core.budget",
    "DEFAULT_MAX_TOOL_CALLS": "tether.core.budget",
    "ErrorCode": "tether.core.envelope",
    "Event": "tether.core.machine",
    "FallbackExhausted": "tether.core.errors",
    "Finish": "tether.core.machine",
    "Message": "tether.core.messages",
    "ModelConnectionError": "tether.core.errors",
    "ModelError": "tether.core.errors",
    "ModelFailed": "tether.core.machine",
    "ModelHTTPError": "tether.core.errors",
    "ModelReplied": "tether.core.machine",
    "ModelReply": "tether.core.messages",
    "ModelResponseError": "tether.core.errors",
    "ModelSettings": "tether.core.settings",
    "ModelTimeout": "tether.core.errors",
    "OutcomeUnknown": "tether.core.machine",
    "PendingCall": "tether.core.machine",
    "RateLimited": "tether.core.errors",
    "Reconciled": "tether.core.machine",
    "Rejected": "tether.core.machine",
    "ReplyTooLarge": "tether.core.errors",
    "Retried": "tether.core.machine",
    "Run": "tether.core.machine",
    "RunConfig": "tether.core.budget",
    "RunPoisoned": "tether.core.errors",
    "RunState": "tether.core.machine",
    "RunTools": "tether.core.machine",
    "ServerError": "tether.core.errors",
    "Status": "tether.core.machine",
    "TRANSITIONS": "tether.core.machine",
    "TetherError": "tether.core.errors",
    "ToolCall": "tether.core.messages",
    "ToolDefinitionError": "tether.core.errors",
    "ToolsFinished": "tether.core.machine",
    "TransitionError": "tether.core.errors",
    "Usage": "tether.core.messages",
    "Validated": "tether.core.machine",
    "WireToolCall": "tether.core.messages",
    "fingerprint": "tether.core.machine",
    "mermaid_diagram": "tether.core.machine",
    "outcome_code": "tether.core.envelope",
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:  # a submodule (``from tether.core import envelope``) is found by the import system instead
        raise AttributeError(f"module 'tether.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
