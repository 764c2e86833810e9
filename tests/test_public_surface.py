"""The public surface of ``tether`` is exactly the documented one, as httpx's ``test_exported_members`` checks.

``PUBLIC`` below is the reviewed list: a name added to (or dropped from)
``tether`` fails here until it is added here too, with the docs it needs.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import tether

PUBLIC = {
    "__version__",
    # running agents
    "Agent",
    "Decision",
    "RunEvent",
    "RunResult",
    "RunFailed",
    "Conversation",
    "ConversationBudget",
    "decide",
    "RunContext",
    "Retry",
    # handoffs
    "handoff",
    "Handoff",
    "AgentTool",
    # message history
    "messages_adapter",
    "keep_last_turns",
    "fit_tokens",
    # configuration and vocabulary
    "Budget",
    "Compat",
    "Message",
    "RunConfig",
    "Status",
    "TetherError",
    # models
    "Model",
    "ModelRequest",
    "ModelSettings",
    "FallbackModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "AnthropicModel",
    "LocalModel",
    "ScriptedModel",
    # tools
    "tool",
    "tool_from_schema",
    "Tool",
    "ToolContext",
    "ToolError",
    "Principal",
    "load_toolset",
    # durable runs
    "RunStore",
    "SQLiteStore",
    "open_store",
}


def test_the_public_names_are_exactly_the_documented_ones() -> None:
    assert sorted(tether.__all__) == sorted(PUBLIC)
    assert len(tether.__all__) == len(set(tether.__all__))


def test_each_public_name_resolves_to_the_module_the_table_names() -> None:
    for name, module in tether._WHERE.items():
        assert getattr(tether, name) is getattr(importlib.import_module(module), name), name


@pytest.mark.parametrize("package", ["tether", "tether.core"])
def test_the_type_checkers_imports_name_the_same_things(package: str) -> None:
    """The TYPE_CHECKING block is the one other place the names are written: it must agree with the table."""
    lazy = importlib.import_module(package)
    tree = ast.parse(Path(str(lazy.__file__)).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    imported = {
        alias.asname or alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert set(imported) == set(lazy._WHERE)
    assert sorted(lazy.__all__) == sorted({*lazy._WHERE, *(["__version__"] if package == "tether" else [])})
    for name, module in imported.items():
        assert getattr(importlib.import_module(str(module)), name) is getattr(lazy, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        tether.Nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "'tether' has no attribute 'Nope'" in str(exc)
    else:
        raise AssertionError("tether.Nope resolved")


def test_import_tether_loads_none_of_the_public_modules() -> None:
    code = "import sys, tether; print(sorted(m for m in sys.modules if m.startswith('tether.')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
