"""tether: the model proposes; the host disposes.

The names below are imported on first use, so ``import tether`` stays cheap
and never loads the HTTP client unless a model adapter is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.conversation import Conversation, ConversationBudget
    from tether.core import Budget, Compat, Message, RunConfig, Status, TetherError
    from tether.core.errors import RunFailed
    from tether.durable import decide
    from tether.models import AnthropicModel, Model, ModelRequest, OpenAIChatModel, ScriptedModel
    from tether.models.local import LocalModel
    from tether.report import RunResult
    from tether.runner import Agent, Decision, RunEvent
    from tether.store import RunStore, SQLiteStore, open_store
    from tether.tools import Principal, Tool, ToolContext, ToolError, tool, tool_from_schema
    from tether.toolsets import load_toolset

__version__ = "0.1.0"

_WHERE = {
    "Agent": "tether.runner",
    "Decision": "tether.runner",
    "RunEvent": "tether.runner",
    "RunResult": "tether.report",
    "RunFailed": "tether.core.errors",
    "Conversation": "tether.conversation",
    "ConversationBudget": "tether.conversation",
    "decide": "tether.durable",
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
