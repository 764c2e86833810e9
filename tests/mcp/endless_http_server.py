"""An MCP server over streamable HTTP whose answer never ends: ``python endless_http_server.py PORT MODE LOG [COUNT]``.

It speaks just enough of the protocol (JSON answers, no event stream) for a
client to connect. Then, by ``MODE``, the answer to ``tools/list``
(``list``) or to ``tools/call`` (``call``) is a JSON body of up to
``ENDLESS`` bytes, written a megabyte at a time for as long as the client
reads. ``LOG`` gets the bytes of that answer written so far, after each
write: a test reads how much the client took before it stopped.

In the modes of ``endless_stdio_server.crowded`` the answer to ``tools/call``
is that result, a JSON body holding ``COUNT`` arrays and objects (or
brackets in its text). In ``gzip`` it is a gzip body of 64 KB, whatever the
client asked for, that inflates to a text block of ``BOMB`` bytes.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web
from endless_stdio_server import crowded

ENDLESS = 512 * 1024 * 1024
BOMB = 64 * 1024 * 1024
CHUNK = b"x" * (1024 * 1024)
TOOL = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {}}}


def answer(ident: Any, result: dict[str, Any]) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": ident, "result": result}, headers={"mcp-session-id": "s1"})


async def endless(request: web.Request, ident: Any, log: Path) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "application/json", "mcp-session-id": "s1"})
    await response.prepare(request)
    sent = 0
    await response.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": {"padding": ""}})[:-3].encode())
    while sent < ENDLESS:
        await response.write(CHUNK)  # raises once the client has gone
        sent += len(CHUNK)
        log.write_text(str(sent))
    return response


def bomb(ident: Any) -> web.Response:
    """A call's result of one text block of ``BOMB`` bytes of ``x``, gzipped (64 KB), sent as one body."""
    start, end = json.dumps(
        {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "@"}]}}
    ).split("@")
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    parts = [packer.compress(start.encode())]
    parts.extend(packer.compress(CHUNK) for _ in range(BOMB // len(CHUNK)))
    parts.append(packer.compress(end.encode()) + packer.flush())
    headers = {"content-type": "application/json", "content-encoding": "gzip", "mcp-session-id": "s1"}
    return web.Response(body=b"".join(parts), headers=headers)


def app(mode: str, log: Path, count: int) -> web.Application:
    async def rpc(request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method, ident = message.get("method"), message.get("id")
        if ident is None:  # a notification
            return web.Response(status=202)
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "endless", "version": "1"}
            return answer(ident, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info})
        if method == "tools/list" and mode != "list":
            return answer(ident, {"tools": [TOOL]})
        if method == "tools/call" and mode == "gzip":
            return bomb(ident)
        if method == "tools/call" and mode not in ("list", "call"):
            return answer(ident, crowded(mode, count))
        if method in ("tools/list", "tools/call"):
            return await endless(request, ident, log)
        return answer(ident, {})

    async def no_stream(request: web.Request) -> web.Response:
        return web.Response(status=405)

    made = web.Application()
    made.router.add_post("/mcp", rpc)
    made.router.add_get("/mcp", no_stream)
    made.router.add_delete("/mcp", no_stream)
    return made


if __name__ == "__main__":
    port, mode, log, count = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int((sys.argv[4:] or ["0"])[0])
    web.run_app(app(mode, log, count), host="127.0.0.1", port=port, print=None)
