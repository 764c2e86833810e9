"""Load on the ticket service: many concurrent sessions through its HTTP API.

    python bench/server_load.py [--sessions 200] [--latency 0.2] [--quick]

Three processes: this client, the real service (``python -m tickets_app
--seed``, uvicorn, shipped settings) and a fake model server with a fixed
latency per request (this file again, ``--serve-fake``: a stateless ticket
desk responder on ``tether.testing.FakeServer``). The fake model asks for
``get_ticket`` for the ticket named in the prompt, then answers from the
tool's result, so a session costs exactly two model requests in series.

Users sign in once each (alice and bob); argon2 is slow on purpose, and
signing in once per session would measure the password hash, not the
service. Two users stand for many, so the service's per-user run limits
are lifted for the bench (``TETHER_MAX_RUNS_PER_USER`` and
``TETHER_MAX_QUEUED_RUNS_PER_USER``). Then all sessions start at once on
one ``aiohttp`` client with unlimited connections. A session is: ``POST /api/runs`` with a question
about one of its user's tickets, ``GET /api/runs/{id}/events`` (SSE) until
``run_finished``, ``GET /api/runs/{id}``; it succeeds when every response is
2xx, the run is ``completed``, its ``get_ticket`` call's outcome is ``ok``
and the answer names the ticket's status. Its latency is from the POST to
the end of the GET.

Printed, as ratios measured in this run to the fake model's latency ``L``:

- p99 (and p50) session latency / L, and / 2L: a session waits for two model
  replies in series, so ``p99 / 2L`` ≈ 1.0 is ideal; and the latency of one
  session alone (before the load) / 2L, the floor under both.
- throughput × 2L / sessions (= 2L / wall): the fraction of the ideal
  throughput, all sessions in flight at once and each taking exactly 2L.
- the service's CPU seconds per session (``/proc/PID/stat``), and the model
  server's and this client's, for orientation.

Errors are counted and listed. The exit status is always 0 once the
service has answered a first session correctly: a benchmark informs, it
does not pass or fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tether.testing import FakeServer, ReplySpec, text, tool_calls

REPO = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join([str(REPO / "src"), str(REPO / "examples" / "tickets")])
sys.path.insert(0, str(REPO / "examples" / "tickets"))

from tickets_app.seed_data import TICKETS  # noqa: E402

BANNER = "listening on "
USERS = ("alice", "bob")
TICKET_ID = re.compile(r"TICKET-[0-9]{6}")
SESSION_TIMEOUT = 120.0  # seconds; a session slower than this is an error
ALONE = 5  # sequential sessions before the load; the first is not counted in the unloaded latency
START_TIMEOUT = 60.0  # the service seeds (four argon2 hashes) before it listens


# ------------------------------------------------------------ fake model


def ticket_desk(request: dict[str, Any]) -> ReplySpec:
    """Stateless: look up the ticket the user names (or list theirs), then answer from the tool's result."""
    messages = request.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        envelope = json.loads(last.get("content") or "{}")
        if not envelope.get("ok"):
            return text(f"The lookup failed: {envelope.get('error', {}).get('code', 'unknown')}.")
        result = envelope["result"]
        if "items" in result:
            return text(f"You have {result['total']} tickets.")
        return text(f"{result['id']} is {result['status']}: {result['title']}")
    call_id = f"call_{secrets.token_hex(12)}"
    found = TICKET_ID.search(str(last.get("content") or ""))
    if found is None:
        return tool_calls([(call_id, "list_tickets", "{}")])
    return tool_calls([(call_id, "get_ticket", json.dumps({"ticket_id": found.group()}))])


def serve_fake(latency: float) -> None:
    """``--serve-fake``: the fake model in this process, until terminated; prints its base URL."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(FakeServer(ticket_desk, latency=latency).serve_forever())


# ------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from ``/proc/PID/stat`` (psutil is not a dependency)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is field 3, ``state``
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def fake_model(latency: float) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    command = [sys.executable, __file__, "--serve-fake", "--latency", str(latency)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith(BANNER):
            raise RuntimeError(f"fake model did not start (exit {process.poll()}): {line!r}")
        yield line.removeprefix(BANNER), process
    finally:
        stop(process)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def service(model_url: str, tmp: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """``python -m tickets_app --seed`` (the ticket example) on a free port; yields its origin, process and log file."""
    port = free_port()
    command = [sys.executable, "-m", "tickets_app", "--seed", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--base-url", model_url, "--model", "fake"]
    command += ["--tickets-db", str(tmp / "tickets.db"), "--run-db", str(tmp / "runs.db")]
    env = {
        **os.environ,
        "TETHER_JWT_SECRET": secrets.token_urlsafe(48),
        "OPENAI_API_KEY": "x",
        "PYTHONPATH": PYTHONPATH,
    }
    # Two users stand for many here: lift the per-user limits, so that all sessions are in flight at once.
    env |= {"TETHER_MAX_RUNS_PER_USER": "1000", "TETHER_MAX_QUEUED_RUNS_PER_USER": "1000"}
    log = tmp / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield f"http://127.0.0.1:{port}", process, log
    finally:
        stop(process)


async def wait_healthy(http: aiohttp.ClientSession, origin: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the service exited with status {process.returncode}")
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"{origin}/api/health") as resp:
                if resp.status == 200:
                    return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not answer /api/health within {START_TIMEOUT:.0f} s")
        await asyncio.sleep(0.1)


# -------------------------------------------------------------- sessions


class SessionError(Exception):
    pass


@dataclass
class Session:
    user: str
    ticket: str
    latency: float = 0.0  # POST to the end of the GET of the run
    accepted: float = 0.0  # POST to its 202
    finished: float = 0.0  # POST to the run_finished event
    error: str | None = None


async def sign_in(http: aiohttp.ClientSession, origin: str, user: str) -> tuple[str, float]:
    start = time.perf_counter()
    body = {"username": user, "password": f"{user}-pass"}
    async with http.post(f"{origin}/api/auth/token", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"sign-in as {user}: HTTP {resp.status} {await resp.text()}")
        token = (await resp.json())["access_token"]
    return str(token), time.perf_counter() - start


async def expect(resp: aiohttp.ClientResponse, status: int, what: str) -> Any:
    if resp.status != status:
        raise SessionError(f"{what}: HTTP {resp.status} {(await resp.text())[:200]}")
    return await resp.json() if resp.content_type.endswith("json") else None


async def until_finished(resp: aiohttp.ClientResponse) -> str:
    """Read the SSE stream to its ``run_finished`` (or ``run_paused``) event; that event's kind."""
    event = None
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif not line and event in ("run_finished", "run_paused"):
            return event
    raise SessionError(f"the event stream ended before run_finished (last event {event})")


async def session(http: aiohttp.ClientSession, origin: str, token: str, s: Session) -> Session:
    headers = {"Authorization": f"Bearer {token}"}
    start = time.perf_counter()
    try:
        async with asyncio.timeout(SESSION_TIMEOUT):
            prompt = f"What is the status of {s.ticket}?"
            async with http.post(f"{origin}/api/runs", json={"prompt": prompt}, headers=headers) as resp:
                run_id = (await expect(resp, 202, "POST /api/runs"))["run_id"]
            s.accepted = time.perf_counter() - start
            async with http.get(f"{origin}/api/runs/{run_id}/events", headers=headers) as resp:
                await expect(resp, 200, "GET events")
                kind = await until_finished(resp)
            s.finished = time.perf_counter() - start
            async with http.get(f"{origin}/api/runs/{run_id}", headers=headers) as resp:
                view = await expect(resp, 200, "GET /api/runs/{id}")
            s.latency = time.perf_counter() - start
        check(view, kind, s.ticket)
    except SessionError as exc:
        s.error = str(exc)
    except TimeoutError:
        s.error = f"no answer within {SESSION_TIMEOUT:.0f} s"
    except aiohttp.ClientError as exc:
        s.error = f"{type(exc).__name__}: {exc}"
    return s


def check(view: dict[str, Any], kind: str, ticket: str) -> None:
    if kind != "run_finished" or view["status"] != "completed":
        raise SessionError(f"run {view['run_id']} ended {kind}, status {view['status']}: {view.get('reason')}")
    calls = [c for step in view["steps"] for c in step["calls"]]
    outcomes = [(c["tool"], c["outcome"]) for c in calls]
    if outcomes != [("get_ticket", "ok")]:
        raise SessionError(f"run {view['run_id']}: tool outcomes {outcomes}, expected get_ticket ok")
    status = next(t.status for t in TICKETS if t.id == ticket)
    if not (view["output"] or "").startswith(f"{ticket} is {status}"):
        raise SessionError(f"run {view['run_id']} answered {view['output']!r}")


def plan(n: int) -> list[Session]:
    """``n`` sessions, alternating users, each about the next of its user's tickets."""
    owned = {user: [t.id for t in TICKETS if t.reporter == user] for user in USERS}
    return [Session(user, owned[user][i // len(USERS) % len(owned[user])]) for i, user in enumerate(USERS * n)][:n]


# ------------------------------------------------------------- the bench


@dataclass
class Result:
    sessions: list[Session]
    wall: float
    sign_ins: dict[str, float]
    cpu: dict[str, float]  # process -> CPU seconds during the concurrent sessions
    log_problems: list[str]
    alone: float  # median latency of a session with nothing else running


async def bench(n: int, latency: float, tmp: Path) -> Result:
    with fake_model(latency) as (model_url, model), service(model_url, tmp) as (origin, server, log):
        # One client for everything, unlimited connections: n sessions in flight need n sockets.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            await wait_healthy(http, origin, server)
            signed = {user: await sign_in(http, origin, user) for user in USERS}
            tokens = {user: token for user, (token, _) in signed.items()}
            alone = plan(ALONE)  # one at a time: first use (imports, connections), and the unloaded latency
            for warm in alone:
                await session(http, origin, tokens[warm.user], warm)
                if warm.error:  # never time a path that gives a wrong answer
                    raise RuntimeError(f"warm-up session failed: {warm.error}\n{log.read_text()[-3000:]}")
            pids = {"service": server.pid, "fake model": model.pid}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            client_before = time.process_time()
            start = time.perf_counter()
            runs = plan(n)
            await asyncio.gather(*(session(http, origin, tokens[s.user], s) for s in runs))
            wall = time.perf_counter() - start
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            cpu["this client"] = time.process_time() - client_before
    problems = [line for line in log.read_text().splitlines() if not line.startswith("INFO")]
    sign_ins = {user: seconds for user, (_, seconds) in signed.items()}
    return Result(runs, wall, sign_ins, cpu, problems, statistics.median(s.latency for s in alone[1:]))


def quantile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0 < q < 1), interpolated between the closest ranks."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def report(result: Result, latency: float) -> dict[str, Any]:
    n = len(result.sessions)
    ok = [s for s in result.sessions if s.error is None]
    failed = [s for s in result.sessions if s.error is not None]
    ideal = 2 * latency
    throughput = n / result.wall
    print(f"{n} concurrent sessions through the HTTP API; fake model at L = {latency:.3f} s per request,")
    print("2 requests per session in series (get_ticket, then the answer): the ideal session takes 2L")
    signs = ", ".join(f"{user} {seconds * 1000:.0f} ms" for user, seconds in result.sign_ins.items())
    print(f"  signed in once per user ({signs}), not per session: argon2 is slow on purpose,")
    print("  so signing in per session would measure the password hash, not the service")
    print(f"  sessions {n}, errors {len(failed)}, wall {result.wall:.3f} s, throughput {throughput:.1f} sessions/s")
    numbers: dict[str, Any] = {"sessions": n, "errors": len(failed), "wall": result.wall, "throughput": throughput}
    if ok:
        lat = [s.latency for s in ok]
        p50, p99 = quantile(lat, 0.5), quantile(lat, 0.99)
        phases = {
            "POST→202": quantile([s.accepted for s in ok], 0.99),
            "POST→run_finished": quantile([s.finished for s in ok], 0.99),
            "run_finished→GET done": quantile([s.latency - s.finished for s in ok], 0.99),
        }
        print(f"  one session alone (median of {ALONE - 1} sequential ones before the load): {result.alone:.3f} s")
        print(f"  latency p50 {p50:.3f} s, p99 {p99:.3f} s, max {max(lat):.3f} s (of {len(ok)} sessions without error)")
        print("  p99 by phase: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in phases.items()))
        rows = [
            ("p99 latency / L", p99 / latency, "the slowest 1% of sessions, in model latencies (ideal 2)"),
            ("p99 latency / 2L", p99 / ideal, "the same against the two model replies a session waits for (ideal 1)"),
            ("p50 latency / 2L", p50 / ideal, "the typical session against its two model replies (ideal 1)"),
            ("alone / 2L", result.alone / ideal, "one session with no load: the floor under the two above"),
            ("throughput × 2L / sessions", ideal / result.wall,
             "fraction of ideal throughput: all sessions in flight, each taking 2L (ideal 1)"),
        ]  # fmt: skip
        for label, ratio, meaning in rows:
            print(f"  {label:27s} = {ratio:5.2f}x  {meaning}")
        numbers.update(p50=p50, p99=p99, ratios={label: ratio for label, ratio, _ in rows})
    cpu = result.cpu
    print(
        f"  CPU per session: service {cpu['service'] / n * 1000:.1f} ms ({cpu['service']:.2f} s in all); "
        f"for orientation, fake model {cpu['fake model'] / n * 1000:.1f} ms, "
        f"this client {cpu['this client'] / n * 1000:.1f} ms ({os.cpu_count()} CPUs)"
    )
    numbers["cpu_seconds"] = cpu
    if failed:
        print(f"  ERRORS: {len(failed)} of {n} sessions failed:")
        for message, count in Counter(s.error for s in failed).most_common(10):
            print(f"    {count:4d} x {message}")
    if result.log_problems:
        print(f"  service log, lines other than INFO ({len(result.log_problems)}):")
        for line in result.log_problems[:20]:
            print(f"    {line}")
    return numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, help="concurrent sessions (default 200; 20 with --quick)")
    parser.add_argument("--latency", type=float, default=0.2, help="the fake model's seconds per request")
    parser.add_argument("--quick", action="store_true", help="20 sessions: a smoke test")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    parser.add_argument("--serve-fake", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.latency)
        return
    n = args.sessions or (20 if args.quick else 200)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(bench(n, args.latency, Path(tmp)))
    numbers = report(result, args.latency)
    if args.json:
        print(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
