"""A worker process: polls a task queue, runs workflows and the activities of one model and its tools."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from tether.models.base import Model
from tether.temporal.activities import Activities
from tether.temporal.workflow import RunWorkflow
from tether.tools.tool import Tool

# When a worker holding a run's sticky cache dies, the next workflow task waits this long before any
# worker may take it (Temporal's default is 10 s).
STICKY_SCHEDULE_TO_START = timedelta(seconds=3)
SHUTDOWN_MARGIN = timedelta(seconds=5)


def make_worker(
    client: Client,
    task_queue: str,
    model: Model,
    tools: Iterable[Tool],
    *,
    store: Any = None,
    max_tokens: int | None = None,
) -> Worker:
    """A worker for ``task_queue``; shutting down waits for the longest tool timeout before cancelling.

    ``store`` is the run store the runs are recorded in (``open_store``'s
    default, ``$TETHER_DB``, when None); every worker of a task queue must
    share it: a SQLite file on one host, PostgreSQL across hosts.
    """
    tools = list(tools)
    if store is None:
        from tether.store import open_store

        store = open_store()
    activities = Activities(model, tools, store, max_tokens=max_tokens)
    longest = max((t.timeout or 0.0 for t in tools), default=0.0)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=activities.all(),
        sticky_queue_schedule_to_start_timeout=STICKY_SCHEDULE_TO_START,
        graceful_shutdown_timeout=timedelta(seconds=longest) + SHUTDOWN_MARGIN,
    )
