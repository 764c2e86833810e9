"""The service continues the caller's trace: a run started by a request with ``traceparent`` is its child."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from server_harness import Api

from tether.drivers import tracing
from tether.testing.fake_server import text

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(tracer_provider=provider)
    yield exporter
    tracing.configure()


async def start(api: Api, headers: dict[str, str]) -> str:
    token = await api.token("alice")
    async with api.session.post(
        api.base + "/api/runs", json={"prompt": "hello"}, headers={"Authorization": f"Bearer {token}", **headers}
    ) as resp:
        assert resp.status == 202, await resp.text()
        return str((await resp.json())["run_id"])


async def test_a_run_started_with_traceparent_is_part_of_the_callers_trace(
    api: Api, exporter: InMemorySpanExporter
) -> None:
    api.model.script = [text("Hello alice."), text("Hello again.")]
    traced = await start(api, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    untraced = await start(api, {})
    await api.wait("alice", traced)
    await api.wait("alice", untraced)

    agents = {
        (s.attributes or {})["tether.run.id"]: s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("gen_ai.operation.name") == "invoke_agent"
    }
    child = agents[traced]
    assert child.parent is not None
    assert (format(child.parent.trace_id, "032x"), format(child.parent.span_id, "016x")) == (TRACE_ID, PARENT_ID)
    assert child.parent.is_remote
    assert agents[untraced].parent is None or format(agents[untraced].parent.trace_id, "032x") != TRACE_ID
