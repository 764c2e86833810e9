"""An MCP server written with the SDK, for the tests: ``python mcp_server.py MODE [PORT]``.

Modes: ``stdio`` and ``http PORT`` serve the tools below; ``no-tools``,
``bad-schema``, ``hang`` and ``exit`` are the broken servers a host must
survive; ``busy-once`` answers its tool's first call with JSON-RPC's plain
"server error". Every call that reaches a tool is appended to ``$MCP_TEST_LOG``, so a
test can tell a call refused by tether from one the server saw.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.stdio import stdio_server

app = MCPServer("tether-test")


def _log(tool: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@app.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    _log("add", {"a": a, "b": b})
    return a + b


@app.tool()
def delete_everything(confirm: bool) -> str:
    """A tool that claims nothing about itself."""
    _log("delete_everything", {"confirm": confirm})
    return "deleted"


@app.tool()
def weather(city: str) -> dict[str, Any]:
    """Structured content."""
    _log("weather", {"city": city})
    return {"city": city, "celsius": 21.5, "sky": "clear"}


@app.tool(structured_output=False)
def shout(text: str) -> str:
    """Plain text content."""
    _log("shout", {"text": text})
    return text.upper()


@app.tool(structured_output=False)
def big(size: int) -> str:
    """A result longer than any sensible limit."""
    _log("big", {"size": size})
    return "x" * size


@app.tool()
def broken() -> str:
    """Always fails: an isError result."""
    _log("broken", {})
    raise ValueError("the disk is on fire")


@app.tool()
def idempotency_key(ctx: Context) -> str:
    """The idempotency key tether sent in the request's _meta."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("tether/idempotency_key"))


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.tool()
def sleepy(seconds: float) -> str:
    """Sleeps, then answers."""
    _log("sleepy", {"seconds": seconds})
    time.sleep(seconds)
    return "awake"


def _lowlevel(tools: list[types.Tool], on_call_tool: Any = None) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    return Server("tether-test-broken", on_list_tools=list_tools, on_call_tool=on_call_tool)


def _busy_once() -> Server[Any]:
    """One tool whose first call is answered with JSON-RPC's plain "server error" (-32000), its next ones not."""
    from mcp.shared.exceptions import MCPError

    calls = []

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        calls.append(params.name)
        if len(calls) == 1:
            raise MCPError(-32000, "busy, try again")
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])

    busy = types.Tool(name="busy", input_schema={"type": "object", "properties": {}})
    return _lowlevel([busy], call_tool)


async def _serve_lowlevel(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        app.run()
    elif mode == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif mode == "no-tools":
        anyio.run(_serve_lowlevel, _lowlevel([]))
    elif mode == "bad-schema":
        bad = types.Tool(name="bad", input_schema={"type": "object", "properties": {"a": {"type": "nonsense"}}})
        anyio.run(_serve_lowlevel, _lowlevel([bad]))
    elif mode == "busy-once":
        anyio.run(_serve_lowlevel, _busy_once())
    elif mode == "hang":
        time.sleep(3600)  # reads nothing, answers nothing
    elif mode == "exit":
        sys.exit(1)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
