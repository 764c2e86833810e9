"""tether.mcp: MCP servers' tools as tether tools, and tether toolsets as an MCP server.

Needs the ``mcp`` extra (``pip install 'tether[mcp]'``); nothing here is
imported by ``import tether``.

    with MCPToolset.stdio("python -m my_server", read_only={"search"}) as tools:
        agent = Agent(model, tools)
"""

from __future__ import annotations

from tether.core.errors import MCPServerError
from tether.mcp.client import MCPToolset

__all__ = ["MCPServerError", "MCPToolset"]
