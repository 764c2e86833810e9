"""The routes of a served Agent: runs, conversations, approvals, health.

Routes stay thin: who is calling comes from the ``Authenticator`` (a
dependency, asked on every request but the health checks), what a caller
may see and do is decided in ``tether.serve.runs``. A caller sees only its
own runs and conversations; anything else is the 404 a missing id gets.
"""

# No ``from __future__ import annotations``: the routes' annotations name classes made per app, which FastAPI
# must see as objects, not strings.
import base64
import binascii
import contextlib
import json
import math
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.core.machine import Status
from tether.core.nesting import MAX_DEPTH, value_nested_deeper
from tether.drivers.local.durable import MAX_REASON_CHARS
from tether.serve.identity import Authenticator
from tether.serve.problems import Problem
from tether.serve.runs import AgentRuns, Caller
from tether.serve.service import EventStreamResponse, storable
from tether.serve.settings import DEFAULT_APPROVALS_PAGE
from tether.store import StoreError

DEFAULT_MAX_PROMPT_CHARS = 20_000  # a prompt or a turn's text; longer is a 422
DEFAULT_RUNS_PAGE = 50
MAX_PAGE = 500
MAX_CURSOR_CHARS = 200  # a page cursor this service gives is far shorter
MAX_EVENT_ID = 2**63 - 1  # events are numbered in the store with 64-bit integers


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ApprovalRequest(_Strict):
    approve: bool
    # The argument fingerprint the approver saw (from the inbox); a decision for other arguments is refused.
    fingerprint: Annotated[str, Field(min_length=1, max_length=200)]
    reason: Annotated[str | None, Field(max_length=MAX_REASON_CHARS)] = None


class ReconcileRequest(_Strict):
    executed: bool  # whether the call took effect; false clears its intent (never re-run blindly)
    result: Any = None  # what it returned, when it did: the model reads it as the call's result (``_a_result``)

    @field_validator("result")
    @classmethod
    def _a_result(cls, value: Any) -> Any:
        """JSON a tool could have returned (``tether.tools.toolbox``): no NaN or Infinity, which Python's parser
        reads and writes back into the model's history, and nested no deeper than ``MAX_DEPTH``."""
        if value_nested_deeper(value, MAX_DEPTH):
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            raise ValueError("NaN and Infinity are not JSON numbers") from None
        return value


def _cursor(after: tuple[float, str]) -> str:
    """Where the next page starts, opaque to the client: the last run listed."""
    created_at, run_id = after
    return base64.urlsafe_b64encode(json.dumps([created_at, run_id]).encode()).decode()


def _after(cursor: str | None) -> tuple[float, str] | None:
    """Where a page starts, from a cursor ``_cursor`` made; anything else (the client can write base64 JSON too:
    NaN, a run id holding NUL or a lone surrogate, which a store cannot look up) is a 422 problem."""
    if cursor is None:
        return None
    created_at = run_id = None
    if len(cursor) <= MAX_CURSOR_CHARS:  # A2A's page tokens come unbounded
        with contextlib.suppress(ValueError, TypeError, binascii.Error):
            created_at, run_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    if isinstance(created_at, int | float) and not isinstance(created_at, bool) and isinstance(run_id, str):
        with contextlib.suppress(OverflowError):  # an integer too large for a float: no time this service gave
            if math.isfinite(float(created_at)) and storable(run_id):
                return float(created_at), run_id
    raise Problem(422, "cursor: not a cursor this service gave")


def _last_event(header: str | None) -> int:
    if header is None:
        return 0
    # "²" is a digit to str.isdigit, not to int; past MAX_EVENT_ID no event has an id (nor can a store be asked).
    if not (header.strip().isascii() and header.strip().isdigit()) or int(header) > MAX_EVENT_ID:
        raise Problem(422, "Last-Event-ID: not an event id this service sent")
    return int(header)


def routes(app: FastAPI, runs: AgentRuns, authenticator: Authenticator, *, max_prompt_chars: int) -> None:
    """Add the API's routes to ``app``."""

    class RunRequest(_Strict):
        prompt: Annotated[str, Field(min_length=1, max_length=max_prompt_chars)]

    class TurnRequest(_Strict):
        text: Annotated[str, Field(min_length=1, max_length=max_prompt_chars)]

    async def caller(request: Request) -> Caller:
        return Caller(await authenticator.authenticate(request))

    Who = Annotated[Caller, Depends(caller)]

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        """The run store answers."""
        try:
            await runs.io(runs.store.list_runs, limit=1)
        except StoreError:
            raise Problem(503, "the run store does not answer", headers={"Retry-After": "5"}) from None
        return {"status": "ready"}

    # --- runs ----------------------------------------------------------------------

    @app.post("/runs", status_code=202)
    async def start_run(body: RunRequest, who: Who, response: Response) -> dict[str, Any]:
        """Start a run; answered once it is recorded (a restart drives it on)."""
        live = await runs.begin(who, body.prompt)
        response.headers["Location"] = f"/runs/{live.run_id}"
        return {"run_id": live.run_id, "status": Status.READY.value}

    @app.get("/runs")
    async def list_runs(
        who: Who,
        status: Annotated[Status | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_RUNS_PAGE,
        cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    ) -> dict[str, Any]:
        """The caller's runs, newest first; ``next_cursor`` gets the next page."""
        statuses = None if status is None else {status.value}
        found, after = await runs.page(who, statuses=statuses, limit=limit, before=_after(cursor))
        return {"runs": found, "next_cursor": None if after is None else _cursor(after)}

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, who: Who) -> dict[str, Any]:
        """A run: status, output, steps, calls waiting for a decision."""
        return await runs.view(run_id, who)

    @app.post("/runs/{run_id}/cancel")
    async def cancel_run(run_id: str, who: Who) -> dict[str, Any]:
        """Cancel a run that has not finished."""
        return await runs.cancel_as(run_id, who)

    @app.get("/runs/{run_id}/events")
    async def run_events(
        run_id: str, who: Who, last_event_id: Annotated[str | None, Header(max_length=20)] = None
    ) -> EventStreamResponse:
        """The run's events (server-sent events), from the store then live, until it finishes or pauses.

        ``Last-Event-ID`` (an event's ``id``) resumes after that event; any process serving the store answers.
        A caller holds at most ``Settings.max_event_streams_per_user`` streams open at once: one more is a 429.
        """
        return EventStreamResponse(await runs.follow(run_id, who, _last_event(last_event_id)))

    # --- conversations -------------------------------------------------------------

    @app.post("/conversations", status_code=201)
    async def create_conversation(who: Who) -> dict[str, Any]:
        """A new conversation of the caller's. A caller has at most ``Settings.max_empty_conversations_per_user``
        conversations with no turn yet (each counts for ``empty_conversation_seconds``): one more is a 429."""
        return {"id": await runs.open_conversation(who)}

    @app.post("/conversations/{conversation_id}/turns", status_code=202)
    async def send_turn(conversation_id: str, body: TurnRequest, who: Who, response: Response) -> dict[str, Any]:
        """The conversation's next turn, a run that sees every earlier turn; 409 while the last one has not finished."""
        live = await runs.begin(who, body.text, conversation_id)
        response.headers["Location"] = f"/runs/{live.run_id}"
        return {"run_id": live.run_id, "conversation_id": conversation_id, "status": Status.READY.value}

    @app.get("/conversations/{conversation_id}")
    async def get_conversation(conversation_id: str, who: Who) -> dict[str, Any]:
        """The conversation's transcript: its turns, what the user and the agent said in each."""
        return await runs.transcript(conversation_id, who)

    # --- approvals -----------------------------------------------------------------

    @app.get("/approvals")
    async def approvals(
        who: Who, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_APPROVALS_PAGE
    ) -> dict[str, Any]:
        """Calls waiting for a decision: of the caller's runs, and (with the approver role) all addressed to it."""
        return {"approvals": await runs.inbox(who, limit)}

    @app.post("/runs/{run_id}/approvals/{call_id}")
    async def decide(run_id: str, call_id: str, body: ApprovalRequest, who: Who) -> dict[str, Any]:
        """Approve or deny a call, bound to its fingerprint (needs the approver role)."""
        return await runs.decide_as(
            run_id, call_id, who, approved=body.approve, reason=body.reason, fingerprint=body.fingerprint
        )

    @app.post("/runs/{run_id}/calls/{call_id}/reconcile")
    async def settle(run_id: str, call_id: str, body: ReconcileRequest, who: Who) -> dict[str, Any]:
        """Say what became of a call whose outcome is unknown (needs the approver role)."""
        return await runs.reconcile_as(run_id, call_id, who, executed=body.executed, result=body.result)
