"""tether: the model proposes; the host disposes.

The public names are the keys of ``_WHERE``, each imported from the module
it names on first use, so ``import tether`` stays cheap and never loads the
HTTP client unless a model adapter is used. ``__all__`` is made from that
table; the ``TYPE_CHECKING`` imports below (``X as X``: re-exported) give
type checkers the same names, and a test keeps them equal to the table
(``tests/test_public_surface.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.core import (
        Budget as Budget,
    )
    from tether.core import (
        Compat as Compat,
    )
    from tether.core import (
        Message as Message,
    )
    from tether.core import (
        RunConfig as RunConfig,
    )
    from tether.core import (
        Status as Status,
    )
    from tether.core import (
        TetherError as TetherError,
    )
    from tether.core.errors import RunFailed as RunFailed
    from tether.core.events import RunEvent as RunEvent
    from tether.core.report import RunResult as RunResult
    from tether.drivers.local.conversation import Conversation as Conversation
    from tether.drivers.local.conversation import ConversationBudget as ConversationBudget
    from tether.drivers.local.durable import decide as decide
    from tether.drivers.local.handoffs import Handoff as Handoff
    from tether.drivers.local.handoffs import handoff as handoff
    from tether.drivers.local.history import fit_tokens as fit_tokens
    from tether.drivers.local.history import keep_last_turns as keep_last_turns
    from tether.drivers.local.history import messages_adapter as messages_adapter
    from tether.drivers.local.runner import Agent as Agent
    from tether.drivers.local.runner import Decision as Decision
    from tether.drivers.local.subagents import AgentTool as AgentTool
    from tether.models import (
        AnthropicModel as AnthropicModel,
    )
    from tether.models import (
        FallbackModel as FallbackModel,
    )
    from tether.models import (
        Model as Model,
    )
    from tether.models import (
        ModelRequest as ModelRequest,
    )
    from tether.models import (
        ModelSettings as ModelSettings,
    )
    from tether.models import (
        OpenAIChatModel as OpenAIChatModel,
    )
    from tether.models import (
        OpenAIResponsesModel as OpenAIResponsesModel,
    )
    from tether.models import (
        ScriptedModel as ScriptedModel,
    )
    from tether.models.local import LocalModel as LocalModel
    from tether.store import RunStore as RunStore
    from tether.store import SQLiteStore as SQLiteStore
    from tether.store import open_store as open_store
    from tether.tools import (
        Principal as Principal,
    )
    from tether.tools import (
        Retry as Retry,
    )
    from tether.tools import (
        RunContext as RunContext,
    )
    from tether.tools import (
        Tool as Tool,
    )
    from tether.tools import (
        ToolContext as ToolContext,
    )
    from tether.tools import (
        ToolError as ToolError,
    )
    from tether.tools import (
        tool as tool,
    )
    from tether.tools import (
        tool_from_schema as tool_from_schema,
    )
    from tether.toolsets import load_toolset as load_toolset

__version__ = "0.1.0"

# The public surface: each name, and the module it comes from.
_WHERE = {
    "Agent": "tether.drivers.local.runner",
    "AgentTool": "tether.drivers.local.subagents",
    "AnthropicModel": "tether.models",
    "Budget": "tether.core",
    "Compat": "tether.core",
    "Conversation": "tether.drivers.local.conversation",
    "ConversationBudget": "tether.drivers.local.conversation",
    "Decision": "tether.drivers.local.runner",
    "Handoff": "tether.drivers.local.handoffs",
    "FallbackModel": "tether.models",
    "LocalModel": "tether.models.local",
    "Message": "tether.core",
    "Model": "tether.models",
    "ModelRequest": "tether.models",
    "ModelSettings": "tether.models",
    "OpenAIChatModel": "tether.models",
    "OpenAIResponsesModel": "tether.models",
    "Principal": "tether.tools",
    "Retry": "tether.tools",
    "RunConfig": "tether.core",
    "RunContext": "tether.tools",
    "RunEvent": "tether.core.events",
    "RunFailed": "tether.core.errors",
    "RunResult": "tether.core.report",
    "RunStore": "tether.store",
    "SQLiteStore": "tether.store",
    "ScriptedModel": "tether.models",
    "Status": "tether.core",
    "TetherError": "tether.core",
    "Tool": "tether.tools",
    "ToolContext": "tether.tools",
    "ToolError": "tether.tools",
    "decide": "tether.drivers.local.durable",
    "fit_tokens": "tether.drivers.local.history",
    "handoff": "tether.drivers.local.handoffs",
    "keep_last_turns": "tether.drivers.local.history",
    "load_toolset": "tether.toolsets",
    "messages_adapter": "tether.drivers.local.history",
    "open_store": "tether.store",
    "tool": "tether.tools",
    "tool_from_schema": "tether.tools",
}

__all__ = ["__version__", *_WHERE]  # made from the table: the names are written once


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
