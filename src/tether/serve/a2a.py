"""A served Agent over A2A (the ``a2a-sdk`` package, the ``a2a`` extra): its card, and its runs as A2A tasks.

The SDK answers the protocol (JSON-RPC 2.0 at ``/a2a``, A2A 1.0 methods
``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``ListTasks``,
``CancelTask``, ``SubscribeToTask``, and A2A 0.3's ``message/send``,
``message/stream``, ``tasks/get``, ``tasks/cancel``, ``tasks/resubscribe``);
``RunTasks`` is its request handler, with no task store of its own: a task
*is* a tether run, durable and resumed as every served run, its id the
run's id. A context is a tether conversation: a message without a
``contextId`` starts a conversation (its id the task's ``contextId``), one
with a ``contextId`` is that conversation's next turn. A run started outside
any conversation (``POST /runs``) is its own context, with no next turn: a
message sent in it is refused saying so, to its owner (to anyone else, no
such context).

States: a run being driven is ``working`` (``submitted`` before its first
step); waiting for a person (an approval, an unknown outcome) is
``input-required``, its status message naming each call waiting and where an
approver decides it (``POST /runs/{run_id}/approvals/{call_id}``, listed at
``GET /approvals``); ``completed`` carries the answer as the artifact
``answer``; ``cancelled`` is ``canceled``, ``content_filtered`` is
``rejected``, every other end ``failed``, each with tether's status and
reason in its status message. A message naming a ``taskId`` is refused: a
run takes no input once started (a decision is an approver's, over HTTP).
A stream (``SendStreamingMessage``, ``SubscribeToTask``) holds one of its
caller's event streams while open, as a server-sent events stream does
(``RunService.hold_stream``); past the limit it is refused before its run
starts.

Who is calling comes from the app's ``Authenticator``, asked before the SDK
sees the request; the caller's principal owns the tasks it starts, and
anyone else's task is the ``TaskNotFoundError`` a missing one is. Then the
body is read as tether reads all JSON from outside (``nesting.loads``): one
it cannot read, holding a lone surrogate, or holding a key twice in one
object (which value counts is anybody's guess), is refused with its
JSON-RPC code (``_unreadable``) before the SDK parses it or a run starts. The agent
card (``/.well-known/agent-card.json``) is public: it names the agent, one
skill (the agent itself, never its tools) and the authentication scheme.
"""

from __future__ import annotations

import contextlib
import json
import logging
import traceback
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from importlib import metadata
from typing import Any

from a2a.helpers.proto_helpers import get_text_parts
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import FastAPI
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tether.core import nesting
from tether.core.machine import Status
from tether.core.redact import redact
from tether.drivers.local.runner import Agent
from tether.serve.auth import ApiKeyAuth, JWTAuth, NoAuth
from tether.serve.follow import MOVING, changes, settled
from tether.serve.identity import APPROVER_ROLE, Authenticator
from tether.serve.problems import Problem
from tether.serve.runs import WAITING_FOR_A_PERSON, AgentRuns, Caller
from tether.tools.decoding import DuplicateKey, no_duplicates

RPC_PATH = "/a2a"
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
DEFAULT_DESCRIPTION = "A tether agent: send it a task in plain text; calls that need approval wait for an approver."
ANSWER = "answer"  # the artifact a completed task carries
_CALLER = "tether.caller"  # where a request's caller waits in the SDK's call context
_LIST_PAGE = 50
_MAX_LIST_PAGE = 100

# tether's statuses as task states; every other end of a run is ``failed``.
_STATES = {
    Status.READY.value: TaskState.TASK_STATE_SUBMITTED,
    Status.AWAITING_MODEL.value: TaskState.TASK_STATE_WORKING,
    Status.AWAITING_TOOLS.value: TaskState.TASK_STATE_WORKING,
    Status.AWAITING_APPROVAL.value: TaskState.TASK_STATE_INPUT_REQUIRED,
    Status.AWAITING_RECONCILIATION.value: TaskState.TASK_STATE_INPUT_REQUIRED,
    Status.COMPLETED.value: TaskState.TASK_STATE_COMPLETED,
    Status.CANCELLED.value: TaskState.TASK_STATE_CANCELED,
    Status.CONTENT_FILTERED.value: TaskState.TASK_STATE_REJECTED,
}


def state_of(status: str) -> TaskState:
    """The A2A task state of a run in tether's ``status``."""
    return _STATES.get(status, TaskState.TASK_STATE_FAILED)


def statuses_in(state: TaskState) -> set[str]:
    """tether's statuses that are the task state ``state``."""
    return {s.value for s in Status if state_of(s.value) == state}


# --- the card ----------------------------------------------------------------------------------------


def card(agent: Agent, authenticator: Authenticator, base_url: str) -> AgentCard:
    """The agent card of ``agent`` served at ``base_url``: one skill (the agent), the scheme callers use."""
    description = agent.handoff_description or DEFAULT_DESCRIPTION
    url = base_url.rstrip("/") + RPC_PATH
    found = AgentCard(
        name=agent.name,
        description=description,
        version=_version(),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=agent.name, name=agent.name, description=description, tags=["tether"])],
    )
    scheme = _scheme(authenticator)
    if scheme is not None:
        found.security_schemes["bearer"].CopyFrom(scheme)
        found.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return found


def _scheme(authenticator: Authenticator) -> SecurityScheme | None:
    """How callers authenticate, as the card says it: a bearer token (an API key, a JWT), or nothing."""
    if isinstance(authenticator, NoAuth):
        return None
    if isinstance(authenticator, ApiKeyAuth):
        described = "an API key made with `tether keys create` (or the X-API-Key header)"
        return SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description=described))
    bearer = HTTPAuthSecurityScheme(scheme="Bearer", bearer_format="JWT" if isinstance(authenticator, JWTAuth) else "")
    return SecurityScheme(http_auth_security_scheme=bearer)


def _version() -> str:
    """tether's version (the agent has none of its own)."""
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


# --- tasks from runs ---------------------------------------------------------------------------------


def _text_message(text: str, task_id: str, context_id: str, data: dict[str, Any]) -> Message:
    parts = [Part(text=text), Part(data=ParseDict(data, Value()))]
    message_id = f"{task_id}-{data['status']}"  # one per status the run reaches
    return Message(message_id=message_id, role=Role.ROLE_AGENT, task_id=task_id, context_id=context_id, parts=parts)


def status_of(view: dict[str, Any], context_id: str) -> TaskStatus:
    """The task status of a run's view: its state, and for a run waiting or ended short, a message saying why."""
    run_id, status = view["run_id"], view["status"]
    state = state_of(status)
    found = TaskStatus(state=state)
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        found.message.CopyFrom(_waiting(view, context_id))
    elif state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED):
        said = f"the run ended {status}" + (f": {view['reason']}" if view.get("reason") else "")
        found.message.CopyFrom(_text_message(said, run_id, context_id, {"status": status, "reason": view["reason"]}))
    return found


def _waiting(view: dict[str, Any], context_id: str) -> Message:
    """What a run waiting for a person waits on, and where an approver decides it."""
    run_id = view["run_id"]
    calls = [
        {**c, "arguments": redact(c["arguments"]), "decide": f"POST /runs/{c['run_id']}/approvals/{c['call_id']}"}
        for c in view["pending_approvals"]
    ]
    if calls:
        named = ", ".join(f"{c['tool']} (call {c['call_id']})" for c in calls)
        text = (
            f"run {run_id} waits for approval of {named}: a caller with the {APPROVER_ROLE!r} role decides it"
            f" with {calls[0]['decide']} (GET /approvals lists it)"
        )
    else:
        unknown = view.get("unknown_outcomes") or []
        calls = [{**c, "arguments": redact(c["arguments"])} for c in unknown]
        text = (
            f"run {run_id} waits for a person to settle the unknown outcome of a call: a caller with the"
            f" {APPROVER_ROLE!r} role does so with POST /runs/{run_id}/calls/{{call_id}}/reconcile"
        )
    return _text_message(text, run_id, context_id, {"run_id": run_id, "status": view["status"], "calls": calls})


def _answer(view: dict[str, Any]) -> Artifact:
    return Artifact(artifact_id=f"{view['run_id']}-{ANSWER}", name=ANSWER, parts=[Part(text=view["output"] or "")])


def task_of(view: dict[str, Any], context_id: str, prompt: Message | None = None) -> Task:
    """The A2A task a run's view is: the run's id, its state, its answer once completed."""
    task = Task(id=view["run_id"], context_id=context_id, status=status_of(view, context_id))
    if view["status"] == Status.COMPLETED.value:
        task.artifacts.append(_answer(view))
    if prompt is not None:
        task.history.append(prompt)
    return task


# --- the request handler -----------------------------------------------------------------------------


class RunTasks(RequestHandler):
    """The SDK's request handler over a served Agent's runs: a task is a run, a context a conversation."""

    def __init__(self, runs: AgentRuns, *, max_prompt_chars: int) -> None:
        self.runs = runs
        self.max_prompt_chars = max_prompt_chars

    # --- sending -------------------------------------------------------------------

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        caller = _caller(context)
        run_id, context_id = await self._start(params, caller)
        if params.configuration.return_immediately:
            view = await self._view(run_id, caller)
        else:
            view = await self._settled(run_id, caller)
        return task_of(view, context_id, _echo(params.message, run_id, context_id))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        caller = _caller(context)
        with self._streaming(caller):  # before the run starts: a stream refused starts nothing
            run_id, context_id = await self._start(params, caller)
            async for event in self._events(run_id, context_id, caller, _echo(params.message, run_id, context_id)):
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        caller = _caller(context)
        with self._streaming(caller):
            view = await self._view(params.id, caller)
            if view["status"] not in MOVING and view["status"] not in WAITING_FOR_A_PERSON:
                raise UnsupportedOperationError(
                    message=f"task {params.id} has ended ({view['status']}): GetTask shows it"
                )
            context_id = await self._context_of(params.id, caller)
            async for event in self._events(params.id, context_id, caller, None, past_a_person=True):
                yield event

    @contextlib.contextmanager
    def _streaming(self, caller: Caller) -> Iterator[None]:
        """Hold one of ``caller``'s event streams (``RunService.hold_stream``) while a stream is open; past the
        limit the error of its 429, before the stream starts."""
        try:
            give_back = self.runs.hold_stream(caller.id)
        except Problem as exc:
            raise _error(exc, "") from None
        try:
            yield
        finally:
            give_back()

    async def _start(self, params: SendMessageRequest, caller: Caller) -> tuple[str, str]:
        """Start the run a message asks for: a new conversation's first turn, or its ``contextId``'s next one."""
        message = params.message
        if message.task_id:
            raise UnsupportedOperationError(
                message=f"task {message.task_id} takes no more input: a run waiting for approval is decided by an"
                " approver (POST /runs/{run_id}/approvals/{call_id}); send a message with its contextId for a next turn"
            )
        text = "\n".join(get_text_parts(message.parts)).strip()
        if not text:
            raise InvalidParamsError(message="the message has no text part; this agent takes text")
        if len(text) > self.max_prompt_chars:
            raise InvalidParamsError(message=f"the message's text is longer than {self.max_prompt_chars} characters")
        try:
            self.runs.admit(caller.id)  # before a new conversation is recorded: none is left without its first turn
            conversation_id = message.context_id or await self.runs.open_conversation(caller)
            live = await self.runs.begin(caller, text, conversation_id)
        except Problem as exc:
            if (
                exc.status == 404
                and message.context_id
                and await self._outside_a_conversation(message.context_id, caller)
            ):
                raise TaskNotFoundError(
                    message=f"context {message.context_id} is a task started outside a conversation (POST /runs),"
                    " which has no next turn: send the message without a contextId to start a conversation"
                ) from None
            raise _error(exc, f"no context {message.context_id}") from None
        return live.run_id, conversation_id

    async def _outside_a_conversation(self, context_id: str, caller: Caller) -> bool:
        """Whether ``context_id`` is the id of one of the caller's runs in no conversation (its own context)."""
        found = await self.runs.io(self.runs.store.list_runs, principal_id=caller.id, limit=1, context=context_id)
        return bool(found) and found[0].run_id == context_id and found[0].conversation_id is None

    async def _events(
        self, run_id: str, context_id: str, caller: Caller, prompt: Message | None, *, past_a_person: bool = False
    ) -> AsyncIterator[Event]:
        """The task first, then each change of its status; a completed task's answer just before its last status.

        ``past_a_person``: a task waiting for input is followed through the decision (``SubscribeToTask``).
        """
        first = True
        try:
            async for view in changes(self.runs, run_id, caller, past_a_person=past_a_person):
                if first:
                    first = False
                    yield task_of(view, context_id, prompt)
                    continue
                if view["status"] == Status.COMPLETED.value:
                    yield TaskArtifactUpdateEvent(
                        task_id=run_id, context_id=context_id, artifact=_answer(view), last_chunk=True
                    )
                yield TaskStatusUpdateEvent(task_id=run_id, context_id=context_id, status=status_of(view, context_id))
        except Problem as exc:
            raise _error(exc, f"no task {run_id}") from None

    # --- reading and cancelling -------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        caller = _caller(context)
        view = await self._view(params.id, caller)
        return task_of(view, await self._context_of(params.id, caller))

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        caller = _caller(context)
        view = await self._view(params.id, caller)
        if Status(view["status"]).terminal:
            raise TaskNotCancelableError(message=f"task {params.id} has ended ({view['status']})")
        try:
            view = await self.runs.cancel_as(params.id, caller)
        except Problem as exc:
            raise _error(exc, f"no task {params.id}", conflict=TaskNotCancelableError) from None
        return task_of(view, await self._context_of(params.id, caller))

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        from tether.serve.api import _after, _cursor

        caller = _caller(context)
        if params.page_size < 0:  # an int32 on the wire; 0 (unset) is the default page
            raise InvalidParamsError(message=f"the page size must be 0 (the default) or more, not {params.page_size}")
        limit = min(params.page_size or _LIST_PAGE, _MAX_LIST_PAGE)
        statuses = statuses_in(params.status) if params.status else None
        try:
            before = _after(params.page_token or None)
        except Problem as exc:
            raise InvalidParamsError(message=exc.detail) from None
        within = params.context_id or None  # filtered in the store, so that a page is full
        found, after = await self.runs.page(caller, statuses=statuses, limit=limit, before=before, context=within)
        tasks = [
            Task(
                id=r["run_id"],
                context_id=r["conversation_id"] or r["run_id"],
                status=TaskStatus(state=state_of(r["status"])),
            )
            for r in found
        ]
        return ListTasksResponse(tasks=tasks, next_page_token="" if after is None else _cursor(after), page_size=limit)

    async def _view(self, run_id: str, caller: Caller) -> dict[str, Any]:
        try:
            return await self.runs.view(run_id, caller)
        except Problem as exc:
            raise _error(exc, f"no task {run_id}") from None

    async def _settled(self, run_id: str, caller: Caller) -> dict[str, Any]:
        try:
            return await settled(self.runs, run_id, caller)
        except Problem as exc:
            raise _error(exc, f"no task {run_id}") from None

    async def _context_of(self, run_id: str, caller: Caller) -> str:
        """The conversation a run is a turn of (its own id for a run started over HTTP outside one)."""
        stored = await self.runs.io(self.runs.store.load, run_id, check=False)
        # The caller's runs listed from just above this one (ids are 32 hex digits, so none sorts between it and
        # its id + "0"): the first is this run, with its conversation.
        found = await self.runs.io(
            self.runs.store.list_runs, principal_id=caller.id, limit=1, before=(stored.created_at, run_id + "0")
        )
        if not found or found[0].run_id != run_id:
            return run_id
        summary = found[0]
        return summary.conversation_id or run_id

    # --- not offered ---------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError(message="push notifications are not offered; stream or poll a task")

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError(message="push notifications are not offered; stream or poll a task")

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError(message="push notifications are not offered; stream or poll a task")

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError(message="push notifications are not offered; stream or poll a task")

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError(message="this agent has no extended card")


def _echo(message: Message, task_id: str, context_id: str) -> Message:
    """The caller's message as the task's history holds it: with its task and context."""
    echoed = Message()
    echoed.CopyFrom(message)
    echoed.task_id, echoed.context_id = task_id, context_id
    if echoed.role == Role.ROLE_UNSPECIFIED:
        echoed.role = Role.ROLE_USER
    return echoed


def _error(problem: Problem, not_found: str, *, conflict: type[A2AError] = InvalidRequestError) -> A2AError:
    """The A2A error of a ``Problem`` from the runs: a missing (or someone else's) task, a conflict, a refusal."""
    if problem.status == 404:
        return TaskNotFoundError(message=not_found)
    if problem.status == 409:
        return conflict(message=problem.detail)
    if problem.status in (400, 403, 422):
        return InvalidParamsError(message=problem.detail)
    return InternalError(message=problem.detail)  # 429, 503: try again later; the detail says so


def _caller(context: ServerCallContext) -> Caller:
    caller = context.state.get(_CALLER)
    if not isinstance(caller, Caller):  # every request passes the authenticator before the SDK sees it
        raise InternalError(message="the request has no caller")
    return caller


class _CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, holding the caller the authenticator found for the request."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[_CALLER] = request.state.tether_caller
        return context


# --- the routes --------------------------------------------------------------------------------------

# The SDK's loggers that log a request it cannot read with the parser's error, which quotes the request.
_SDK_LOGGERS = ("a2a.server.routes.jsonrpc_dispatcher", "a2a.compat.v0_3.jsonrpc_adapter")


# The dispatcher's line for each error it answers: its message and data quote the request (A2A 1.0's parser
# names the value it could not read), and its id is the caller's.
_REQUEST_ERROR = "Request Error (ID: %s): Code=%s, Message='%s'%s"


class _Withheld(logging.Filter):
    """Keeps an exception's type and where it was raised in the log, not its message; an error answered, by its
    JSON-RPC code alone; of any other line, its text without the values put into it.

    pydantic's errors quote what they refused (``input_value``), protobuf's
    parser the value it could not read: the caller's text, which may hold a
    secret. What a caller sent reaches the log only when asked
    (``log_content``), as everywhere else in tether.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            kind, _, trace = record.exc_info
            where = "".join(traceback.format_tb(trace)).rstrip()
            record.msg = f"{record.getMessage()}: {kind.__name__ if kind else 'error'} (its message is withheld: it may"
            record.msg += f" quote the request)\n{where}"
            record.args, record.exc_info, record.exc_text = (), None, None
        elif record.msg == _REQUEST_ERROR and isinstance(record.args, tuple) and len(record.args) == 4:
            code = record.args[1] if isinstance(record.args[1], int) else "?"
            record.msg = f"Request Error: Code={code} (its id, message and data are withheld: they may quote"
            record.msg += " the request)"
            record.args = ()
        elif record.args:
            record.msg = f"{str(record.msg).replace('%s', '...')} (withheld: it may quote the request)"
            record.args = ()
        return True


def _withhold_request_text() -> None:
    for name in _SDK_LOGGERS:
        found = logging.getLogger(name)
        if not any(isinstance(f, _Withheld) for f in found.filters):
            found.addFilter(_Withheld())


def _unreadable(body: bytes) -> tuple[A2AError | JSONRPCError, str | int | None] | None:
    """The error for a body tether does not read as it reads all JSON from outside (``nesting.loads``), with the
    id its answer echoes; ``None`` for a body the SDK may read (or refuse as not JSON: it answers that itself).

    Not UTF-8, or nested past ``MAX_DEPTH``: no JSON text tether can read, a parse error (its id unread, null).
    A lone UTF-16 surrogate is JSON but no text (no store, hash or answer can hold it): in ``params`` the
    method's parameters are invalid, as A2A 1.0's parser says of them, and the id is echoed; in the id or the
    method, the request is none.
    """
    try:
        nesting.loads(body, nesting.MAX_DEPTH, object_pairs_hook=no_duplicates)
    except DuplicateKey as exc:  # JSON no deeper than the limit: measured first
        return _duplicate(json.loads(nesting.text_of(body), object_pairs_hook=tuple), exc)
    except nesting.NestedTooDeep as exc:
        return JSONParseError(message=f"the body is {exc}"), None
    except UnicodeDecodeError:
        return JSONParseError(message="the body is not UTF-8"), None
    except nesting.NotText as exc:
        request = json.loads(nesting.text_of(body))  # JSON no deeper than the limit: measured above
        envelope = {k: v for k, v in request.items() if k != "params"} if isinstance(request, dict) else None
        if envelope is None or not nesting.utf8(json.dumps(envelope, ensure_ascii=False)):
            return InvalidRequestError(message=f"the request is {exc}"), None
        found = envelope.get("id")
        return InvalidParamsError(message=f"the params are {exc}"), found if _an_id(found) else None
    except ValueError:  # not JSON at all: the SDK's own parse error
        pass
    return None


def _duplicate(pairs: object, exc: DuplicateKey) -> tuple[A2AError | JSONRPCError, str | int | None]:
    """A body holding a key twice in one object (``pairs``: its objects as tuples of pairs): which value counts is
    anybody's guess, so none does. In ``params`` the method's parameters are invalid, and the id is echoed; in
    the envelope (the id itself, say) the request is none."""
    top = pairs if isinstance(pairs, tuple) else ()
    keys = [key for key, _ in top]
    if len(set(keys)) < len(keys) or "params" not in keys:
        return InvalidRequestError(message=f"the request holds a {exc}"), None
    found = dict(top).get("id")
    return InvalidParamsError(message=f"the params hold a {exc}"), found if _an_id(found) else None


def _an_id(value: object) -> bool:
    """Whether ``value`` is a JSON-RPC id an answer can echo (the SDK's rule: a string or an integer)."""
    return isinstance(value, str | int) and not isinstance(value, bool)


def add_routes(api: FastAPI, runs: AgentRuns, authenticator: Authenticator, *, max_prompt_chars: int) -> None:
    """Serve ``runs`` over A2A on ``api``: the agent card (public) and the JSON-RPC endpoint (``authenticator``'s)."""
    _withhold_request_text()
    dispatcher = JsonRpcDispatcher(
        RunTasks(runs, max_prompt_chars=max_prompt_chars), context_builder=_CallerContext(), enable_v0_3_compat=True
    )

    async def rpc(request: Request) -> Response:
        # The SDK parses any body as JSON; a form a web page posts (text/plain needs no CORS preflight) must not
        # start runs on a service that trusts its network (--auth none).
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            raise Problem(415, "the A2A endpoint takes JSON-RPC requests as application/json")
        request.state.tether_caller = Caller(await authenticator.authenticate(request))  # a 401 problem if not
        try:
            body = await request.body()  # kept for the SDK, which reads it next
        except HTTPException as exc:  # the service's body limit, answered as the SDK answers it
            if exc.status_code != 413:
                raise
            return JSONResponse(build_error_response(None, InvalidRequestError(message=exc.detail)))
        refused = _unreadable(body)
        if refused is not None:
            error, request_id = refused
            return JSONResponse(build_error_response(request_id, error))
        return await dispatcher.handle_requests(request)

    async def agent_card(request: Request) -> Response:
        return JSONResponse(agent_card_to_dict(card(runs.agent, authenticator, str(request.base_url))))

    api.router.routes.append(Route(RPC_PATH, rpc, methods=["POST"]))
    api.router.routes.append(Route(CARD_PATH, agent_card, methods=["GET"]))
