"""A local server speaking OpenAI's chat completions and Responses and Anthropic's Messages, scripted by tests.

Why a real HTTP server rather than a mock of the adapter's client: the
adapter's framing, SSE parsing, tool-call fragment assembly, status and
header handling are exactly what breaks against providers, and only bytes on
a socket exercise them. The same server backs the benchmark (fixed latency,
many concurrent clients) and can run as a separate process.

Replies come from a *script*: either a list of reply specs
(``tether.testing.replies``) consumed one per request (a request past the end
gets HTTP 500, so over-calls are noticed), or a responder
``(request_json) -> ReplySpec`` for stateless scenarios such as
:data:`SCENARIOS` ``["multiply"]``. A spec is rendered as a ``chat.completion``
object, or as ``chat.completion.chunk`` SSE events when the request says
``"stream": true``. The same scripts answer ``POST /v1/messages`` in the
Messages API's shape and ``POST /v1/responses`` in the Responses API's,
streamed or not (see ``messages_wire`` and ``responses_wire``); responders
read those requests rewritten in chat-completions form.

Three ways to run it::

    with FakeServer(script=[text("hi")]) as server:       # background thread, own loop
        ...server.base_url...                                # http://127.0.0.1:PORT/v1
    async with FakeServer(script=SCENARIOS["multiply"]) as server:   # current loop
        ...
    python -m tether.testing.fake_server --port 8000 --scenario multiply --latency 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict

from tether.testing import messages_wire as wire
from tether.testing import responses_wire
from tether.testing.replies import Raw, Reply, ReplySpec, Responder, pieces, raw, text, tool_calls

__all__ = [  # the reply specs too, which tests have always imported from here
    "SCENARIOS",
    "FakeServer",
    "Raw",
    "Reply",
    "ReplySpec",
    "Responder",
    "ServerBase",
    "completion_body",
    "main",
    "multiply",
    "pieces",
    "raw",
    "send_sse",
    "stream_events",
    "text",
    "tool_calls",
]

# ------------------------------------------------------------------ scenarios


def multiply(request: dict[str, Any]) -> ReplySpec:
    """Ask for ``multiply(248, 15)``, then report the tool's result from its envelope."""
    messages = request.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") != "tool":
        return tool_calls([(f"call_{uuid.uuid4().hex[:24]}", "multiply", '{"a":248,"b":15}')])
    envelope = json.loads(last.get("content") or "{}")
    if not envelope.get("ok"):
        return text(f"multiply failed: {envelope.get('error', {}).get('code', 'unknown')}")
    return text(f"248 × 15 = {envelope['result']}")


SCENARIOS: dict[str, Responder] = {"multiply": multiply}


# ------------------------------------------------------------- wire rendering


def _usage(usage: tuple[int, int]) -> dict[str, int]:
    return {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}


def completion_body(reply: Reply, ident: str, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in reply.tool_calls
        ]
    body: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
    }
    if reply.usage is not None:
        body["usage"] = _usage(reply.usage)
    return body


def stream_events(reply: Reply, ident: str, model: str, include_usage: bool) -> list[dict[str, Any]]:
    """The ``data:`` payloads OpenAI would send for this reply, in order, before ``[DONE]``."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [choice]}  # fmt: skip

    events = [chunk({"role": "assistant", "content": "" if reply.content else None})]
    events += [chunk({"content": piece}) for piece in pieces(reply.content or "")]
    for index, (cid, name, args) in enumerate(reply.tool_calls):
        first = {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}
        events.append(chunk({"tool_calls": [first]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in pieces(args)
        ]
    if reply.stream_error is not None:
        return [*events[: len(events) // 2 + 1], {"error": dict(reply.stream_error)}]
    events.append(chunk({}, reply.finish_reason))
    if include_usage and reply.usage is not None:
        events.append({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [], "usage": _usage(reply.usage)})  # fmt: skip
    return events


# Raw UTF-8 like providers send, so clients' decoding of multi-byte text is exercised too.
_dumps = functools.partial(json.dumps, ensure_ascii=False)


def _error(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": None}}
    return web.json_response(body, status=status, dumps=_dumps)


def _messages_error(status: int, message: str, kind: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, dumps=_dumps)


# ------------------------------------------------------------------ lifecycle


class ServerBase:
    """Runs an aiohttp app on 127.0.0.1, in a background thread or on the current loop."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def make_app(self) -> web.Application:
        raise NotImplementedError

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        # No access log and a deep backlog: the benchmark opens 500 connections at once.
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, backlog=4096).start()
        self.port = int(self._runner.addresses[0][1])  # the real port when 0 was asked for

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __enter__(self) -> Self:
        started: concurrent.futures.Future[asyncio.AbstractEventLoop] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve_in_thread(started),), name=type(self).__name__, daemon=True
        )
        self._thread.start()
        self._loop = started.result()  # re-raises a failed start (port taken, ...)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._loop is not None and self._stopping is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()

    async def _serve_in_thread(self, started: concurrent.futures.Future[asyncio.AbstractEventLoop]) -> None:
        try:
            await self.start()
        except Exception as exc:
            started.set_exception(exc)
            return
        self._stopping = asyncio.Event()
        started.set_result(asyncio.get_running_loop())
        try:
            await self._stopping.wait()
        finally:
            await self.close()

    def banner(self) -> str:
        return f"listening on {self.origin}"

    async def serve_forever(self) -> None:
        """For ``python -m``: announce readiness on stdout once the socket is bound."""
        async with self:
            print(self.banner(), flush=True)
            await asyncio.Event().wait()


# ----------------------------------------------------------------- the server


class FakeServer(ServerBase):
    """POST ``{base_url}/chat/completions``, ``{base_url}/responses`` or ``{origin}/v1/messages`` answered from a
    script or a responder.

    ``requests`` holds each request body as received, in either dialect.
    """

    def __init__(
        self,
        script: Sequence[ReplySpec] | Responder = (),
        *,
        latency: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port)
        self.script = script if callable(script) else list(script)
        self.latency = latency
        # Appended on the server's loop only; list.append is atomic, so other threads may read it.
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers, beside its body

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL to give a model adapter (``.../v1``)."""
        return f"{self.origin}/v1"

    def banner(self) -> str:
        """The line the server prints when it is ready."""
        return f"listening on {self.base_url}"

    def make_app(self) -> web.Application:
        """The aiohttp application: chat completions, Messages and Responses endpoints."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/responses", self._handle_responses)
        return app

    async def _spec(
        self,
        request: web.Request,
        error: Callable[[int, str, str], web.Response] = _error,
        dialect: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> tuple[dict[str, Any], ReplySpec] | web.Response:
        """The request body and the spec answering it, or an error response in the request's dialect."""
        try:
            body = await request.json()
        except ValueError:
            return error(400, "request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object", "invalid_request_error")
        self.headers.append(dict(request.headers))
        self.requests.append(body)
        n = len(self.requests)
        if callable(self.script):
            try:
                spec = self.script(dialect(body) if dialect else body)
            except Exception as exc:  # a broken scenario should say so, not look like a server bug
                return error(500, f"FakeServer responder failed: {exc!r}", "responder_failed")
        elif n <= len(self.script):
            spec = self.script[n - 1]
        else:
            msg = f"FakeServer script exhausted: request {n} arrived, {len(self.script)} were scripted"
            return error(500, msg, "script_exhausted")
        if self.latency or spec.latency:
            await asyncio.sleep(self.latency + spec.latency)
        return body, spec

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        found = await self._spec(request)
        if isinstance(found, web.Response):
            return found
        body, spec = found
        if isinstance(spec, Raw):
            return _raw_response(spec)
        ident, model = f"chatcmpl-fake-{uuid.uuid4().hex[:12]}", str(body.get("model") or "fake-model")
        if not body.get("stream"):
            return web.json_response(completion_body(spec, ident, model), dumps=_dumps)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        payloads = [_dumps(e) for e in stream_events(spec, ident, model, include_usage)]
        if spec.stream_error is None:
            payloads.append("[DONE]")
        return await send_sse(request, (f"data: {p}\n\n" for p in payloads))

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        found = await self._spec(request, _messages_error, wire.chat_request)
        if isinstance(found, web.Response):
            return found
        body, spec = found
        if isinstance(spec, Raw):
            return _raw_response(spec)
        ident, model = f"msg_fake{uuid.uuid4().hex[:20]}", str(body.get("model") or "fake-model")
        if not body.get("stream"):
            return web.Response(text=wire.message_text(spec, ident, model), content_type="application/json")
        return await send_sse(request, wire.sse(wire.stream_events(spec, ident, model)))

    async def _handle_responses(self, request: web.Request) -> web.StreamResponse:
        found = await self._spec(request, dialect=responses_wire.chat_request)
        if isinstance(found, web.Response):
            return found
        body, spec = found
        if isinstance(spec, Raw):
            return _raw_response(spec)
        ident, model = uuid.uuid4().hex[:24], str(body.get("model") or "fake-model")
        if not body.get("stream"):
            return web.json_response(responses_wire.response_body(spec, ident, model), dumps=_dumps)
        return await send_sse(request, responses_wire.sse(responses_wire.stream_events(spec, ident, model)))


def _raw_response(spec: Raw) -> web.Response:
    headers = CIMultiDict({"Content-Type": "application/json"})
    headers.update(spec.headers)
    data = spec.body if isinstance(spec.body, str) else _dumps(spec.body)
    return web.Response(body=data.encode(), status=spec.status, headers=headers)


async def send_sse(request: web.Request, events: Iterable[str], status: int = 200) -> web.StreamResponse:
    """Write each event separately, so the client sees them arrive as a stream."""
    response = web.StreamResponse(
        status=status, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    for event in events:
        await response.write(event.encode())
    await response.write_eof()
    return response


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tether.testing.fake_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="multiply")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every reply")
    args = parser.parse_args(argv)
    server = FakeServer(SCENARIOS[args.scenario], latency=args.latency, host=args.host, port=args.port)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the normal way to stop it
        asyncio.run(server.serve_forever())


if __name__ == "__main__":
    main()
