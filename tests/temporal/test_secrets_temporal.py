"""What a Temporal run keeps in the workflow's history: not the model's API key, though the provider quotes it.

The key lives on the workers only (``tether worker --api-key``); a provider
that refuses it may quote it in its error, whose message crosses to the
workflow in the model activity's result and becomes the run's reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tether.drivers.temporal.client import start_run
from tether.drivers.temporal.devserver import DevServer
from tether.drivers.temporal.worker import make_worker
from tether.models.openai_chat import OpenAIChatModel
from tether.store import SQLiteStore
from tether.testing import FakeServer, raw

KEY = "sk-proj-AUDITSECRET0123456789"


def payload_texts(node: Any) -> Iterator[str]:
    """The decoded data of every payload in a history's JSON (each ``data`` is base64)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                yield base64.b64decode(value).decode("utf-8", "replace")
            else:
                yield from payload_texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from payload_texts(value)


async def test_a_key_the_provider_quotes_in_its_refusal_is_not_in_the_history(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    refusal = raw({"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error"}}, 401)
    client = await Client.connect(temporal_server.address)
    queue, run_id = f"q-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    store = SQLiteStore(tmp_path / "runs.db")
    async with FakeServer(script=[refusal]) as server:
        model = OpenAIChatModel("fake", base_url=server.base_url, api_key=KEY, max_retries=0)
        async with make_worker(client, queue, model, [], store=store):
            handle = await start_run(client, "Hello?", task_queue=queue, run_id=run_id)
            result = await asyncio.wait_for(handle.result(), 30)
            history = json.loads((await handle.fetch_history()).to_json())
        await model.aclose()
    assert result["status"] == "model_error"
    assert (
        result["reason"]
        == "AuthenticationError: HTTP 401: Incorrect API key provided: [redacted] (check OPENAI_API_KEY)"
    )
    texts = list(payload_texts(history))
    assert any("Incorrect API key provided" in t for t in texts)  # the payloads were read
    assert not [t for t in texts if "AUDITSECRET" in t]
    assert "AUDITSECRET" not in json.dumps(history)
    assert "AUDITSECRET" not in (store.load(run_id).state.reason or "")
    store.close()
