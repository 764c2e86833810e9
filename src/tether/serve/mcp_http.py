"""A served Agent as one MCP tool over streamable HTTP (``tether serve TARGET --mcp``, at ``/mcp``; the ``mcp`` extra).

The tool is named after the Agent and takes ``{"prompt": "..."}``; a call
starts a run for the caller, as ``POST /runs`` does (durable, in the same
store, listed by ``GET /runs``), and answers once the run settles: its
output, or (``isError``) how it ended and why.

Who is calling comes from the app's ``Authenticator`` on every HTTP request
(the ``Authorization`` header, as for the rest of the API); a request it
refuses is its 401 problem, before the MCP SDK sees it. An MCP session is
bound to the principal that opened it: another principal presenting its id
is told the session does not exist.

A POST's body (bounded by the app's body limit) is read next, as strictly as
``tether mcp serve`` reads a line (``tether.mcp.lines.check_line``): the
SDK reads JSON keeping the last of duplicate keys, so ``{"approve": false,
"approve": true}`` in a client's answer to an approval question was an
approval, and it takes ``NaN`` and ``1e400``. A body that fails is not
passed on: it is a 400 holding the JSON-RPC error (``application/json``, as
the SDK answers a body it cannot parse), with the request's id when that
can be read unambiguously. A notification or a response that fails gets the
same 400 with a null id, as the MCP transport says of input a server does
not accept (a 202 would tell the client its answer was taken). A refused
response that names its request's id (an answer to an approval question)
also ends that question at once, unanswered, as ``tether mcp serve`` does
(``tether.mcp.lines.unread`` is handed to the session in its place): a
refused answer is no approval, and the call goes on as when nobody answers
in time. A body that passes is handed to the SDK unchanged.

A run that waits for approval: when the caller holds the approver role and
its client declared MCP elicitation (form mode), each waiting call is put
to the client's user, showing the tool, its redacted arguments and the
fingerprint; the answer is the caller's decision on that call, bound to
that fingerprint (``AgentRuns.decide_as``), and the run goes on. Otherwise,
or if the user cancels the question or does not answer it within
``elicitation_seconds`` (``DEFAULT_ELICITATION_SECONDS`` unless told), the
result says the run waits and where an approver decides (``POST
/runs/{run_id}/approvals/{call_id}``, listed at ``GET /approvals``); the run
stays waiting in the store, and the call, its session and its HTTP request
are let go.

Sessions live in the process that opened them. Where several processes
answer one address (``--workers N``) nothing routes a client back to the
one holding its session, so the endpoint is stateless there: each POST is
answered on its own by whichever process takes it (the runs are shared
through the store), no ``Mcp-Session-Id`` is given, and a GET or DELETE
(a session's stream, its end) is a 405. A stateless request has no way
back to the client, so nobody is asked to approve: the result says where
an approver decides. The per-caller session cap has nothing to count
there; a caller is bounded by the run caps (each call is a run of theirs)
and the body limit, as on ``POST /runs``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp.types as types
from fastapi import FastAPI
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from tether.core.envelope import ErrorCode
from tether.core.machine import Status
from tether.core.redact import redact
from tether.mcp.lines import Refused, check_line, unread
from tether.mcp.server import DEFAULT_ELICITATION_SECONDS, approved, ask_user, can_ask, check_elicitation_seconds
from tether.serve.follow import settled
from tether.serve.identity import APPROVER_ROLE, Authenticator
from tether.serve.problems import Problem
from tether.serve.runs import WAITING_FOR_A_PERSON, AgentRuns, Caller

MCP_PATH = "/mcp"
DEFAULT_DESCRIPTION = "Ask the agent: give it the whole task as the prompt; its answer is the result."
MAX_SESSIONS_PER_PRINCIPAL = 64  # of the SDK's 10,000 a process holds; each idles out after 30 minutes
_CALLER = "tether.caller"  # where the authenticated caller waits in the request's scope


def _schema(max_prompt_chars: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "maxLength": max_prompt_chars, "description": "The task."}
        },
        "required": ["prompt"],
        "additionalProperties": False,
    }


def mcp_server(
    runs: AgentRuns, *, max_prompt_chars: int, elicitation_seconds: float = DEFAULT_ELICITATION_SECONDS
) -> Server[Any]:
    """An SDK ``Server`` offering the served Agent as one tool, each call a run of the caller's; a question put to
    the caller's user waits ``elicitation_seconds`` for the answer (a ``ConfigurationError`` unless above 0)."""
    within = check_elicitation_seconds(elicitation_seconds)
    agent = runs.agent
    name = agent.name  # an Agent's name is already a valid tool name (letters, digits, '_', '-')
    listed = types.Tool(
        name=name,
        description=agent.handoff_description or DEFAULT_DESCRIPTION,
        input_schema=_schema(max_prompt_chars),
        annotations=types.ToolAnnotations(read_only_hint=False),
    )

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[listed])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != name:
            return _error(ErrorCode.UNKNOWN_TOOL, f"no tool {params.name!r}; this server offers {name!r}")
        arguments = params.arguments or {}
        prompt = arguments.get("prompt")
        if set(arguments) != {"prompt"} or not isinstance(prompt, str) or not prompt.strip():
            return _error(ErrorCode.INVALID_ARGUMENTS, 'the arguments must be {"prompt": a non-empty string}')
        if len(prompt) > max_prompt_chars:
            return _error(ErrorCode.INVALID_ARGUMENTS, f"prompt: longer than {max_prompt_chars} characters")
        caller = ctx.request.scope[_CALLER]
        try:
            live = await runs.begin(caller, prompt)
            view = await settled(runs, live.run_id, caller)
            while view["pending_approvals"] and caller.approves and can_ask(ctx):
                answered = await _ask(ctx, runs, caller, view, within)
                view = await settled(runs, live.run_id, caller)  # as the answers left it
                if not answered:
                    break  # the user did not answer: the run waits for an approver over HTTP
        except Problem as exc:
            return _error(ErrorCode.TOOL_FAILED, exc.detail)
        return _result(view)

    return Server(f"tether: {name}", on_list_tools=list_tools, on_call_tool=call_tool)


async def _ask(ctx: Any, runs: AgentRuns, caller: Caller, view: dict[str, Any], within: float) -> bool:
    """Put each call the run waits on to the client's user and record the answers; whether all were answered
    (each within ``within`` seconds)."""
    for call in view["pending_approvals"]:
        arguments = json.dumps(redact(call["arguments"]), sort_keys=True, ensure_ascii=False)
        why = f"; it needs approval because {call['reason']}" if call.get("reason") else ""
        digest = call["fingerprint"][:16]
        asks = f"Run {call['run_id']} asks to call {call['tool']} with {arguments}"
        message = f"{asks} (fingerprint {digest}){why}. Approve?"
        try:
            answer = await ask_user(ctx, call["tool"], message, within)
        except Exception:  # the client failed to answer: nothing is decided, the call waits for an approver
            return False
        if answer is None or answer.action == "cancel":  # no answer in time, or none given: as above
            return False
        yes = approved(answer)
        reason = None if yes else "declined when asked through MCP"
        await runs.decide_as(
            call["run_id"], call["call_id"], caller, approved=yes, reason=reason, fingerprint=call["fingerprint"]
        )
    return True


def _result(view: dict[str, Any]) -> types.CallToolResult:
    """The run's answer; how it ended short (``isError``); or what it waits on and where an approver decides."""
    run_id, status = view["run_id"], view["status"]
    if status == Status.COMPLETED.value:
        output = view["output"] or ""
        structured = {"run_id": run_id, "status": status, "output": output}
        return types.CallToolResult(content=[types.TextContent(text=output)], structured_content=structured)
    if status in WAITING_FOR_A_PERSON:
        calls = [
            {"run_id": c["run_id"], "call_id": c["call_id"], "tool": c["tool"], "arguments": redact(c["arguments"]),
             "fingerprint": c["fingerprint"], "decide": f"POST /runs/{c['run_id']}/approvals/{c['call_id']}"}
            for c in view["pending_approvals"]
        ]  # fmt: skip
        if calls:
            named = ", ".join(f"{c['tool']} (call {c['call_id']})" for c in calls)
            text = (
                f"run {run_id} waits for approval of {named}: a caller with the {APPROVER_ROLE!r} role decides it"
                f" with {calls[0]['decide']} (GET /approvals lists it); GET /runs/{run_id} shows the run"
            )
        else:
            text = (
                f"run {run_id} waits for a person to settle the unknown outcome of a call: a caller with the"
                f" {APPROVER_ROLE!r} role does so with POST /runs/{run_id}/calls/{{call_id}}/reconcile"
            )
        structured = {"run_id": run_id, "status": status, "waiting": calls}
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured)
    text = f"the run {run_id} ended {status}" + (f": {view['reason']}" if view.get("reason") else "")
    structured = {"run_id": run_id, "status": status, "reason": view.get("reason")}
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured, is_error=True)


def _error(code: ErrorCode, message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"{code.value}: {message}")], is_error=True)


class _Authenticated:
    """The SDK's streamable HTTP endpoint behind the app's authenticator, each session bound to its principal,
    and no principal holding more than ``MAX_SESSIONS_PER_PRINCIPAL`` of the process's sessions at once
    (stateless, there are none to hold)."""

    def __init__(self, manager: StreamableHTTPSessionManager, authenticator: Authenticator) -> None:
        self.manager = manager
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        principal = await self.authenticator.authenticate(request)  # a 401 problem if not
        opening = MCP_SESSION_ID_HEADER not in request.headers and not self.manager.stateless
        if opening and self._sessions_of(principal.id) >= MAX_SESSIONS_PER_PRINCIPAL:
            raise Problem(
                429,
                f"{principal.id} has {MAX_SESSIONS_PER_PRINCIPAL} MCP sessions open, the most one caller may:"
                " end one (DELETE /mcp with its Mcp-Session-Id) or let one idle out",
            )
        scope[_CALLER] = Caller(principal)
        # The SDK binds a session to the user that opened it (``client_id``): here, the principal.
        token = AccessToken(token="", client_id=principal.id, scopes=sorted(principal.scopes))
        scope["user"] = AuthenticatedUser(token)
        if request.method == "POST":
            body = await request.body()  # bounded by the app's BodyLimit: a 413 problem past it
            checked = check_line(body)
            if isinstance(checked, Refused):
                instead = unread(checked)
                in_session = MCP_SESSION_ID_HEADER in request.headers and not self.manager.stateless
                if instead is not None and in_session:  # only a session's client is asked anything
                    # The question it answers ends now, not when its time is up; the SDK's 202 for it is not sent.
                    await self.manager.handle_request(scope, _replayed(instead.encode(), receive), _unsent)
                await _refused_body(checked)(scope, receive, send)
                return
            receive = _replayed(body, receive)
        await self.manager.handle_request(scope, receive, send)

    def _sessions_of(self, principal_id: str) -> int:
        """The sessions open for ``principal_id``: the SDK caps them for the whole process (the first caller to
        open that many would shut every other out), not per caller."""
        owners = getattr(self.manager, "_session_owners", {})  # the SDK's record of who opened each session
        return sum(1 for owner in owners.values() if owner.get("client_id") == principal_id)


def _refused_body(refused: Refused) -> Response:
    """A body that is not passed on: 400 and its JSON-RPC error, as the SDK answers a body it cannot parse."""
    error = types.JSONRPCError(
        jsonrpc="2.0",
        id=refused.ident if refused.answered else None,  # a notification's or a response's: no request of the client's
        error=types.ErrorData(code=refused.code, message=refused.message),
    )
    return Response(error.model_dump_json(by_alias=True, exclude_unset=True), 400, media_type="application/json")


async def _unsent(message: Message) -> None:
    """Where the SDK's answer to a body tether handed it in place of the client's goes: the client is answered
    for its own body."""


def _replayed(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read given again, whole, for the SDK to read; then the client's own
    messages (its disconnect, which ends an SSE answer)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def add_route(
    api: FastAPI,
    runs: AgentRuns,
    authenticator: Authenticator,
    *,
    max_prompt_chars: int,
    stateless: bool = False,
    elicitation_seconds: float | None = None,
) -> Callable[[], AbstractAsyncContextManager[None]]:
    """Serve ``runs`` as an MCP tool at ``MCP_PATH`` on ``api``; what the app's lifespan must keep running.

    ``stateless``: no sessions, for several processes behind one address with nothing routing a client back to
    one of them. Answers stay SSE streams (not ``json_response``), which keep a call's notifications.
    ``elicitation_seconds``: how long a question put to an approver's user waits (None: the default)."""
    within = DEFAULT_ELICITATION_SECONDS if elicitation_seconds is None else elicitation_seconds
    server = mcp_server(runs, max_prompt_chars=max_prompt_chars, elicitation_seconds=within)
    manager = StreamableHTTPSessionManager(server, stateless=stateless)
    # Stateless, a GET would hold a stream nothing can ever be sent on, and there is no session to DELETE.
    methods = ["POST"] if stateless else ["GET", "POST", "DELETE"]
    api.router.routes.append(Route(MCP_PATH, _Authenticated(manager, authenticator), methods=methods))
    return manager.run
