"""OpenTelemetry spans of a run (the SDK's in-memory exporter) and the ``tether`` log records.

Also: with OpenTelemetry not importable at all, tether imports and runs unchanged.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tether.core.machine import Status
from tether.drivers import tracing
from tether.drivers.local.runner import Agent
from tether.models.scripted import ScriptedModel, reply_calls, reply_text
from tether.tools import tool

SECRET = "sk-abcdefghijklmnop"


@tool(read_only=True)
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def login(user: str, api_key: str) -> str:
    """Sign in somewhere."""
    return f"welcome {user}"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(tracer_provider=provider)
    yield exporter
    tracing.configure()


def by_operation(spans: tuple[ReadableSpan, ...], operation: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == operation]


async def test_a_run_is_one_invoke_agent_span_with_a_chat_span_per_step_and_an_execute_tool_span_per_call(
    exporter: InMemorySpanExporter,
) -> None:
    model = ScriptedModel(
        [
            reply_calls(("c1", "multiply", '{"a": 248, "b": 15}'), ("c2", "multiply", '{"a": "248", "b": 15}')),
            reply_text("3720", usage=(30, 7)),
        ]
    )
    result = await Agent(model, [multiply]).run("What is 248 times 15?")
    assert result.status is Status.COMPLETED
    spans = exporter.get_finished_spans()

    [agent] = by_operation(spans, "invoke_agent")
    assert agent.name == "invoke_agent tether"
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.conversation.id"] == result.run_id
    assert agent.attributes["tether.run.status"] == "completed"
    assert agent.attributes["gen_ai.usage.input_tokens"] == 40

    chats = by_operation(spans, "chat")
    assert [c.name for c in chats] == ["chat scripted", "chat scripted"]
    first, last = (dict(c.attributes or {}) for c in chats)
    assert first["gen_ai.provider.name"] == "tether.scripted"
    assert first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (10, 5)
    assert last["gen_ai.response.finish_reasons"] == ("stop",)
    assert (last["gen_ai.usage.input_tokens"], last["gen_ai.usage.output_tokens"]) == (30, 7)
    assert all(c.kind is SpanKind.CLIENT for c in chats)

    tools = {
        dict(s.attributes or {})["gen_ai.tool.call.id"]: dict(s.attributes or {})
        for s in by_operation(spans, "execute_tool")
    }
    assert tools["c1"]["gen_ai.tool.name"] == "multiply"
    assert (tools["c1"]["tether.call.outcome"], tools["c1"]["tether.call.executed"]) == ("ok", True)
    assert (tools["c2"]["tether.call.outcome"], tools["c2"]["tether.call.executed"]) == ("invalid_arguments", False)

    for span in spans:
        assert span.attributes is not None and span.attributes["tether.run.id"] == result.run_id
        assert span.context is not None and span.context.trace_id == agent.context.trace_id  # type: ignore[union-attr]
        if span is not agent:
            assert span.parent is not None and span.parent.span_id == agent.context.span_id  # type: ignore[union-attr]


def all_attribute_text(spans: tuple[ReadableSpan, ...]) -> str:
    return json.dumps([dict(s.attributes or {}) for s in spans], default=str)


async def test_no_prompt_reply_or_argument_text_unless_content_capture_is_on(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(tracing.CAPTURE_ENV, raising=False)
    model = ScriptedModel(
        [reply_calls(("c1", "login", json.dumps({"user": "zed", "api_key": SECRET}))), reply_text("the reply")]
    )
    await Agent(model, [login]).run("a private prompt")
    recorded = all_attribute_text(exporter.get_finished_spans())
    for private in ("a private prompt", "the reply", "zed", SECRET, "welcome"):
        assert private not in recorded


async def test_with_content_capture_the_text_is_recorded_and_secrets_are_still_redacted(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    model = ScriptedModel(
        [reply_calls(("c1", "login", json.dumps({"user": "zed", "api_key": SECRET}))), reply_text("the reply")]
    )
    await Agent(model, [login]).run(f"a private prompt, my key is {SECRET}")
    spans = exporter.get_finished_spans()
    recorded = all_attribute_text(spans)
    assert "a private prompt" in recorded and "the reply" in recorded and "welcome zed" in recorded
    assert SECRET not in recorded
    [call] = by_operation(spans, "execute_tool")
    assert json.loads(str((call.attributes or {})["gen_ai.tool.call.arguments"])) == {
        "user": "zed",
        "api_key": "[redacted]",
    }


@tool
def sign_in(user: str, password: str) -> str:
    """Sign in with a password."""
    return f"welcome {user}"


async def test_with_content_capture_a_chat_span_redacts_the_calls_arguments_by_key(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's arguments are JSON text in a chat span's messages: a password in them (no sk- or Bearer for the
    text patterns to see) is hidden as in the execute_tool span, in the reply and in the next request."""
    monkeypatch.setenv(tracing.CAPTURE_ENV, "true")
    arguments = json.dumps({"user": "zed", "password": "hunter2-NOTINSPANS"})
    await Agent(ScriptedModel([reply_calls(("c1", "sign_in", arguments)), reply_text("in")]), [sign_in]).run("hi")
    spans = exporter.get_finished_spans()
    assert "NOTINSPANS" not in all_attribute_text(spans)
    first, second = by_operation(spans, "chat")
    [call] = json.loads(str((first.attributes or {})["gen_ai.output.messages"]))["tool_calls"]
    assert json.loads(call["arguments"]) == {"user": "zed", "password": "[redacted]"}
    sent = json.loads(str((second.attributes or {})["gen_ai.input.messages"]))
    assert [json.loads(c["arguments"]) for m in sent for c in m.get("tool_calls", ())] == [
        json.loads(call["arguments"])
    ]


async def test_a_failed_model_request_is_an_error_chat_span(exporter: InMemorySpanExporter) -> None:
    result = await Agent(ScriptedModel([]), [multiply]).run("hello")
    assert result.status is Status.MODEL_ERROR
    spans = exporter.get_finished_spans()
    [chat] = by_operation(spans, "chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "ModelResponseError"
    [agent] = by_operation(spans, "invoke_agent")
    assert (agent.attributes or {})["tether.run.status"] == "model_error"


async def test_run_lifecycle_goes_to_the_tether_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tether"):
        result = await Agent(ScriptedModel([reply_text("hi")]), [multiply]).run("hello")
    messages = [r.getMessage() for r in caplog.records if r.name == "tether"]
    assert messages == [f"run {result.run_id} started", f"run {result.run_id} ended completed"]


BLOCK_OTEL = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    """
)


def test_without_opentelemetry_tether_imports_and_runs_unchanged() -> None:
    script = BLOCK_OTEL + textwrap.dedent(
        """
        import asyncio, json
        import tether
        from tether.drivers import tracing
        from tether.models.scripted import ScriptedModel, reply_calls, reply_text
        from tether.drivers.local.runner import Agent
        from tether.toolsets import load_toolset

        model = ScriptedModel([reply_calls(("c1", "multiply", '{"a": 248, "b": 15}')), reply_text("3720")])
        result = asyncio.run(Agent(model, load_toolset("calc")).run("What is 248 times 15?"))
        print(json.dumps({
            "status": result.status.value,
            "outcome": result.steps[0].calls[0].outcome,
            "available": tracing.available(),
            "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
        }))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "status": "completed",
        "outcome": "ok",
        "available": False,
        "loaded": [],
    }


def test_the_extras_are_imported_only_when_used() -> None:
    script = (
        "import sys, tether, tether.drivers.local.runner, tether.cli.main\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith(('opentelemetry', 'mcp', 'anyio'))}))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_with_no_tracer_provider_configured_a_run_makes_no_span_at_all() -> None:
    """OpenTelemetry installed, nobody listening (the API's stand-in provider): not one tracer is asked for,
    so no span, attribute dict or context switch is made; setting a provider turns spans on for later runs."""
    script = textwrap.dedent(
        """
        import asyncio, json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from tether.models.scripted import ScriptedModel, reply_calls, reply_text
        from tether.drivers.local.runner import Agent
        from tether.toolsets import load_toolset

        asked = []
        for cls in (trace.ProxyTracerProvider, TracerProvider):
            real = cls.get_tracer
            def spy(self, *args, __real=real, **kwargs):
                asked.append(type(self).__name__)
                return __real(self, *args, **kwargs)
            cls.get_tracer = spy

        def run():
            model = ScriptedModel([reply_calls(("c1", "multiply", '{"a": 248, "b": 15}')), reply_text("3720")])
            return asyncio.run(Agent(model, load_toolset("calc")).run("What is 248 times 15?"))

        unheard = run()
        before = list(asked)
        trace.set_tracer_provider(TracerProvider())
        heard = run()
        print(json.dumps({"status": [unheard.status.value, heard.status.value], "before": before, "after": asked}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["status"] == ["completed", "completed"]
    assert found["before"] == []
    assert found["after"] and set(found["after"]) == {"TracerProvider"}
