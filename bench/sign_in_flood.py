"""A sign-in flood against the ticket service: do other users' runs still finish on time?

    python bench/sign_in_flood.py [--flood 200] [--sessions 10] [--latency 0.2] [--rounds 3]

The same three processes as ``bench/server_load.py`` (this client, the real
service with its shipped settings, the fake model at latency ``L``). alice
and bob sign in first. Then, three times, ``--sessions`` of their sessions
run at once (``POST /api/runs`` → SSE to ``run_finished`` → ``GET``, each
``get_ticket`` then an answer, so two model replies in series):

- unloaded: nothing else happens;
- one client floods: ``--flood`` sign-ins with wrong passwords for made-up
  accounts, all at once, from one client address (127.0.0.1), started just
  before the sessions;
- many clients flood: the same, each sign-in from its own address
  (127.0.1.x: all of 127/8 is loopback), so no per-client limit helps; only
  the hashing's own threads and the service-wide cap on pending sign-ins do.

The flood comes from a process of its own (this file, ``--flood-only``),
so that sending it does not slow the client that times the sessions.

The three are measured ``--rounds`` times in turn; each round's ratios are
to that round's unloaded figure, and the median round is reported (the
machine's other load moves every figure, loaded or not).

Printed: per round the median session of each case and the ratios loaded /
unloaded (the issue asks for at most 1.5), the median of those ratios, and
what the flood was answered (401 checked, 429 throttled, 503 hashing
saturated) and how long it took.
A benchmark informs; it does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_load import USERS, fake_model, plan, service, session, sign_in, wait_healthy


async def flood_once(n: int, origin: str, many_clients: bool) -> tuple[Counter[int], float]:
    """``n`` wrong sign-ins at once; the statuses they got and the seconds until the last answer.

    Plain sockets and prepared bytes: the flood should cost the machine as little as a flood can.
    """
    host, port = origin.removeprefix("http://").split(":")

    async def attempt(i: int) -> int:
        body = json.dumps({"username": f"flood{i}", "password": "not-the-password"}).encode()
        request = (
            f"POST /api/auth/token HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode() + body
        local = (f"127.0.1.{i % 250 + 1}", 0) if many_clients else None
        reader, writer = await asyncio.open_connection(host, int(port), local_addr=local)
        writer.write(request)
        status = int((await reader.readline()).split()[1])
        await reader.read()
        writer.close()
        return status

    start = time.perf_counter()
    statuses = await asyncio.gather(*(attempt(i) for i in range(n)))
    return Counter(statuses), time.perf_counter() - start


def flood_only(n: int, origin: str, many_clients: bool) -> None:
    """``--flood-only``: wait for a line on stdin, flood, print the statuses and the seconds as JSON."""
    print("ready", flush=True)
    sys.stdin.readline()
    statuses, took = asyncio.run(flood_once(n, origin, many_clients))
    print(json.dumps({"statuses": statuses, "seconds": took}), flush=True)


async def flood_process(n: int, origin: str, many_clients: bool) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--flood-only", str(n), "--origin", origin]
    if many_clients:
        command.append("--many-clients")
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdin is not None
    if (await asyncio.to_thread(process.stdout.readline)).strip() != "ready":
        raise RuntimeError("the flood process did not start")
    return process


async def flood_result(process: subprocess.Popen[str]) -> tuple[Counter[int], float]:
    out, _ = await asyncio.to_thread(process.communicate, timeout=600)
    data = json.loads(out.strip().splitlines()[-1])
    return Counter({int(k): v for k, v in data["statuses"].items()}), float(data["seconds"])


async def sessions_at_once(http: aiohttp.ClientSession, origin: str, tokens: dict[str, str], n: int) -> list[float]:
    runs = plan(n)
    done = await asyncio.gather(*(session(http, origin, tokens[s.user], s) for s in runs))
    errors = [s.error for s in done if s.error]
    if errors:
        raise RuntimeError(f"{len(errors)} session(s) failed: {errors[:3]}")
    return [s.latency for s in done]


CASES = (("one client floods", False), ("many clients flood", True))


async def bench(flood: int, sessions: int, latency: float, rounds: int, tmp: Path) -> None:
    print(f"{sessions} sessions at once (2 model replies of L = {latency:.3f} s each), unloaded and during a")
    print(f"flood of {flood} wrong sign-ins sent all at once; {rounds} round(s)")
    ratios: dict[str, list[float]] = {label: [] for label, _ in CASES}
    with fake_model(latency) as (model_url, _), service(model_url, tmp) as (origin, server, _log):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            await wait_healthy(http, origin, server)
            tokens = {user: (await sign_in(http, origin, user))[0] for user in USERS}
            await sessions_at_once(http, origin, tokens, sessions)  # warm-up: imports, connections
            for round_ in range(1, rounds + 1):
                alone = statistics.median(await sessions_at_once(http, origin, tokens, sessions))
                line = [f"  round {round_}: unloaded median {alone:.3f} s"]
                for label, many in CASES:
                    process = await flood_process(flood, origin, many)
                    assert process.stdin is not None
                    process.stdin.write("go\n")
                    process.stdin.flush()
                    await asyncio.sleep(0.1)  # the flood is in: its sign-ins are being checked or refused
                    loaded = statistics.median(await sessions_at_once(http, origin, tokens, sessions))
                    statuses, took = await flood_result(process)
                    ratios[label].append(loaded / alone)
                    answered = ", ".join(f"{count} x {status}" for status, count in sorted(statuses.items()))
                    line.append(f"    {label}: median {loaded:.3f} s = {loaded / alone:.2f}x unloaded;"
                                f" flood answered {answered} in {took:.2f} s")  # fmt: skip
                print("\n".join(line))
    for label, values in ratios.items():
        print(f"  {label}: loaded / unloaded session median = {statistics.median(values):.2f}x"
              f" (median of {len(values)} rounds; the issue asks <= 1.5)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=200, help="sign-ins sent at once (default 200)")
    parser.add_argument("--sessions", type=int, default=10, help="other users' sessions run meanwhile")
    parser.add_argument("--latency", type=float, default=0.2, help="the fake model's seconds per request")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three measurements")
    parser.add_argument("--flood-only", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--origin", help=argparse.SUPPRESS)
    parser.add_argument("--many-clients", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood_only:
        flood_only(args.flood_only, args.origin, args.many_clients)
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(args.flood, args.sessions, args.latency, args.rounds, Path(tmp)))


if __name__ == "__main__":
    main()
