"""tether toolsets as an MCP server (``tether mcp serve --tools calc``).

Every ``tools/call`` passes tether's gate before a tool runs, exactly as a
model's call would: the arguments are checked by ``Toolbox.check`` (strict
JSON Schema: no ``"248"`` for 248, no extra fields, ranges, enums) and the tool
must be offered to the principal. A refused call is an ``isError`` result
whose text starts with the tether error code (``invalid_arguments: a:
expected integer, got string``), so the client's model can correct itself.
A tool that needs approval is refused (``denied``): an MCP client cannot give
tether's approval. Each tool carries ``readOnlyHint`` as tether knows it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

from tether.core.envelope import ErrorCode
from tether.core.machine import PendingCall, Rejected
from tether.core.messages import ToolCall
from tether.tools.context import LOCAL_PRINCIPAL, Principal
from tether.tools.tool import Tool
from tether.tools.toolbox import Toolbox


def mcp_server(tools: Iterable[Tool], *, principal: Principal = LOCAL_PRINCIPAL, name: str = "tether") -> Server[Any]:
    """An SDK ``Server`` offering ``tools`` behind tether's strict validation."""
    toolbox = Toolbox(tools, principal)
    run_id = f"mcp-{uuid.uuid4().hex}"  # the idempotency keys of this server's calls are run_id:call_id

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_listed(t) for t in toolbox.offered.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        call_id = str(ctx.request_id if ctx.request_id is not None else uuid.uuid4().hex)
        try:
            text = json.dumps(params.arguments or {}, allow_nan=True)
        except (TypeError, ValueError):
            return _error(ErrorCode.INVALID_JSON, "the arguments are not JSON")
        checked = toolbox.check(ToolCall(call_id, params.name, text))
        if isinstance(checked, Rejected):
            return _error(checked.code, checked.message)
        if checked.needs_approval:
            return _error(ErrorCode.DENIED, f"{params.name} needs approval, which an MCP client cannot give")
        call = PendingCall(call_id, params.name, checked.arguments, None, read_only=checked.read_only, execute=True)
        envelope = json.loads(await toolbox.invoke(call, run_id))
        if not envelope["ok"]:
            return _error(ErrorCode(envelope["error"]["code"]), envelope["error"]["message"])
        result = envelope["result"]
        return types.CallToolResult(
            content=[types.TextContent(text=result if isinstance(result, str) else json.dumps(result))],
            structured_content=result if isinstance(result, dict) else {"result": result},
        )

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(tools: Iterable[Tool], *, principal: Principal = LOCAL_PRINCIPAL) -> None:
    """Serve ``tools`` over stdin/stdout until the client closes the connection."""
    server = mcp_server(tools, principal=principal)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _listed(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only),
    )


def _error(code: ErrorCode, message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"{code.value}: {message}")], is_error=True)
