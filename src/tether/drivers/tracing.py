"""OpenTelemetry spans and ``tether`` log records for runs.

The driver calls four hooks; each is a plain ``await`` when OpenTelemetry is
not installed (``pip install 'tether[otel]'`` adds ``opentelemetry-api``
only; the application picks and configures the SDK). Spans follow the GenAI
semantic conventions and all carry the run id (``gen_ai.conversation.id``
and ``tether.run.id``):

    invoke_agent tether   one per drive of a run (start or resume): tether.run.status at the end
    chat {model}          one per model request (step): gen_ai.provider.name, gen_ai.request.model,
                          gen_ai.response.model, gen_ai.usage.input_tokens / output_tokens,
                          gen_ai.response.finish_reasons; error.type when the request failed
    execute_tool {tool}   one per call: gen_ai.tool.name, gen_ai.tool.call.id, tether.call.outcome
                          (ok or the error code), tether.call.executed (false: refused by a gate)

No prompt, reply, argument or result text is recorded unless content capture
is on (``configure(capture_content=True)`` or the convention's
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``); even then
secrets are redacted (``tether.core.redact``).

Log records go to the ``tether`` logger: run lifecycle at INFO, failures
worth a look at WARNING.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from tether.core.envelope import outcome_code
from tether.core.redact import redact, redact_arguments, redact_text

if TYPE_CHECKING:
    from tether.core.machine import PendingCall
    from tether.core.messages import ModelReply
    from tether.core.report import RunResult
    from tether.models.base import Model, ModelRequest

logger = logging.getLogger("tether")

Result = TypeVar("Result")

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TRACER_NAME = "tether"

# Provider names of the conventions, by adapter class.
_PROVIDERS = {
    "OpenAIChatModel": "openai",
    "AnthropicModel": "anthropic",
    "LocalModel": "llama_cpp",
    "ScriptedModel": "tether.scripted",
}

_settings: dict[str, Any] = {"provider": None, "capture": None}
_api: Any = None  # the opentelemetry.trace module, False when it cannot be imported


def configure(*, tracer_provider: Any = None, capture_content: bool | None = None) -> None:
    """Use ``tracer_provider`` instead of the global one; turn content capture on or off (None: the env)."""
    _settings["provider"] = tracer_provider
    _settings["capture"] = capture_content


def available() -> bool:
    """Whether ``opentelemetry-api`` can be imported."""
    return _trace_api() is not None


def _trace_api() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = False
        else:
            _api = trace
    return _api or None


def active() -> bool:
    """Whether a span would go anywhere: OpenTelemetry is there and a tracer provider other than its defaults
    (the proxy that stands in until the application sets one, the no-op one) is configured. A driver asks
    once per drive; when not, it makes no span, attribute dict or context at all."""
    trace = _trace_api()
    if trace is None:
        return False
    provider = _settings["provider"] or trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))  # a tuple: no union per call


def _tracer() -> Any:
    trace = _trace_api()
    if trace is None:
        return None
    provider = _settings["provider"]
    return provider.get_tracer(TRACER_NAME) if provider is not None else trace.get_tracer(TRACER_NAME)


def capturing() -> bool:
    if _settings["capture"] is not None:
        return bool(_settings["capture"])
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")


def _content(value: Any) -> str:
    return redact_text(value) if isinstance(value, str) else json.dumps(redact(value), ensure_ascii=False)


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as a chat span shows it: its calls' arguments are JSON text, redacted by key as an
    ``execute_tool`` span's are (``redact`` alone would see only a string)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    return {**message, "tool_calls": [{**c, "arguments": redact_arguments(str(c["arguments"]))} for c in calls]}


@contextmanager
def _span(name: str, kind: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    trace = _trace_api()
    with tracer.start_as_current_span(name, kind=getattr(trace.SpanKind, kind), attributes=dict(attributes)) as span:
        yield span


def _error(span: Any, exc: BaseException) -> None:
    if span is None:
        return
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(_trace_api().Status(_trace_api().StatusCode.ERROR, type(exc).__name__))


async def traced_run(
    run_id: str, model: Model, resumed: bool, drive: Callable[[], Awaitable[RunResult]], *, traced: bool = True
) -> RunResult:
    """One ``invoke_agent`` span around a drive of the run (with ``traced``), and its lifecycle in the log."""
    logger.info("run %s %s", run_id, "resumed" if resumed else "started")
    if not traced:
        try:
            result = await drive()
        except BaseException as exc:
            logger.info("run %s interrupted: %s", run_id, type(exc).__name__)
            raise
        _log_end(run_id, result)
        return result
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "tether",
        "gen_ai.conversation.id": run_id,
        "tether.run.id": run_id,
        "gen_ai.request.model": getattr(model, "name", None) or "",
        "gen_ai.provider.name": _provider(model),
    }
    with _span("invoke_agent tether", "INTERNAL", attributes) as span:
        try:
            result = await drive()
        except BaseException as exc:
            logger.info("run %s interrupted: %s", run_id, type(exc).__name__)
            raise
        if span is not None:
            span.set_attribute("tether.run.status", result.status.value)
            usage = result.usage
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    _log_end(run_id, result)
    return result


def _log_end(run_id: str, result: RunResult) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    if result.status.terminal:
        logger.info("run %s ended %s%s", run_id, result.status.value, f": {result.reason}" if result.reason else "")
    else:
        logger.info("run %s paused %s", run_id, result.status.value)


async def traced_chat(model: Model, request: ModelRequest, run_id: str) -> ModelReply:
    """One ``chat`` span around a model request."""
    name = getattr(model, "name", None) or ""
    provider = _provider(model)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the older name of the same attribute
        "gen_ai.request.model": name,
        "gen_ai.conversation.id": run_id,
        "tether.run.id": run_id,
    }
    if request.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = request.max_tokens
    if capturing():
        attributes["gen_ai.input.messages"] = _content([_message(m.to_dict()) for m in request.messages])
    with _span(f"chat {name}".strip(), "CLIENT", attributes) as span:
        try:
            reply = await model.complete(request)
        except Exception as exc:
            _error(span, exc)
            logger.info("run %s: model request failed: %s", run_id, type(exc).__name__)
            raise
        if span is not None:
            span.set_attribute("gen_ai.response.model", reply.model or name)
            span.set_attribute("gen_ai.usage.input_tokens", reply.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", reply.usage.output_tokens)
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason or ""])
            if capturing():
                calls = [
                    {"id": str(c.id), "name": str(c.name), "arguments": redact_arguments(str(c.arguments))}
                    for c in reply.tool_calls
                ]
                output = {"content": reply.content, "tool_calls": calls}
                span.set_attribute("gen_ai.output.messages", _content(output))
    return reply


async def traced_call(call: PendingCall, run_id: str, invoke: Awaitable[Result]) -> Result:
    """One ``execute_tool`` span around an executed call; ``invoke`` gives the envelope (or has it as ``content``)."""
    with _span(f"execute_tool {call.tool}", "INTERNAL", _call_attributes(call, run_id)) as span:
        result = await invoke
        if span is not None:
            content = result if isinstance(result, str) else getattr(result, "content", "")
            _outcome(span, str(content), executed=True)
    return result


def refused_call(call_id: str, tool: str, content: str, run_id: str, arguments: Any = None) -> None:
    """An ``execute_tool`` span for a call a gate refused (it never ran)."""
    attributes = {**_call_attributes(None, run_id), "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id}
    if arguments is not None and capturing():
        attributes["gen_ai.tool.call.arguments"] = _content(arguments)
    with _span(f"execute_tool {tool}", "INTERNAL", attributes) as span:
        if span is not None:
            _outcome(span, content, executed=False)


def _call_attributes(call: PendingCall | None, run_id: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": run_id,
        "tether.run.id": run_id,
    }
    if call is not None:
        attributes["gen_ai.tool.name"] = call.tool
        attributes["gen_ai.tool.call.id"] = call.call_id
        attributes["tether.call.read_only"] = call.read_only
        if call.arguments is not None and capturing():
            attributes["gen_ai.tool.call.arguments"] = _content(call.arguments)
    return attributes


def _outcome(span: Any, content: str, *, executed: bool) -> None:
    try:
        code = outcome_code(content)
    except (ValueError, KeyError, TypeError):
        code = "unknown"
    span.set_attribute("tether.call.outcome", code)
    span.set_attribute("tether.call.executed", executed)
    if code != "ok":
        span.set_attribute("error.type", code)
    if capturing():
        span.set_attribute("gen_ai.tool.call.result", _content(content))


def _provider(model: Model) -> str:
    return str(getattr(model, "provider", None) or _PROVIDERS.get(type(model).__name__, type(model).__name__))


class TraceContextMiddleware:
    """ASGI middleware: requests carrying ``traceparent`` make the spans they start (runs) part of that trace.

    The context is attached for the request; a run started in it is an asyncio
    task that copies the context, so its ``invoke_agent`` span has the
    caller's span as parent.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        from opentelemetry import context, propagate

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        token = context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
