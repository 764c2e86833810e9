"""A sub-agent tool (``Agent.as_tool``) is refused by the Temporal driver when a worker is made, never run there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Agent, ScriptedModel, tool
from tether.core.errors import ConfigurationError
from tether.drivers.temporal.activities import Activities
from tether.store import SQLiteStore


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_worker_with_a_sub_agent_tool_is_refused_naming_the_tool(temporal_sdk: None, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    helper = Agent(ScriptedModel([]), [add]).as_tool(name="helper")
    with pytest.raises(ConfigurationError, match=r"tool .helper. runs a sub-agent .*Temporal driver does not run"):
        Activities(ScriptedModel([]), [add, helper], store)
    Activities(ScriptedModel([]), [add], store)  # the child's own tools are fine
    store.close()
