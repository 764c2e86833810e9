"""Serve recorded real provider replies, one recording per URL prefix.

Why: the fake server only says what we think providers say. The recordings in
``../shared/fixtures/recorded/`` are what 17 OpenAI-compatible providers
really said (empty tool-call ids, ``reasoning_content``, errors inside an SSE
stream), so each adapter test can point at one of them. Interaction ``i`` (its
0-based line number) answers ``POST /{i}/chat/completions`` (and, for the
Anthropic recordings, ``POST /{i}/v1/messages``; for the Responses API's,
``POST /{i}/responses``) with the recorded status and
body — JSON as recorded, SSE text unchanged — so a client given
``base_url_for(i)`` as its base URL gets exactly that reply, whatever it sends.

    with ReplayServer(FIXTURE) as server:
        ...server.base_url_for(137)...
    python -m tether.testing.replay ../shared/fixtures/recorded/openai_chat.jsonl --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from tether.testing.fake_server import ServerBase, send_sse


class ReplayServer(ServerBase):
    """POST ``{base_url_for(i)}/chat/completions`` (``/v1/messages``, ``/responses``) replays interaction ``i``."""

    def __init__(self, path: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.path = Path(path)
        with self.path.open(encoding="utf-8") as lines:
            self.interactions: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
        self.requests: list[tuple[int, Any]] = []  # (index, request JSON), as received

    def __len__(self) -> int:
        return len(self.interactions)

    def base_url_for(self, index: int) -> str:
        """The base URL that replays interaction ``index``."""
        return f"{self.origin}/{index}"

    def banner(self) -> str:
        """The line the server prints when it is ready."""
        return f"listening on {self.origin}/{{index}} ({len(self)} interactions)"

    def make_app(self) -> web.Application:
        """The aiohttp application: each interaction's endpoints under its index."""
        app = web.Application(client_max_size=64 * 1024**2)  # recorded requests can carry images
        app.router.add_post(r"/{index:\d+}/chat/completions", self._handle)
        app.router.add_post(r"/{index:\d+}/v1/messages", self._handle)
        app.router.add_post(r"/{index:\d+}/responses", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        index = int(request.match_info["index"])
        try:
            body: Any = await request.json()
        except ValueError:
            body = await request.text()
        self.requests.append((index, body))
        if index >= len(self.interactions):
            error = {"message": f"no interaction {index}: {self.path.name} holds {len(self)}"}
            return web.json_response({"error": error}, status=404)
        row = self.interactions[index]
        status = int(row["status"])  # one recording stores it as a string
        if "sse" in row:
            # Event by event, blank-line separators kept, so the bytes are the recorded ones.
            return await send_sse(request, re.findall(r".*?\n\n|.+$", row["sse"], re.S), status)
        if "response" in row:
            return web.json_response(row["response"], status=status)
        return web.Response(text=str(row.get("raw", "")), status=status, content_type="text/plain")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing.replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", type=Path, help="a recorded/*.jsonl file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port (default 8001)")
    args = parser.parse_args(argv)
    server = ReplayServer(args.path, host=args.host, port=args.port)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the normal way to stop it
        asyncio.run(server.serve_forever())


if __name__ == "__main__":
    main()
