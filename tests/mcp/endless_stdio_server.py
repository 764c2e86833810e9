"""An MCP server over stdio whose message never ends: ``python endless_stdio_server.py MODE LOG [COUNT]``.

It speaks just enough of the protocol (one JSON-RPC message a line) for a
client to connect. Then, by ``MODE``, the answer to ``initialize``
(``initialize``), to ``tools/list`` (``list``) or to ``tools/call``
(``call``) is one line of up to ``ENDLESS`` bytes, with no newline, written a
megabyte at a time for as long as the client reads. In ``huge-call`` the
answer to ``tools/call`` is a well-formed line of ``HUGE`` bytes that does
end, and the server then answers on as usual. ``LOG`` gets the bytes of that
answer written so far, after each write: a test reads how much the client
took before it stopped.

In the modes of ``crowded`` the answer to ``tools/call`` is a line of well
under ``HUGE`` bytes whose arrays and objects (or brackets in its text) are
many, ``COUNT`` of them; ``LOG`` is not written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ENDLESS = 512 * 1024 * 1024
HUGE = 64 * 1024 * 1024
CHUNK = b"x" * (1024 * 1024)
TOOL = {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {}}}
LONG = {"initialize": "initialize", "list": "tools/list", "call": "tools/call", "huge-call": "tools/call"}


def send(ident: Any, result: dict[str, Any]) -> None:
    sys.stdout.buffer.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode() + b"\n")
    sys.stdout.buffer.flush()


def long_answer(ident: Any, size: int, log: Path, *, end: bool) -> None:
    """A call's result whose one text block is ``size`` bytes of ``x``; its line ends only if ``end``."""
    out = sys.stdout.buffer
    start = {"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": ""}]}}
    out.write(json.dumps(start).encode()[: -len('"}]}}')])  # the text left open
    sent = 0
    while sent < size:
        out.write(CHUNK)
        out.flush()  # blocks while the client does not read; raises once it has gone
        sent += len(CHUNK)
        log.write_text(str(sent))
    if end:
        out.write(b'"}]}}\n')
        out.flush()


def crowded(mode: str, count: int) -> dict[str, Any]:
    """A call's result: ``count`` empty text blocks (``blocks``), structured content listing ``count`` records
    of two arrays and objects each, and the same as text (``records``), or one text of ``count`` times ``[{``
    (``brackets``)."""
    if mode == "blocks":
        return {"content": [{"type": "text", "text": ""}] * count}
    if mode == "records":
        records = [{"id": i, "name": f"item {i}", "tags": ["new"]} for i in range(count)]
        return {
            "content": [{"type": "text", "text": json.dumps({"records": records})}],
            "structuredContent": {"records": records},
        }
    return {"content": [{"type": "text", "text": "[{" * count}]}


def main() -> None:
    mode, log = sys.argv[1], Path(sys.argv[2])
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:  # a notification
            continue
        if method == "tools/call" and mode not in LONG:
            send(ident, crowded(mode, int(sys.argv[3])))
        elif method == LONG.get(mode):
            long_answer(ident, HUGE if mode == "huge-call" else ENDLESS, log, end=mode == "huge-call")
        elif method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "endless", "version": "1"}
            send(ident, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info})
        elif method == "tools/list":
            send(ident, {"tools": [TOOL]})
        elif method == "tools/call":
            send(ident, {"content": [{"type": "text", "text": "ok"}]})
        else:
            send(ident, {})


if __name__ == "__main__":
    main()
