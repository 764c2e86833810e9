"""An MCP server's tools as tether tools.

An ``MCPToolset`` connects to one server when it is made, lists its tools and
turns each into a tether ``Tool`` through the raw-schema path
(``tool_from_schema``), so an MCP tool passes every gate a Python tool
passes: strict validation against its ``inputSchema`` (a bad call never
reaches the server), scopes, approval, budgets, the ledger, and an
idempotency key (sent as ``_meta["tether/idempotency_key"]``).

A tool's name is ``prefix`` + its server name, with characters a tether
tool name cannot hold replaced by ``_`` and cut to 64; the options that
name tools (``read_only``, ``approval``) use the server's names.

What a server says about its tools is a claim, not a permission:

- ``readOnlyHint`` is ignored. A tool is read-only only when the ``read_only``
  option names it; every other tool is side-effecting (ledger, one at a time).
- Output is untrusted data: every call taints the run (side-effecting calls
  then need approval) unless ``untrusted_output=False``. So are the tools'
  descriptions and schemas, which the model reads in every request: a run
  offering them is tainted from its start (``Tool.described_by``), under
  the same option.
- ``isError`` results become ``tool_failed``; structured content is returned
  as JSON (a value that is no object comes wrapped as ``{"result": value}``,
  its text the value itself: the value is returned, so the model sees it
  once in tether's envelope); results longer than ``max_result_chars`` are
  cut with the marker.
- Its schemas' regular expressions (``pattern``, ``patternProperties``) run
  only in RE2, whose time is linear in the text (``tether.tools.linear``):
  against the model's arguments, and against a structured result when the
  tool declares an ``outputSchema`` (tether checks it in place of the SDK,
  which would run them in Python's backtracking ``re``). A pattern RE2
  cannot run (a backreference, a lookaround) refuses the server.
- What a server lists is bounded (``MAX_TOOLS``, ``MAX_TOOL_PAGES``,
  ``MAX_TOOL_NAME_CHARS``, ``MAX_SCHEMA_CHARS``, ``MAX_SCHEMA_DEPTH``):
  past a bound the server is refused, naming it. A description longer than
  ``MAX_DESCRIPTION_CHARS`` is cut with the marker instead: it is only text
  for the model, and cutting it loses no check.
- What a server answers is bounded: over HTTP a JSON body past
  ``MAX_RESPONSE_BYTES`` is not read on, and its request fails saying so
  (the SDK bounds each server-sent event itself); over stdio so is a line,
  one message (``tether.mcp.stdio``), and the connection ends with it. So
  is an answer holding more than ``MAX_RESPONSE_CONTAINERS`` JSON arrays
  and objects, counted before the SDK decodes it: bytes bound its text,
  not the memory its decoded objects take. Over HTTP answers are asked for
  uncompressed, and a compressed JSON answer is refused unread: the bounds
  count bytes as they arrive, and gzip inflates them a thousandfold after.

The SDK is async (anyio) and one session must live in one task from connect
to close. The toolset owns a thread with its own event loop, where one task
holds the session; calls from any event loop are handed to it. Every way the
server can fail (does not start, hangs, dies, lists no tools, sends a
malformed schema, times out) is an ``MCPServerError`` at connect time or a
``tool_failed``/``timeout`` result at call time, never a crash; the server
process is stopped and reaped on ``close()`` (also at interpreter exit).
An ``MCPServerError`` quotes the server's words (an error's message, tool
names) cut (``SHOWN_CHARS``, ``SHOWN_NAMES``) and with control characters
escaped: the CLI prints it, and a terminal obeys an escape sequence.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import re
import shlex
import sys
import threading
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TextIO, overload

from tether.core.envelope import quoted
from tether.core.errors import ConfigurationError, MCPServerError, ToolDefinitionError
from tether.core.nesting import MAX_DEPTH, containers_past, value_nested_deeper
from tether.tools.context import ToolContext
from tether.tools.tool import DEFAULT_MAX_RESULT_CHARS, Tool, ToolError, tool_from_schema
from tether.tools.toolbox import truncate

if TYPE_CHECKING:
    import mcp.types

logger = logging.getLogger("tether.mcp")

DEFAULT_CONNECT_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 30.0
IDEMPOTENCY_META_KEY = "tether/idempotency_key"
# Read by the tool function instead of ``context``, which an MCP tool may well use as an argument name.
_CONTEXT_PARAM = "_tether_context"
_CLOSE_TIMEOUT = 15.0  # the SDK waits 2 s for the server to exit on stdin EOF, then terminates and kills it

# What one server may list. Its tools cost every model request their schemas and descriptions, and checking
# them costs the host; far past what real servers list (GitHub's: about 100 tools, schemas of a few KB).
MAX_TOOLS = 1_000
MAX_TOOL_PAGES = 100  # pages of tools/list: a server that names a next page forever is refused
MAX_TOOL_NAME_CHARS = 128  # the MCP specification's bound on a tool name
MAX_SCHEMA_CHARS = 100_000  # an inputSchema or outputSchema, as JSON text
# A schema spends two levels (``properties``, then a name) on each level of the value it describes, and a call's
# arguments nest at most MAX_DEPTH levels: a schema nested deeper describes nothing a call may hold.
MAX_SCHEMA_DEPTH = 2 * MAX_DEPTH
# Longer descriptions are cut with the marker rather than refused: a description is text for the model, so a cut
# one loses no check, and a long one from a server that is otherwise fine should not cost the user its tools.
MAX_DESCRIPTION_CHARS = 10_000
# One answer a server sends over HTTP as a JSON body (a tools/list page, a call's result), in bytes: past it the
# rest is not read and the request fails, naming the bound. An answer sent as server-sent events is bounded per
# event by the SDK (1 MiB), and its stream of notifications may last the session, so only JSON bodies count here.
# Over stdio, one line (one message of any kind): past it the open requests fail, naming the bound, and the
# connection ends, since the next message starts only after the rest of the line, which is not read.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# What that one answer may hold of JSON arrays and objects, counted before the SDK decodes it; past it, as past
# MAX_RESPONSE_BYTES. Bytes bound the text, not the memory its objects take: decoded through the SDK and a run, an
# empty text block (27 bytes) costs the host about 1.9 KB, so 16 MiB of them (600,000) took 1.1 GB. At 100,000 the
# worst answer takes about 190 MB, twice what 16 MiB in one text block takes (90 MB), and structured content
# listing 10,000 records of up to nine arrays and objects each still passes.
MAX_RESPONSE_CONTAINERS = 100_000
# What an error raised here quotes of a server's words (an error's message; tool names, each cut to 64): the CLI
# prints it, so at most this much, in quotes that escape what a terminal would obey (``\x1b``).
SHOWN_CHARS = 300
SHOWN_NAMES = 20

Streams = tuple[Any, Any]
Connect = Callable[[], AbstractAsyncContextManager[Streams]]
# Names of the server's tools (as it lists them), all of them (True), none, or a predicate over a name.
Selection = bool | Collection[str] | Callable[[str], bool]


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("MCP tools need the mcp extra: pip install 'tether[mcp]'") from None


class MCPToolset(Sequence[Tool]):
    """The tools of one MCP server, usable wherever tools are (``Agent(model, toolset)``).

    Make one with ``MCPToolset.stdio(...)`` or ``MCPToolset.http(...)``;
    close it (``close()``, ``with``, ``async with``) to stop the server.
    """

    def __init__(
        self,
        label: str,
        connect: Connect,
        *,
        prefix: str = "",
        read_only: Selection = (),
        approval: Selection = False,
        scopes: Collection[str] = (),
        untrusted_output: bool = True,
        timeout: float = DEFAULT_CALL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    ) -> None:
        _require_sdk()
        self.label = label
        self._closed = False
        self._lost: str | None = None  # why the connection ended, once it has
        self._session: Any = None
        self._outputs: dict[str, Any] = {}  # a tool's outputSchema validator, by the server's name for it
        self._scope: Any = None
        self._holder: asyncio.Task[None] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"tether-mcp {label}", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        try:
            ready = asyncio.run_coroutine_threadsafe(self._connect(connect, connect_timeout), self._loop)
            listed = ready.result()
            self.tools = self._tools(
                listed,
                prefix=prefix,
                read_only=read_only,
                approval=approval,
                scopes=frozenset(scopes),
                untrusted_output=untrusted_output,
                timeout=timeout,
                max_result_chars=max_result_chars,
            )
        except BaseException:
            self.close()
            raise
        logger.info("MCP server %s: %d tools", label, len(self.tools))

    @classmethod
    def stdio(
        cls,
        command: str | Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        errlog: TextIO | None = None,
        **options: Any,
    ) -> MCPToolset:
        """Start ``command`` (a shell-quoted string or an argv list) and talk to it over stdio.

        The server's stderr goes to ``errlog`` (default: ours). A line it writes (one message) past
        ``MAX_RESPONSE_BYTES`` or ``MAX_RESPONSE_CONTAINERS`` ends the connection (``tether.mcp.stdio``).
        """
        _require_sdk()
        from mcp.client.stdio import StdioServerParameters

        from tether.mcp.stdio import bounded_stdio

        try:
            argv = shlex.split(command) if isinstance(command, str) else list(command)
        except ValueError as exc:  # an unclosed quotation
            raise MCPServerError(f"the MCP server command cannot be read: {exc}") from None
        if not argv:
            raise MCPServerError("an MCP server command must not be empty")
        parameters = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(env) if env else None, cwd=cwd)
        label = _program(argv)
        bounds = {"limit": MAX_RESPONSE_BYTES, "containers": MAX_RESPONSE_CONTAINERS}
        return cls(label, lambda: bounded_stdio(parameters, errlog or sys.stderr, **bounds), **options)

    @classmethod
    def http(cls, url: str, *, headers: Mapping[str, str] | None = None, **options: Any) -> MCPToolset:
        """Connect to an MCP server over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""
        _require_sdk()
        if not re.match(r"^https?://", url):
            raise MCPServerError(f"MCP server URL {url!r} must start with http:// or https://")
        return cls(_site(url), lambda: _http_streams(url, dict(headers or {})), **options)

    # --- the tools ---------------------------------------------------------------------------

    @overload
    def __getitem__(self, index: int) -> Tool: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Tool]: ...
    def __getitem__(self, index: int | slice) -> Tool | Sequence[Tool]:
        return self.tools[index]

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def _tools(
        self,
        listed: list[mcp.types.Tool],
        *,
        prefix: str,
        read_only: Selection,
        approval: Selection,
        **options: Any,
    ) -> list[Tool]:
        if not listed:
            raise MCPServerError(f"MCP server {self.label} lists no tools")
        for listed_tool in listed:
            self._check_bounds(listed_tool)
        names = [t.name for t in listed]
        for option, selection in (("read_only", read_only), ("approval", approval)):
            if isinstance(selection, Collection) and not isinstance(selection, str):
                unknown = sorted(set(selection) - set(names))
                if unknown:
                    raise MCPServerError(
                        f"{option} names tools MCP server {self.label} does not list: {', '.join(unknown)}; "
                        f"it lists: {_listing(names)}"
                    )
        tools: dict[str, Tool] = {}
        for listed_tool in listed:
            made = self._tool(
                listed_tool,
                re.sub(r"[^a-zA-Z0-9_-]", "_", prefix + listed_tool.name)[:64],
                read_only=_selected(read_only, listed_tool.name),
                approval=_selected(approval, listed_tool.name),
                **options,
            )
            if made.name in tools:
                raise MCPServerError(f"MCP server {self.label}: two tools become {made.name!r}; set a prefix")
            tools[made.name] = made
        return list(tools.values())

    def _check_bounds(self, listed: mcp.types.Tool) -> None:
        """Refuse a tool past a bound on its name or its schemas (``MAX_TOOL_NAME_CHARS``, ``MAX_SCHEMA_*``)."""
        if len(listed.name) > MAX_TOOL_NAME_CHARS:
            raise MCPServerError(
                f"MCP server {self.label} lists a tool named {_cut(listed.name)}, {len(listed.name)} characters "
                f"long; a tool name has at most {MAX_TOOL_NAME_CHARS}"
            )
        for field, schema in (("inputSchema", listed.input_schema), ("outputSchema", listed.output_schema)):
            if schema is None:
                continue
            where = f"MCP server {self.label}: tool {listed.name}: its {field}"
            if value_nested_deeper(schema, MAX_SCHEMA_DEPTH):  # first: measuring the size walks it
                raise MCPServerError(f"{where} nests more than {MAX_SCHEMA_DEPTH} levels deep")
            size = len(json.dumps(schema, ensure_ascii=False))
            if size > MAX_SCHEMA_CHARS:
                raise MCPServerError(f"{where} is {size} characters of JSON; at most {MAX_SCHEMA_CHARS} are taken")

    def _tool(self, listed: mcp.types.Tool, name: str, **options: Any) -> Tool:
        from tether.tools.linear import untrusted_validator

        server_name = listed.name

        async def call(**arguments: Any) -> Any:
            context: ToolContext = arguments.pop(_CONTEXT_PARAM)
            return _result(await self._submit(self._call(server_name, arguments, context.idempotency_key)))

        description = listed.description or ""
        if len(description) > MAX_DESCRIPTION_CHARS:
            logger.warning(
                "MCP server %s: the description of tool %s (%d characters) is cut to %d",
                self.label,
                name,
                len(description),
                MAX_DESCRIPTION_CHARS,
            )
            description = truncate(description, MAX_DESCRIPTION_CHARS)
        try:
            made = tool_from_schema(name, listed.input_schema, call, description, untrusted_schema=True, **options)
            if listed.output_schema is not None:
                what = f"tool {name}: its outputSchema"
                self._outputs[server_name] = untrusted_validator(listed.output_schema, what)
        except ToolDefinitionError as exc:
            raise MCPServerError(f"MCP server {self.label}: {exc}") from None
        # Its description and schema are the server's words, read by the model in every request: a server whose
        # output is untrusted is no more trusted there (``Tool.described_by``: the run starts tainted).
        described_by = f"MCP server {self.label}" if made.untrusted_output else None
        return dataclasses.replace(made, context_param=_CONTEXT_PARAM, described_by=described_by)

    def _check_result(self, name: str, result: mcp.types.CallToolResult) -> None:
        """What the SDK checks of a result against the tool's ``outputSchema``, with its patterns run in RE2.

        Raises ``RuntimeError``, as the SDK's check does (``_call`` makes it the call's ``tool_failed``).
        """
        validator = self._outputs.get(name)
        if validator is None:
            return
        content = result.structured_content
        if content is None:
            raise RuntimeError(f"tool {name} has an outputSchema but returned no structured content")
        if value_nested_deeper(content, MAX_DEPTH):
            raise RuntimeError(f"tool {name} returned structured content nested more than {MAX_DEPTH} levels deep")
        from jsonschema.exceptions import best_match

        from tether.tools.tool import _describe

        error = best_match(validator.iter_errors(content))
        if error is not None:
            raise RuntimeError(f"tool {name} returned structured content its outputSchema refuses: {_describe(error)}")

    # --- the session, in the toolset's own thread ------------------------------------------------

    async def _connect(self, connect: Connect, timeout: float) -> list[mcp.types.Tool]:
        ready: asyncio.Future[list[mcp.types.Tool]] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.get_running_loop().create_task(self._hold(connect, timeout, ready))
        return await ready

    async def _hold(self, connect: Connect, timeout: float, ready: asyncio.Future[list[mcp.types.Tool]]) -> None:
        """Open the session, list the tools, then keep the session open until ``close()`` cancels the scope."""
        import anyio

        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                self._scope = scope
                async with connect() as (read, write), _session_class()(read, write, self._check_result) as session:
                    await session.initialize()
                    listed = await _list_tools(session, self.label)
                    scope.deadline = math.inf
                    self._session = session
                    ready.set_result(listed)
                    await anyio.sleep_forever()
            if not ready.done():
                what = "was closed" if self._closed else f"did not answer within {timeout}s"
                ready.set_exception(MCPServerError(f"MCP server {self.label} {what}"))
        except Exception as exc:
            reason = _describe(exc)
            if not ready.done():
                refused = _first(exc)  # a bound the listing passed (_list_tools) is worded already
                error = refused if isinstance(refused, MCPServerError) else None
                ready.set_exception(error or MCPServerError(f"MCP server {self.label}: {reason}"))
            else:
                self._lost = self._lost or reason
                logger.warning("MCP server %s: connection ended: %s", self.label, reason)
        finally:
            self._session = None

    async def _call(self, name: str, arguments: dict[str, Any], key: str) -> mcp.types.CallToolResult:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        from tether.mcp.stdio import MessageTooLarge

        session = self._session
        if session is None:
            raise ToolError(f"MCP server {self.label} is not connected ({self._lost or 'closed'})")
        try:
            result: mcp.types.CallToolResult = await session.call_tool(
                name, arguments, meta={IDEMPOTENCY_META_KEY: key}
            )
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED and not await _answers(session):
                self._lose(f"the server closed the connection during a call to {name}")
                raise ToolError(f"MCP server {self.label} went away during the call; its effect is unknown") from None
            if isinstance(exc.error.data, MessageTooLarge):  # the stdio transport's own, which no server can send
                self._lose(exc.error.message)  # the connection is ending: later calls say why
            raise ToolError(f"MCP server {self.label}: {exc.error.message}") from None
        except RuntimeError as exc:  # the SDK's check of structured content against the tool's outputSchema
            raise ToolError(f"MCP server {self.label}: {exc}") from None
        except Exception as exc:  # a transport failure the SDK did not turn into an MCP error
            raise ToolError(f"MCP server {self.label}: {_describe(exc)}") from None
        return result

    def _lose(self, reason: str) -> None:
        """The connection is gone: end the session task now, so the server process is stopped and reaped."""
        self._lost = self._lost or reason
        self._session = None
        logger.warning("MCP server %s: %s", self.label, reason)
        if self._scope is not None:
            self._scope.cancel()

    async def _submit(self, coroutine: Any) -> Any:
        """Run ``coroutine`` in the toolset's loop; cancelling the caller cancels it there too."""
        if self._closed:
            coroutine.close()
            raise ToolError(f"MCP toolset {self.label} is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server (stdin closed, then terminated, then killed) and the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._loop.is_running():
            stopped = asyncio.run_coroutine_threadsafe(self._stop(), self._loop)
            with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                stopped.result(_CLOSE_TIMEOUT)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CLOSE_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()

    async def aclose(self) -> None:
        """Stop the MCP server (or close the connection), without blocking the event loop."""
        await asyncio.to_thread(self.close)

    async def _stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
        if self._holder is not None:
            with contextlib.suppress(BaseException):
                await self._holder

    def __enter__(self) -> MCPToolset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPToolset:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"MCPToolset({self.label!r}, tools={[t.name for t in self.tools] if hasattr(self, 'tools') else []})"


@contextlib.asynccontextmanager
async def _http_streams(url: str, headers: dict[str, str]) -> AsyncIterator[Streams]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    # The SDK's client (``create_mcp_http_client``: its timeouts, redirects left to the SDK), on a transport
    # that stops reading a JSON body past MAX_RESPONSE_BYTES, and refuses one past MAX_RESPONSE_CONTAINERS.
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    transport = _bounded_transport()(httpx2.AsyncHTTPTransport(), MAX_RESPONSE_BYTES, MAX_RESPONSE_CONTAINERS)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, transport=transport) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams[0], streams[1]


@functools.cache
def _bounded_transport() -> type[Any]:
    """An httpx2 transport whose responses, unless server-sent events, end in an error past ``limit`` bytes
    or, once read, when they hold more than ``containers`` JSON arrays and objects (``containers_past``).

    It asks for answers uncompressed and refuses a compressed one unread: the bounds count the bytes the SDK
    decodes, and 200 KB of gzip inflate to 200 MB (httpx2 inflates after the transport, unbounded).
    The error is an ``httpx2.StreamError``: the SDK answers the request it was reading with a JSON-RPC
    error (``Failed to parse JSON response: ...``) instead of reading on, and the caller gets that (the SDK's
    log of it, a traceback, is dropped). Made once per process: the filter is added once.
    """
    import httpx2

    class Refused(httpx2.StreamError):
        """An answer not read on: past a bound, or compressed."""

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, stream: httpx2.AsyncByteStream, limit: int, containers: int, encoding: str) -> None:
            self._stream, self._limit, self._containers, self._encoding = stream, limit, containers, encoding

        async def __aiter__(self) -> AsyncIterator[bytes]:
            if self._encoding not in ("", "identity"):
                shown = quoted(self._encoding, 64)  # the server's words
                raise Refused(f"the server's answer is compressed ({shown}); tether asks for it uncompressed; not read")
            seen = opened = 0
            chunks: list[bytes] = []  # the very ones httpx2 keeps until the end, to join: no copy
            async for chunk in self._stream:
                seen += len(chunk)
                if seen > self._limit:
                    raise Refused(f"the server's answer is larger than {self._limit} bytes; not read")
                opened += chunk.count(b"[") + chunk.count(b"{")  # at least the containers: the common case
                chunks.append(chunk)
                yield chunk
            # The end: the SDK decodes the body only once it is whole, so an error raised here comes first.
            if opened > self._containers and containers_past(b"".join(chunks), self._containers):
                raise Refused(
                    f"the server's answer holds more than {self._containers} JSON arrays and objects; not read"
                )

        async def aclose(self) -> None:
            await self._stream.aclose()

    class Reported(logging.Filter):
        """Drops the SDK's traceback of a ``Refused``: the request's error says it to the caller."""

        def filter(self, record: logging.LogRecord) -> bool:
            return not (record.exc_info and isinstance(record.exc_info[1], Refused))

    logging.getLogger("mcp.client.streamable_http").addFilter(Reported())

    class Bounded(httpx2.AsyncBaseTransport):
        def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int, containers: int) -> None:
            self._inner, self._limit, self._containers = inner, limit, containers

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            request.headers["accept-encoding"] = "identity"
            response = await self._inner.handle_async_request(request)
            kind = response.headers.get("content-type", "").lower()
            if not kind.startswith("text/event-stream") and isinstance(response.stream, httpx2.AsyncByteStream):
                encoding = response.headers.get("content-encoding", "").strip().lower()
                response.stream = Capped(response.stream, self._limit, self._containers, encoding)
            return response

        async def aclose(self) -> None:
            await self._inner.aclose()

    return Bounded


@functools.cache
def _session_class() -> type[Any]:
    """The SDK's ``ClientSession``, with a tool's structured result checked by tether (``_check_result``).

    The SDK checks it against the tool's ``outputSchema`` with jsonschema,
    whose patterns run in Python's ``re``: a server's ``^(a+)+$`` and a
    result of forty ``a`` and a ``!`` would hold the GIL for hours, freezing
    the whole host. The SDK calls ``validate_tool_result`` for every result
    that is not an error, so tether's check takes its place.
    """
    from mcp import ClientSession

    class Session(ClientSession):
        def __init__(self, read: Any, write: Any, check: Callable[[str, mcp.types.CallToolResult], None]) -> None:
            super().__init__(read, write)
            self._tether_check = check

        async def validate_tool_result(self, name: str, result: mcp.types.CallToolResult) -> None:
            self._tether_check(name, result)

    return Session


async def _list_tools(session: Any, label: str) -> list[mcp.types.Tool]:
    """Every page of ``tools/list``, up to ``MAX_TOOL_PAGES`` pages and ``MAX_TOOLS`` tools."""
    from mcp.types import PaginatedRequestParams

    page = await session.list_tools()
    tools = list(page.tools)
    pages = 1
    while len(tools) <= MAX_TOOLS and page.next_cursor:
        if pages == MAX_TOOL_PAGES:
            raise MCPServerError(f"MCP server {label} lists more than {MAX_TOOL_PAGES} pages of tools")
        page = await session.list_tools(params=PaginatedRequestParams(cursor=page.next_cursor))
        pages += 1
        tools.extend(page.tools)
    if len(tools) > MAX_TOOLS:
        raise MCPServerError(f"MCP server {label} lists more than {MAX_TOOLS} tools, the most tether takes from one")
    return tools


def _selected(selection: Selection, name: str) -> bool:
    if isinstance(selection, bool):
        return selection
    if callable(selection):
        return bool(selection(name))
    return name in selection


def _result(result: mcp.types.CallToolResult) -> Any:
    """What the model sees of a result: structured content as JSON, else the text, else the content blocks."""
    if result.is_error:
        raise ToolError(_text(result) or "the MCP tool reported an error")
    if result.structured_content is not None:
        return _unwrapped(result.structured_content, _text(result))
    if all(block.type == "text" for block in result.content):
        return _text(result)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]


def _unwrapped(structured: dict[str, Any], text: str) -> Any:
    """``structured`` without the ``{"result": value}`` a server puts around a value that is no object.

    Structured content must be an object, so servers (the SDK's, tether's own) send an integer, a
    string or a list as ``{"result": value}`` with the value itself as the text. Only when the text
    says so is the wrapping taken off: a tool whose result is an object with one ``result`` field
    sends that object as its text, and keeps it.
    """
    if len(structured) != 1 or "result" not in structured:
        return structured
    value = structured["result"]
    if isinstance(value, str):
        return value if text == value else structured
    try:
        said = json.loads(text)
    except ValueError:
        return structured
    same = json.dumps(said, sort_keys=True) == json.dumps(value, sort_keys=True)  # true is not 1 here
    return value if same else structured


def _text(result: mcp.types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def _first(exc: BaseException) -> BaseException:
    """The first real failure inside ``exc`` (anyio wraps them in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """One line for the first real failure inside ``exc``."""
    exc = _first(exc)
    from mcp import MCPError

    from tether.mcp.stdio import MessageTooLarge

    if isinstance(exc, MessageTooLarge):  # the reason, as the requests it failed were told
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"cannot start the server: {exc.strerror}: {exc.filename}"
    if isinstance(exc, MCPError):
        from mcp.types import CONNECTION_CLOSED

        if exc.error.code == CONNECTION_CLOSED:
            return "the server closed the connection (did it exit? its stderr may say why)"
        return quoted(exc.error.message, SHOWN_CHARS)  # the server's words, of any length, escapes and all
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


ANSWER_TIMEOUT = 5.0  # seconds a server that sent -32000 has to answer a ping, to show it is still there


async def _answers(session: Any) -> bool:
    """Whether ``session`` still answers: -32000 is the SDK's "connection closed" and also JSON-RPC's plain
    "server error", which a server that is still there sends for a call that failed."""
    try:
        async with asyncio.timeout(ANSWER_TIMEOUT):
            await session.send_ping()
    except Exception:
        return False
    return True


def _program(argv: Sequence[str]) -> str:
    """What names a server started by ``argv`` in messages the model, the store and the log see: the program
    and its script, never the rest (``env TOKEN=... cmd --api-key ...`` holds secrets)."""
    words = list(argv)
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
    words = [w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]  # VAR=value, before the program
    if not words:
        return "(env)"
    shown = [os.path.basename(words[0])]
    if len(words) > 1 and not words[1].startswith("-"):
        shown.append(os.path.basename(words[1]))
    return " ".join(shown)


def _cut(name: str) -> str:
    """A server's name for something, shown: at most 64 characters of it, its control characters escaped."""
    return quoted(name, 64)


def _listing(names: Sequence[str]) -> str:
    """A server's tool names as an error shows them: the first ``SHOWN_NAMES``, each cut (``_cut``)."""
    shown = ", ".join(_cut(name) for name in names[:SHOWN_NAMES])
    return shown if len(names) <= SHOWN_NAMES else f"{shown} and {len(names) - SHOWN_NAMES} more"


def _site(url: str) -> str:
    """``url`` without the user, password, query and fragment it may carry (a token in ``?key=``)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
