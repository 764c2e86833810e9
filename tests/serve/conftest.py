"""Fixtures: the refund-desk model (a FakeServer), the 20-line agent.py in tmp_path, a client session."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from serve_harness import AGENT_PY, Served, refund_desk

from tether.testing.fake_server import FakeServer

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp"))  # mcp_helpers, shared with the MCP tests' clients


@pytest.fixture
def model() -> Iterator[FakeServer]:
    with FakeServer(refund_desk) as server:
        yield server


@pytest.fixture
def served(tmp_path: Path, model: FakeServer) -> Served:
    agent_py = tmp_path / "agent.py"
    agent_py.write_text(AGENT_PY)
    return Served(agent_py, tmp_path / "runs.db", tmp_path / "refunds.log", model)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
