"""tether: the model proposes; the host disposes.

The names below are imported on first use, so ``import tether`` stays cheap
and never loads the HTTP client unless a model adapter is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.core import Budget, Compat, Message, RunConfig, Status, TetherError
    from tether.core.errors import RunFailed
    from tether.core.report import RunResult
    from tether.drivers.local.conversation import Conversation, ConversationBudget
    from tether.drivers.local.durable import decide
    from tether.drivers.local.runner import Agent, Decision, RunEvent
    from tether.models import AnthropicModel, Model, ModelRequest, OpenAIChatModel, ScriptedModel
    from tether.models.local import LocalModel
    from tether.store import RunStore, SQLiteStore, open_store
    from tether.tools import Principal, Tool, ToolContext, ToolError, tool, tool_from_schema
    from tether.toolsets import load_toolset

__version__ = "0.1.0"

_WHERE = {
    "Agent": "tether.drivers.local.runner",
    "Decision": "tether.drivers.local.runner",
    "RunEvent": "tether.drivers.local.runner",
    "RunResult": "tether.core.report",
    "RunFailed": "tether.core.errors",
    "Conversation": "tether.drivers.local.conversation",
    "ConversationBudget": "tether.drivers.local.conversation",
    "decide": "tether.drivers.local.durable",
    "LocalModel": "tether.models.local",
    "SQLiteStore": "tether.store",
    "RunStore": "tether.store",
    "open_store": "tether.store",
    "Budget": "tether.core",
    "Compat": "tether.core",
    "Message": "tether.core",
    "RunConfig": "tether.core",
    "Status": "tether.core",
    "TetherError": "tether.core",
    "AnthropicModel": "tether.models",
    "Model": "tether.models",
    "ModelRequest": "tether.models",
    "OpenAIChatModel": "tether.models",
    "ScriptedModel": "tether.models",
    "Principal": "tether.tools",
    "Tool": "tether.tools",
    "ToolContext": "tether.tools",
    "ToolError": "tether.tools",
    "tool": "tether.tools",
    "tool_from_schema": "tether.tools",
    "load_toolset": "tether.toolsets",
}

__all__ = [
    "Agent",
    "AnthropicModel",
    "Budget",
    "Compat",
    "Conversation",
    "ConversationBudget",
    "Decision",
    "LocalModel",
    "Message",
    "Model",
    "ModelRequest",
    "OpenAIChatModel",
    "Principal",
    "RunConfig",
    "RunEvent",
    "RunFailed",
    "RunResult",
    "RunStore",
    "SQLiteStore",
    "ScriptedModel",
    "Status",
    "TetherError",
    "Tool",
    "ToolContext",
    "ToolError",
    "__version__",
    "decide",
    "load_toolset",
    "open_store",
    "tool",
    "tool_from_schema",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
