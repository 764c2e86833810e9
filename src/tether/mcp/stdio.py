"""An MCP server over stdio, with each message it writes bounded.

The SDK's ``stdio_client`` keeps what a server writes on stdout until a
newline ends the line, however long it grows: a server that writes one
endless line fills the host's memory until the host dies. ``bounded_stdio``
is that transport with a bound on a line (one JSON-RPC message). It starts
and stops the server with the SDK's own functions (its minimal environment,
stderr to ``errlog``, a process group of its own; at the end stdin closed,
then the group terminated, then killed) and reads stdout as bytes. A line
past ``limit`` bytes is not read on: each request still awaiting an answer
gets an error naming the bound (as over HTTP), and the connection ends with
``MessageTooLarge``, which stops the server. So does a line that holds more
than ``containers`` JSON arrays and objects, counted before the SDK decodes
it (``tether.core.nesting.containers_past``): decoded, one costs the host
a hundred times its bytes or more (an empty text block, 2 KB).

It plugs into ``ClientSession`` as ``stdio_client`` does: a pair of memory
streams carrying ``SessionMessage`` (or the ``Exception`` a malformed line
became). Lines end at the byte ``\\n``, as in UTF-8, the encoding MCP uses.
The SDK's functions it calls are private ones of ``mcp.client.stdio``
(the extra pins ``mcp<3``); every stdio test in tests/mcp runs them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import NoReturn, TextIO

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client import stdio as sdk
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from tether.core.nesting import containers_past

logger = logging.getLogger("tether.mcp")

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


class MessageTooLarge(Exception):
    """A line the other side wrote (a server, or a client of ``tether mcp serve``) ran past the bound: the
    connection ends with it."""


@contextlib.asynccontextmanager
async def bounded_stdio(
    server: sdk.StdioServerParameters, errlog: TextIO = sys.stderr, *, limit: int, containers: int
) -> AsyncIterator[Streams]:
    """Start ``server`` and talk to it over stdio (``stdio_client``), refusing a line past ``limit`` bytes or
    ``containers`` arrays and objects."""
    command = await sdk._get_executable_command(server.command)
    process = await sdk._create_platform_compatible_process(
        command=command,
        args=server.args,
        env=sdk.get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    # As in the SDK: no await between the spawn and the task group, or a cancellation would leak the process.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    asked: set[RequestId] = set()  # our requests the server has not answered, nor we cancelled
    shutting_down = False
    writer_done = anyio.Event()

    async def refuse(past: str) -> NoReturn:
        """Answer every open request with the bound ``past`` says, then end the connection."""
        refused = MessageTooLarge(f"the server's message {past}; not read")
        # ``data`` reaches the caller's ``MCPError`` as this very object: it tells our error from a server's.
        error = ErrorData(code=INTERNAL_ERROR, message=str(refused), data=refused)
        for ident in list(asked):
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await read_stream_writer.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=ident, error=error)))
        raise refused

    async def deliver(line: bytearray) -> bool:
        """Hand one line to the session; False once the session is gone."""
        text = line.decode(server.encoding, server.encoding_error_handler)
        if containers_past(text, containers):
            await refuse(f"holds more than {containers} JSON arrays and objects")
        item = sdk._parse_line(text)
        answer = item.message if isinstance(item, SessionMessage) else None
        if isinstance(answer, JSONRPCResponse | JSONRPCError) and answer.id is not None:
            asked.discard(answer.id)
        try:
            await read_stream_writer.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    async def read_lines() -> None:
        """The server's stdout, one line at a time, none kept past ``limit`` bytes."""
        assert process.stdout, "Opened process is missing stdout"
        line = bytearray()
        async for chunk in process.stdout:
            *ended, rest = chunk.split(b"\n")
            for part in ended:
                if len(line) + len(part) > limit:
                    await refuse(f"is larger than {limit} bytes")
                line += part
                if not await deliver(line):
                    return  # the session is gone; only the drain remains
                line.clear()
            if len(line) + len(rest) > limit:
                await refuse(f"is larger than {limit} bytes")
            line += rest

    async def stdout_reader() -> None:
        drain = True
        try:
            async with read_stream_writer:
                try:
                    await read_lines()
                except MessageTooLarge:
                    drain = False  # a server writing on blocks on its pipe until the shutdown stops it
                    raise
                finally:
                    if drain:
                        await sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the stdout stream under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("Reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin, "Opened process is missing stdin"
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    message = session_message.message
                    if isinstance(message, JSONRPCRequest):
                        asked.add(message.id)
                    elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                        asked.discard((message.params or {}).get("requestId", ""))
                    json = message.model_dump_json(by_alias=True, exclude_unset=True)
                    data = (json + "\n").encode(encoding=server.encoding, errors=server.encoding_error_handler)
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end, not a request hang
        finally:
            writer_done.set()

    async def shutdown() -> None:
        """The SDK's: stop traffic, let the writer flush, stop the server, release the streams."""
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        for stream in (read_stream, write_stream, read_stream_writer, write_stream_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded: the server cannot leak
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
