"""Starting a served Agent: ``tether serve TARGET`` loads it, finds who is calling, then runs uvicorn.

Every configuration error (the target, the run store, ``--workers`` without
a store processes can share, ``--auth none`` off loopback) is raised before
anything listens. With more than one worker each process builds the app
from the environment (``app_from_env``), so what the options say is put
there first.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import uvicorn
from fastapi import FastAPI

from tether.core.errors import ConfigurationError
from tether.serve.app import app, store_target
from tether.serve.auth import authenticator_from
from tether.serve.identity import Authenticator
from tether.serve.settings import POSTGRES_SCHEMES, Settings
from tether.serve.target import load_agent
from tether.serve.temporal import DEFAULT_TASK_QUEUE, check_engine, check_reachable
from tether.store import open_store
from tether.store.records import DEFAULT_LEASE_SECONDS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
NO_AUTH = "none"
# What the worker processes of ``--workers N`` read (``app_from_env``).
TARGET_ENV = "TETHER_SERVE_TARGET"
AUTH_ENV = "TETHER_SERVE_AUTH"
STORE_ENV = "TETHER_DB"
LEASE_ENV = "TETHER_LEASE_SECONDS"
PROTOCOLS_ENV = "TETHER_SERVE_PROTOCOLS"  # a2a, mcp: comma-separated
ENGINE_ENV = "TETHER_SERVE_ENGINE"  # local or temporal; with temporal, the server and task queue below
TEMPORAL_ENV = "TETHER_TEMPORAL"
TASK_QUEUE_ENV = "TETHER_TASK_QUEUE"
PROTOCOL_MODULES = {"a2a": "tether.serve.a2a", "mcp": "tether.serve.mcp_http"}  # each needs the extra of its name


def authenticator(spec: str, host: str, store: str | None) -> Authenticator:
    """The authenticator ``--auth SPEC`` names (``tether.serve.auth``), for a service listening on ``host``."""
    return authenticator_from(spec, open_store(store_target(store)), host=host)


def check_protocols(a2a: bool, mcp: bool) -> None:
    """Raise ``ConfigurationError`` naming the extra to install when a protocol asked for cannot be served."""
    for name, asked in (("a2a", a2a), ("mcp", mcp)):
        if asked:
            try:
                importlib.import_module(PROTOCOL_MODULES[name])
            except ImportError as exc:
                raise ConfigurationError(
                    f"--{name} needs the {name} extra: pip install 'tether[{name}]' ({exc.name} is missing)"
                ) from None


# HTTP/1.1 parsed by h11, whose request head is bounded (a larger one is a 400 before the app sees it): the default
# parser buffers headers without limit, so a client could grow the process by hundreds of MB before authenticating.
MAX_HEAD_BYTES = 64 * 1024
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's
HTTP_SERVER: dict[str, Any] = {"http": "h11", "h11_max_incomplete_event_size": MAX_HEAD_BYTES}


def serve(
    target: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    store: str | None = None,
    workers: int = 1,
    auth: str = NO_AUTH,
    lease_seconds: float | None = None,
    a2a: bool = False,
    mcp: bool = False,
    elicitation_seconds: float | None = None,
    engine: str = "local",
    temporal: str | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
) -> None:
    """Serve the Agent ``target`` names until stopped; a configuration error is raised before anything listens."""
    agent = load_agent(target)
    check_protocols(a2a, mcp)
    check_engine(agent, engine, temporal, a2a=a2a)
    if engine == "temporal" and temporal:
        check_reachable(temporal)
    where = store_target(store)
    if workers > 1 and not (isinstance(where, str) and where.startswith(POSTGRES_SCHEMES)):
        raise ConfigurationError(
            f"--workers {workers} needs a run store several processes can share: "
            f"--db postgresql://... (or TETHER_DB); the SQLite file {where} serves one process"
        )
    lease = lease_seconds or Settings.from_env().lease_seconds  # TETHER_LEASE_SECONDS, checked, else the default
    who = authenticator(auth, host, store)
    log_level = os.environ.get("TETHER_LOG_LEVEL", "info")
    if log_level not in LOG_LEVELS:
        raise ConfigurationError(f"TETHER_LOG_LEVEL={log_level!r}: give one of {', '.join(LOG_LEVELS)}")
    if workers == 1:
        served = app(agent, authenticator=who, store=where, lease_seconds=lease, a2a=a2a, mcp=mcp,
                     mcp_elicitation_seconds=elicitation_seconds, engine=engine, temporal=temporal,
                     task_queue=task_queue)  # fmt: skip
        uvicorn.run(served, host=host, port=port, log_level=log_level, **HTTP_SERVER)
        return
    protocols = ",".join(name for name, asked in (("a2a", a2a), ("mcp", mcp)) if asked)
    os.environ.update({TARGET_ENV: target, AUTH_ENV: auth, STORE_ENV: str(where), LEASE_ENV: repr(lease),
                       PROTOCOLS_ENV: protocols, ENGINE_ENV: engine, TASK_QUEUE_ENV: task_queue})  # fmt: skip
    if temporal:
        os.environ[TEMPORAL_ENV] = temporal
    uvicorn.run(
        "tether.serve.launch:app_from_env",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        **HTTP_SERVER,
    )


def app_from_env() -> FastAPI:
    """For uvicorn's worker processes: the app ``serve`` put in the environment.

    Its MCP endpoint keeps no sessions: the processes share one port, and a client's next request may reach
    any of them."""
    env = os.environ
    store = env.get(STORE_ENV)
    lease = float(env.get(LEASE_ENV) or DEFAULT_LEASE_SECONDS)
    who = authenticator(env.get(AUTH_ENV) or NO_AUTH, DEFAULT_HOST, store)  # ``serve`` checked it against --host
    protocols = set((env.get(PROTOCOLS_ENV) or "").split(","))
    return app(load_agent(env[TARGET_ENV]), authenticator=who, store=store, lease_seconds=lease,
               a2a="a2a" in protocols, mcp="mcp" in protocols, mcp_stateless=True,
               engine=env.get(ENGINE_ENV) or "local", temporal=env.get(TEMPORAL_ENV),
               task_queue=env.get(TASK_QUEUE_ENV) or DEFAULT_TASK_QUEUE)  # fmt: skip
