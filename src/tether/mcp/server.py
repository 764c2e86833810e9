"""tether toolsets as an MCP server (``tether mcp serve --tools calc``).

Every ``tools/call`` passes tether's gate before a tool runs, exactly as a
model's call would: the arguments are checked by ``Toolbox.check`` (strict
JSON Schema: no ``"248"`` for 248, no extra fields, ranges, enums) and the tool
must be offered to the principal. A refused call is an ``isError`` result
whose text starts with the tether error code (``invalid_arguments: a:
expected integer, got string``), so the client's model can correct itself.

Who the server acts for is one ``Principal``, given by whoever starts it
(``--principal``/``--scope``): by default ``local`` holding no scope
(``MCP_PRINCIPAL``), so a tool that declares scopes is neither listed nor
callable until the principal holds them. A client never changes it.

A tool that may need approval (``approval=True`` or a predicate) is listed
only to a client that declared MCP elicitation (form mode): a call that
needs approval then asks the client's user, showing the tool, its exact
arguments and their fingerprint, and runs with those arguments only when
the answer is an approval; a decline, a cancel or no answer is ``denied``.
The question waits ``elicitation_seconds`` for its answer (by default
``DEFAULT_ELICITATION_SECONDS``: a person reads it first); then the client is
told the question is cancelled (the SDK's ``notifications/cancelled``) and
the call is ``denied``, saying nobody answered in time. To a client that
cannot be asked, such a tool does not exist (``unknown_tool``), as any tool
the principal may not use. ``can_ask`` and ``ask_user`` serve ``tether serve
--mcp`` too (``tether.serve.mcp_http``).

A result reaches the client once: an object as ``structuredContent``
(and its JSON as text); anything else as its text, and as
``structuredContent`` ``{"result": value}`` (structured content must be an
object; the MCP SDK's servers wrap the same way). Each tool carries
``readOnlyHint`` as tether knows it.

What a client writes is read by ``tether.mcp.lines`` before the SDK sees
it: a line on stdin (one JSON-RPC message) past ``MAX_MESSAGE_BYTES`` is not
read on, and the connection ends with ``MessageTooLarge`` naming the bound,
as a server's line does on the client side (``tether.mcp.stdio``); a line
that is no strict JSON-RPC message (not JSON, a key twice, nested too deep)
is answered with a JSON-RPC error, and the session goes on.
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections.abc import Iterable
from typing import Any, cast

import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server import stdio as sdk
from mcp.server.stdio import stdio_server

from tether.core.envelope import ErrorCode
from tether.core.errors import ConfigurationError
from tether.core.machine import Accepted, PendingCall, Rejected, fingerprint
from tether.core.messages import ToolCall
from tether.mcp.lines import MAX_MESSAGE_BYTES, ClientLines
from tether.tools.context import Principal
from tether.tools.tool import Tool
from tether.tools.toolbox import Toolbox

# Who ``tether mcp serve`` acts for unless told otherwise: tools that need no scope, and only those.
MCP_PRINCIPAL = Principal("local", scopes=frozenset())
APPROVE_FIELD = "approve"
# How long a question put to the client's user waits for the answer: a person reads it, maybe after a while.
DEFAULT_ELICITATION_SECONDS = 300.0


def mcp_server(
    tools: Iterable[Tool],
    *,
    principal: Principal = MCP_PRINCIPAL,
    name: str = "tether",
    elicitation_seconds: float = DEFAULT_ELICITATION_SECONDS,
) -> Server[Any]:
    """An SDK ``Server`` offering ``tools`` to ``principal``, behind tether's strict validation; a call that needs
    approval waits ``elicitation_seconds`` for the user's answer (a ``ConfigurationError`` unless above 0)."""
    within = check_elicitation_seconds(elicitation_seconds)
    tools = list(tools)
    asking = Toolbox(tools, principal)  # for a client that can be asked for approval
    plain = Toolbox([t for t in tools if not _may_need_approval(t)], principal)  # for one that cannot
    run_id = f"mcp-{uuid.uuid4().hex}"  # the idempotency keys of this server's calls are run_id:call_id

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        toolbox = asking if can_ask(ctx) else plain
        return types.ListToolsResult(tools=[_listed(t) for t in toolbox.offered.values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        toolbox = asking if can_ask(ctx) else plain
        call_id = str(ctx.request_id if ctx.request_id is not None else uuid.uuid4().hex)
        try:
            text = json.dumps(params.arguments or {}, allow_nan=True)
        except (TypeError, ValueError):
            return _error(ErrorCode.INVALID_JSON, "the arguments are not JSON")
        checked = toolbox.check(ToolCall(call_id, params.name, text))
        if isinstance(checked, Rejected):
            return _error(checked.code, checked.message)
        if checked.needs_approval:
            refusal = await _ask_approval(ctx, params.name, checked, within)
            if refusal is not None:
                return refusal
        call = PendingCall(call_id, params.name, checked.arguments, None, read_only=checked.read_only, execute=True)
        envelope = json.loads(await toolbox.invoke(call, run_id))
        if not envelope["ok"]:
            return _error(ErrorCode(envelope["error"]["code"]), envelope["error"]["message"])
        return _result(envelope["result"])

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(
    tools: Iterable[Tool],
    *,
    principal: Principal = MCP_PRINCIPAL,
    elicitation_seconds: float = DEFAULT_ELICITATION_SECONDS,
) -> None:
    """Serve ``tools`` over stdin/stdout until the client closes the connection."""
    server = mcp_server(tools, principal=principal, elicitation_seconds=elicitation_seconds)
    # The lines are read here, bounded and checked (``tether.mcp.lines``). Stdin is claimed as the SDK claims it
    # (private, as in ``tether.mcp.stdio``), so a tool's child process reads no message.
    buffer, release = sdk._claim_fd(0, sys.stdin, "rb", sdk._open_stdin_diversion)
    lines = ClientLines(buffer, MAX_MESSAGE_BYTES)
    try:
        async with stdio_server(stdin=cast(Any, lines)) as (read, write):
            lines.answer_on(write)  # a refused line is answered by the SDK's writer, between whole lines
            await server.run(read, write, server.create_initialization_options())
    finally:
        if release is not None:
            release()
    if lines.refused is not None:
        raise lines.refused


def _may_need_approval(tool: Tool) -> bool:
    return callable(tool.approval) or bool(tool.approval)


def check_elicitation_seconds(seconds: float) -> float:
    """``seconds`` if it is a finite number above 0 (a question must end some time); else a ``ConfigurationError``."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigurationError(f"elicitation_seconds must be a number of seconds above 0, got {seconds!r}")
    return float(seconds)


def can_ask(ctx: Any) -> bool:
    """Whether the client declared form-mode elicitation (an empty ``elicitation`` is form mode)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


async def ask_user(ctx: Any, tool: str, message: str, within: float) -> types.ElicitResult | None:
    """Put ``message`` to the client's user as a form asking whether to run ``tool`` (one boolean,
    ``APPROVE_FIELD``): the answer, or None if none came within ``within`` seconds. Any other failure to answer
    is raised as it came; ``approved`` reads the answer.

    The whole question is bounded, sending it too (a client that stops reading blocks the write); the SDK
    tells the client the abandoned question is cancelled, and drops an answer that comes after."""
    schema = {
        "type": "object",
        "properties": {APPROVE_FIELD: {"type": "boolean", "title": f"Run {tool}", "description": message}},
        "required": [APPROVE_FIELD],
    }
    with anyio.move_on_after(within):
        answer: types.ElicitResult = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
        return answer
    return None


def approved(answer: types.ElicitResult) -> bool:
    """Whether the user's ``answer`` to ``ask_user`` approves the call: accepted, with ``APPROVE_FIELD`` true."""
    return answer.action == "accept" and (answer.content or {}).get(APPROVE_FIELD) is True


async def _ask_approval(ctx: Any, tool: str, checked: Accepted, within: float) -> types.CallToolResult | None:
    """Ask the client's user to approve this call with these arguments; None when approved, else the refusal."""
    arguments = json.dumps(checked.arguments, sort_keys=True, ensure_ascii=False)
    digest = fingerprint(tool, checked.arguments)
    message = f"Approve {tool} with exactly these arguments? {arguments} (fingerprint {digest[:16]})"
    try:
        answer = await ask_user(ctx, tool, message, within)
    except Exception as exc:  # the client failed to answer: no approval, whatever the reason
        return _error(ErrorCode.DENIED, f"{tool} needs approval and the client did not give it ({type(exc).__name__})")
    if answer is None:
        return _error(ErrorCode.DENIED, f"{tool} needs approval and the user did not answer within {within:g} seconds")
    # The answer belongs to this request (the SDK pairs them by id), whose call runs with the arguments shown.
    if approved(answer):
        return None
    said = "cancelled the question" if answer.action == "cancel" else "declined it"
    return _error(ErrorCode.DENIED, f"{tool} needs approval and the user {said}")


def _listed(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.parameters,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only),
    )


def _result(result: Any) -> types.CallToolResult:
    """The tool's result once: an object as structured content, anything else wrapped the SDK's way."""
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    structured = result if isinstance(result, dict) else {"result": result}
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)


def _error(code: ErrorCode, message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"{code.value}: {message}")], is_error=True)
