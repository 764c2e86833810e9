"""The workflow replays a recorded run's history (tests/temporal/histories/).

A change to the workflow that breaks determinism fails here, not in production.

To record a history again (only when a change to the workflow is meant to
change what it schedules, and in-flight runs are drained or versioned):
``TETHER_RECORD_HISTORY=1 pytest tests/temporal/test_temporal_run.py``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tether.drivers.temporal.worker import HeartbeatDefault
from tether.drivers.temporal.workflow import WORKFLOW_NAME, RunWorkflow

HISTORY = Path(__file__).parent / "histories" / "order_with_approval.json"


def recorded() -> WorkflowHistory:
    return WorkflowHistory.from_json("recorded-run", json.loads(HISTORY.read_text()))


async def test_the_workflow_replays_a_recorded_run() -> None:
    history = recorded()
    kinds = {e.event_type for e in history.events}
    assert len(history.events) > 20 and kinds  # a whole run: model, tools, an update, the finish
    result = await Replayer(workflows=[RunWorkflow]).replay_workflow(history)
    assert result.replay_failure is None


async def test_a_worker_with_its_own_heartbeat_replays_a_run_recorded_without_one() -> None:
    """``tether worker --heartbeat`` changes the timeouts of the activities it schedules, not what it schedules."""
    replayer = Replayer(workflows=[RunWorkflow], interceptors=[HeartbeatDefault(3.0)])
    result = await replayer.replay_workflow(recorded())
    assert result.replay_failure is None


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class ChangedWorkflow(RunWorkflow):
    """The same workflow but for one change that breaks determinism: a timer before the first model request."""

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(start)


async def test_the_replay_test_catches_a_change_that_breaks_determinism() -> None:
    replayer = Replayer(workflows=[ChangedWorkflow])
    with pytest.raises(workflow.NondeterminismError):
        await replayer.replay_workflow(recorded())
