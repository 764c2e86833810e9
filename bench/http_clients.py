"""Measure the two candidate HTTP clients against one loopback server.

Why this exists: tether's adapter had to pick httpx2 or aiohttp. This script
is the measurement behind that choice; run it again before changing it.

    python bench/http_clients.py

Prints, for each client, the CPU per sequential request and the wall time of
500 concurrent requests to a server answering after 200 ms, as ratios to
aiohttp measured in the same run.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import aiohttp
import httpx2
from aiohttp import web

BODY = json.dumps(
    {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}
)


def _serve(port: int, latency: float, ready: threading.Event) -> None:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        if latency:
            await asyncio.sleep(latency)
        return web.Response(text=BODY, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=2048).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _with_httpx2(url: str, n: int, concurrent: bool) -> None:
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as client:

        async def one() -> None:
            r = await client.post(url, json={"messages": []})
            r.json()

        if concurrent:
            await asyncio.gather(*(one() for _ in range(n)))
        else:
            for _ in range(n):
                await one()


async def _with_aiohttp(url: str, n: int, concurrent: bool) -> None:
    conn = aiohttp.TCPConnector(limit=1000)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one() -> None:
            async with session.post(url, json={"messages": []}) as r:
                await r.json()

        if concurrent:
            await asyncio.gather(*(one() for _ in range(n)))
        else:
            for _ in range(n):
                await one()


def _measure(fn, url: str, n: int, concurrent: bool) -> tuple[float, float]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    asyncio.run(fn(url, n, concurrent))
    return time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    fast, slow = _free_port(), _free_port()
    for port, latency in ((fast, 0.0), (slow, 0.2)):
        ready = threading.Event()
        threading.Thread(target=_serve, args=(port, latency, ready), daemon=True).start()
        ready.wait()
    results = {}
    for name, fn in (("aiohttp", _with_aiohttp), ("httpx2", _with_httpx2)):
        _measure(fn, f"http://127.0.0.1:{fast}/v1/chat/completions", 50, False)  # warm-up
        _, seq_cpu = _measure(fn, f"http://127.0.0.1:{fast}/v1/chat/completions", 1000, False)
        conc_wall, _ = _measure(fn, f"http://127.0.0.1:{slow}/v1/chat/completions", 500, True)
        results[name] = (seq_cpu, conc_wall)
    base_cpu, base_wall = results["aiohttp"]
    for name, (cpu, wall) in results.items():
        print(
            f"{name:8s} sequential CPU/request {cpu / base_cpu:5.2f}x aiohttp   "
            f"500 concurrent @200ms wall {wall / base_wall:5.2f}x aiohttp"
        )


if __name__ == "__main__":
    main()
