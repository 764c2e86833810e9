"""A worker process: polls a task queue, runs workflows and the activities of one model and its tools."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from tether.drivers.temporal.activities import Activities
from tether.drivers.temporal.workflow import RunWorkflow
from tether.models.base import Model
from tether.tools.tool import Tool

if TYPE_CHECKING:
    from tether.drivers.local.runner import PrincipalResolver
    from tether.store.base import RunStore

# When a worker holding a run's sticky cache dies, the next workflow task waits this long before any
# worker may take it (Temporal's default is 10 s).
STICKY_SCHEDULE_TO_START = timedelta(seconds=3)
SHUTDOWN_MARGIN = timedelta(seconds=5)


class HeartbeatDefault(Interceptor):
    """The heartbeat timeout of the runs this worker drives that were started without one (``start_run``'s
    ``heartbeat_seconds``).

    It fills in the workflow's input before the workflow reads it, on every
    replay too. Temporal matches a replayed activity by its id and type, not
    its timeouts: workers of one task queue may differ here, each scheduling
    the run's next activities with its own.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        seconds = self.seconds

        class FillHeartbeat(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                start = input.args[0] if input.args else None
                if isinstance(start, dict) and not start.get("heartbeat_seconds"):
                    input.args = [start | {"heartbeat_seconds": seconds}, *input.args[1:]]
                return await self.next.execute_workflow(input)

        return FillHeartbeat


def make_worker(
    client: Client,
    task_queue: str,
    model: Model,
    tools: Iterable[Tool],
    *,
    store: RunStore | None = None,
    max_tokens: int | None = None,
    heartbeat_seconds: float | None = None,
    resolve_principal: PrincipalResolver | None = None,
) -> Worker:
    """A worker for ``task_queue``; shutting down waits for the longest tool timeout before cancelling.

    ``store`` is the run store the runs are recorded in (``open_store``'s
    default, ``$TETHER_DB``, when None); every worker of a task queue must
    share it: a SQLite file on one host, PostgreSQL across hosts.
    ``heartbeat_seconds`` is the heartbeat timeout of runs started without
    one (else the workflow's default): how soon a dead worker's call is known.
    ``resolve_principal`` is asked before each call runs, as an ``Agent``'s
    is: a call the run's principal may no longer make (the resolver returns
    None, or a principal without the tool's scopes) does not run and is
    answered ``forbidden``; one it may make runs for the principal as
    resolved. Give every worker of a task queue the same one.
    """
    tools = list(tools)
    if store is None:
        from tether.store import open_store

        store = open_store()
    activities = Activities(model, tools, store, max_tokens=max_tokens, resolve_principal=resolve_principal)
    longest = max((t.timeout or 0.0 for t in tools), default=0.0)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=activities.all(),
        interceptors=[] if heartbeat_seconds is None else [HeartbeatDefault(heartbeat_seconds)],
        sticky_queue_schedule_to_start_timeout=STICKY_SCHEDULE_TO_START,
        graceful_shutdown_timeout=timedelta(seconds=longest) + SHUTDOWN_MARGIN,
    )
