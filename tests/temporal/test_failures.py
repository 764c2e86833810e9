"""A bug in workflow code fails the workflow at once instead of retrying its task forever."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from tether.temporal.devserver import DevServer
from tether.temporal.workflow import WORKFLOW_NAME, RunWorkflow


async def test_a_start_the_workflow_cannot_read_fails_the_workflow(temporal_server: DevServer) -> None:
    client = await Client.connect(temporal_server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[RunWorkflow]):
        handle = await client.start_workflow(WORKFLOW_NAME, {"no": "messages"}, id=uuid.uuid4().hex, task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 15)
    assert "messages" in str(failed.value.cause)
