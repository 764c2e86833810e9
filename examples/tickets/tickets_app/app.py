"""The ticket-support HTTP API (examples/tickets/README.md) and the page that uses it, built on ``tether.serve``.

    app = create_app(Settings.from_env())
    uvicorn.run(app, host="127.0.0.1", port=8000)

Routes stay thin: authentication is a dependency (``tickets_app.auth``),
runs live in ``tether.serve.service``, errors become problem documents in
``tether.serve.problems``. Handlers that touch the run store are ``async``
and reach it through ``RunService.io`` (on the loop for a SQLite file, on a
thread for PostgreSQL); the tickets database is only used from worker threads (password hashes from
threads of their own, see ``tickets_app.throttle``).

Every response carries ``tether.serve.headers.SECURITY_HEADERS``: the page may load scripts,
styles and data only from this origin and may not be framed. There are no
interactive API docs (they would load a script from a CDN into this
origin); the OpenAPI document is at ``/api/openapi.json``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from tether.drivers import tracing
from tether.serve.headers import SecurityHeaders
from tether.serve.problems import Problem, install
from tether.serve.service import EventStreamResponse, RunService, open_run_store, stop_runs_on_sigterm
from tether.tools.context import Principal
from tickets_app.auth import Approver, Authority, CurrentUser
from tickets_app.db import TicketsDB, TicketsDBError, User, verify_password
from tickets_app.settings import DEFAULT_APPROVALS_PAGE, Settings
from tickets_app.throttle import SignInThrottle, Throttled, hashing_executor
from tickets_app.tools import KnowledgeSource, ticket_tools

log = logging.getLogger("tickets_app")

PLACEHOLDER_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tether tickets</title></head>
<body><h1>tether tickets</h1><p>The API is at <code>/api</code>; the web page is not installed.</p></body></html>
"""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TokenRequest(_Strict):
    username: Annotated[str, Field(min_length=1, max_length=100)]
    password: Annotated[str, Field(min_length=1, max_length=1000)]


class RunRequest(_Strict):
    prompt: Annotated[str, Field(min_length=1, max_length=20_000)]


class ApprovalRequest(_Strict):
    approved: bool
    reason: Annotated[str | None, Field(max_length=1000)] = None
    # The argument fingerprint the approver saw; a decision for other arguments is refused.
    fingerprint: Annotated[str | None, Field(max_length=200)] = None


def _user(user: User) -> dict[str, Any]:
    return {"id": user.id, "username": user.username, "role": user.role}


def open_kb(settings: Settings) -> KnowledgeSource | None:
    if settings.kb_index is None:
        return None
    from tickets_app.kb import KnowledgeBase  # torch and numpy load only when there is an index

    return KnowledgeBase.open(settings.kb_index)


def principal_for(user: User) -> Principal:
    """The principal a user's runs act as."""
    # Every scope for now: the ticket tools filter by owner and role themselves (DESIGN.md §7).
    return Principal(user.id, roles=frozenset({user.role}))


def _resolver(tickets: TicketsDB) -> Callable[[Principal], Awaitable[Principal | None]]:
    """The run's principal as the tickets database has it now: a demoted user's call runs with the new role."""

    async def resolve(principal: Principal) -> Principal | None:
        try:
            user = await asyncio.to_thread(tickets.get_user, principal.id)
        except TicketsDBError as exc:
            log.warning("cannot look up %s before a call; the call is refused: %s", principal.id, exc)
            return None
        return None if user is None else principal_for(user)

    return resolve


def create_app(settings: Settings) -> FastAPI:
    """The service, wired to its tickets file and its run store (a SQLite file, or PostgreSQL to share)."""
    authority = Authority.from_secret(settings.jwt_secret, settings.token_ttl)
    tickets = TicketsDB(settings.tickets_db)
    kb = open_kb(settings)
    store = open_run_store(settings)
    hashing = hashing_executor(settings.sign_in.workers)

    runs = RunService(settings, store, ticket_tools(tickets, kb), resolve_principal=_resolver(tickets))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runs.start_keeping()  # runs a crash or a stop cut off carry on from their last checkpoint
        stop_runs_on_sigterm(runs, asyncio.get_running_loop())
        try:
            yield
        finally:
            await runs.aclose()
            hashing.shutdown(wait=True, cancel_futures=True)
            store.close()
            tickets.close()

    app = FastAPI(
        title="tether tickets",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI would load an unpinned script from a CDN into this origin
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.authority = authority
    app.state.tickets = tickets
    app.state.runs = runs
    install(app, max_body_bytes=settings.max_body_bytes)

    app.add_middleware(SecurityHeaders)
    if tracing.available():  # a run started by a request carrying traceparent joins the caller's trace
        app.add_middleware(tracing.TraceContextMiddleware)
    _routes(app, settings, authority, tickets, runs, hashing)
    return app


def _routes(
    app: FastAPI,
    settings: Settings,
    authority: Authority,
    tickets: TicketsDB,
    runs: RunService,
    hashing: ThreadPoolExecutor,
) -> None:
    throttle = SignInThrottle(settings.sign_in)

    @app.get("/api/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/auth/token")
    async def token(body: TokenRequest, request: Request, response: Response) -> dict[str, Any]:
        client = request.client.host if request.client else "unknown"
        try:
            throttle.begin(body.username, client)
        except Throttled as exc:
            raise Problem(exc.status, exc.detail, headers={"Retry-After": str(exc.retry_after)}) from None
        user = None
        try:
            # argon2 is slow on purpose: on threads of its own, so that neither the loop nor the tools wait.
            loop = asyncio.get_running_loop()
            user = await loop.run_in_executor(hashing, verify_password, tickets, body.username, body.password)
        finally:
            throttle.end(body.username, client, succeeded=user is not None)
        if user is None:
            raise Problem(401, "wrong username or password", headers={"WWW-Authenticate": 'Bearer realm="tether"'})
        response.headers["Cache-Control"] = "no-store"  # RFC 6749 §5.1
        return {
            "access_token": authority.issue(user),
            "token_type": "bearer",
            "expires_in": int(authority.ttl),
            "user": _user(user),
        }

    @app.get("/api/me")
    async def me(user: CurrentUser) -> dict[str, Any]:
        return _user(user)

    @app.post("/api/runs", status_code=202)
    async def start_run(body: RunRequest, user: CurrentUser, response: Response) -> dict[str, Any]:
        live = await runs.start(user, body.prompt, principal_for(user))
        response.headers["Location"] = f"/api/runs/{live.run_id}"
        return {"run_id": live.run_id, "status": "ready"}

    @app.get("/api/runs")
    async def list_runs(user: CurrentUser, limit: Annotated[int, Query(ge=1, le=500)] = 50) -> dict[str, Any]:
        return {"runs": await runs.list_for(user, limit)}

    @app.get("/api/runs/{run_id}")
    async def get_run(run_id: str, user: CurrentUser) -> dict[str, Any]:
        return await runs.view(run_id, user)

    @app.get("/api/runs/{run_id}/events")
    async def run_events(run_id: str, user: CurrentUser) -> EventStreamResponse:
        return EventStreamResponse(await runs.follow(run_id, user))

    @app.get("/api/approvals")
    async def approvals(
        user: Approver, limit: Annotated[int, Query(ge=1, le=500)] = DEFAULT_APPROVALS_PAGE
    ) -> dict[str, Any]:
        return {"approvals": await runs.pending_approvals(limit)}

    @app.post("/api/runs/{run_id}/approvals/{call_id}")
    async def decide(run_id: str, call_id: str, body: ApprovalRequest, user: Approver) -> dict[str, Any]:
        return await runs.decide(
            run_id,
            call_id,
            approved=body.approved,
            reason=body.reason,
            fingerprint=body.fingerprint,
            by=user,
        )

    _page(app, settings)


def _page(app: FastAPI, settings: Settings) -> None:
    index = settings.static_dir / "index.html"

    @app.get("/", include_in_schema=False, response_model=None)
    async def page() -> Response:
        if index.is_file():
            return FileResponse(index, media_type="text/html")
        return HTMLResponse(PLACEHOLDER_PAGE)

    app.mount("/static", StaticFiles(directory=settings.static_dir, check_dir=False), name="static")


def main_app() -> FastAPI:
    """For ``uvicorn --factory tickets_app.app:main_app``: settings from the environment."""
    return create_app(Settings.from_env())
