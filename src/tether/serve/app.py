"""``app(agent, authenticator=...)``: any Agent as an HTTP service (FastAPI), its runs durable in the run store.

    from tether.serve import app
    api = app(agent, authenticator=my_authenticator)     # the run store: $TETHER_DB, else the default file
    uvicorn.run(api, host="127.0.0.1", port=8000)

The routes are in ``tether.serve.api``, the runs in ``tether.serve.runs``.
Every error is ``application/problem+json`` (``tether.serve.problems``),
every response carries the security headers of ``tether.serve.headers``, request
bodies and prompts are bounded. The OpenAPI document is at
``/openapi.json``; there are no interactive docs (they would load a script
from a CDN into this origin).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from tether.core.errors import ConfigurationError
from tether.drivers import tracing
from tether.drivers.local.runner import Agent
from tether.serve.api import DEFAULT_MAX_PROMPT_CHARS, routes
from tether.serve.headers import SecurityHeaders
from tether.serve.identity import Authenticator
from tether.serve.page import mount_page
from tether.serve.problems import install
from tether.serve.runs import AgentRuns
from tether.serve.service import open_run_store, stop_runs_on_sigterm
from tether.serve.settings import DEFAULT_MAX_BODY_BYTES, Settings, limits_from_env, run_store
from tether.serve.temporal import DEFAULT_TASK_QUEUE, TemporalRuns, check_engine
from tether.store import default_path
from tether.store.records import DEFAULT_LEASE_SECONDS


def store_target(store: str | os.PathLike[str] | None) -> Path | str:
    """The run store ``store`` names, else ``$TETHER_DB``, else the default file (as ``tether run`` uses)."""
    target = os.fspath(store) if store is not None else os.environ.get("TETHER_DB") or None
    return run_store(target) if target is not None else default_path()


def app(
    agent: Agent,
    *,
    authenticator: Authenticator,
    store: str | os.PathLike[str] | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
    log_content: bool = False,
    a2a: bool = False,
    mcp: bool = False,
    mcp_stateless: bool = False,
    mcp_elicitation_seconds: float | None = None,
    engine: str = "local",
    temporal: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> FastAPI:
    """Serve ``agent``: each caller (as ``authenticator`` says) starts and follows its own runs and conversations.

    ``store``: a SQLite file or a ``postgresql://`` url (several processes may share it), else ``$TETHER_DB``,
    else the default file. Calls that need approval pause their run in the store until a caller holding
    ``APPROVER_ROLE`` decides over HTTP; ``agent``'s own approver is not used.

    ``a2a``: serve the agent over A2A too (``tether.serve.a2a``, the ``a2a`` extra); ``mcp``: as one MCP tool
    over streamable HTTP at ``/mcp`` (``tether.serve.mcp_http``, the ``mcp`` extra). Both behind ``authenticator``.
    ``mcp_stateless``: keep no MCP sessions, for several processes behind one address that do not route a client
    back to the process holding its session (``--workers N`` sets it); nobody is then asked to approve over MCP.
    ``mcp_elicitation_seconds``: how long a question put to an approver's MCP client waits for the answer before
    the call is left to an approver over HTTP (None: ``tether.mcp.server.DEFAULT_ELICITATION_SECONDS``).

    ``engine="temporal"``: each run is a Temporal workflow on the server ``temporal`` (HOST:PORT), driven by the
    ``tether worker`` processes polling ``task_queue`` with their own model and tools (``tether.serve.temporal``);
    they and this service share ``store``. What a workflow cannot carry is a ``ConfigurationError`` here.

    The limits on runs, conversations and event streams per caller come from the environment
    (``tether.serve.settings.limits_from_env``), else their defaults.
    """
    check_engine(agent, engine, temporal, a2a=a2a)  # before the store is opened
    settings = Settings(
        run_db=store_target(store),
        max_body_bytes=max_body_bytes,
        lease_seconds=lease_seconds,
        log_content=log_content,
        system=None,
        **limits_from_env(os.environ),
    )
    opened = open_run_store(settings)
    if engine == "temporal":
        assert temporal is not None
        try:
            runs: AgentRuns = TemporalRuns(settings, opened, agent, address=temporal, task_queue=task_queue)
        except ConfigurationError:
            opened.close()
            raise
    else:
        runs = AgentRuns(settings, opened, agent)
    running: list[Callable[[], AbstractAsyncContextManager[None]]] = []  # what a protocol keeps going while served

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        await runs.start_keeping()  # runs a crash or a stop cut off carry on from their last checkpoint
        stop_runs_on_sigterm(runs, asyncio.get_running_loop())
        try:
            async with AsyncExitStack() as protocols:
                for keep in running:
                    await protocols.enter_async_context(keep())
                yield
        finally:
            await runs.aclose()
            opened.close()

    api = FastAPI(
        title=f"tether: {agent.name}",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI would load an unpinned script from a CDN into this origin
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    api.state.runs = runs
    install(api, max_body_bytes=max_body_bytes)
    api.add_middleware(SecurityHeaders)
    if tracing.available():  # a run started by a request carrying traceparent joins the caller's trace
        api.add_middleware(tracing.TraceContextMiddleware)
    routes(api, runs, authenticator, max_prompt_chars=max_prompt_chars)
    mount_page(api)  # the web page for people (tether.serve.page), on the same API
    if a2a:
        from tether.serve import a2a as a2a_protocol  # the a2a extra, loaded only when asked for

        a2a_protocol.add_routes(api, runs, authenticator, max_prompt_chars=max_prompt_chars)
    if mcp:
        from tether.serve.mcp_http import add_route  # the mcp extra, loaded only when asked for

        running.append(add_route(api, runs, authenticator, max_prompt_chars=max_prompt_chars, stateless=mcp_stateless,
                                 elicitation_seconds=mcp_elicitation_seconds))  # fmt: skip
    return api
