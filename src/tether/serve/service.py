"""Runs driven in the background of the HTTP service, and their live events.

One run store serves every run. A SQLite store (one sqlite3 connection) is
touched only on the event loop's thread, and each of its calls is one
synchronous transaction on a local file: two drivers can interleave
between transactions, never inside one. A PostgreSQL store is called on
threads (its pool serves many), so a query waiting on the network or on a
row lock holds up only its own request or run, never the loop. Tools may
run in worker threads; they never see the store.

A run in progress is *live*: the service holds its task, its owner and the
queues of the clients following its events. The driver's ``on_event``
pushes each event to those queues after the store has it, numbered with the
store's own sequence (the driver delivers only checkpointed events, in
order), so a client that reads the stored events and then the live ones,
in the same step of the loop, neither misses nor repeats one.

All runs in this process share one store, and so one lease owner: the
store's lease cannot keep two of our own drivers apart. The live registry
does: a run that is live is never resumed or decided on; and until a run
is live, the requests acting on it (deciding, settling, cancelling, taking
it over) do so one at a time (``one_at_a_time``).

A run is written to the store (status ``ready``, with this process's lease)
before the request starting it is answered 202, also when it must wait for a slot
(``FairSlots``): a run accepted is a run recorded. Leases decide who drives,
never pids: a driver renews its run's lease, and ``keep`` renews those of
runs waiting here for a slot. Several processes (``tether serve --workers
N``, or hosts) may share one PostgreSQL store: every third of a lease term
each of them takes the runs in flight that no live lease holds (their
process died, or a stop cut them off) and drives them on from their last
checkpoint, so a run is driven by one process at a time and none is lost.
Slots and their limits are per process.

A client may follow a run from any process: from the one driving it, its
events come as the driver stores them (with the streamed text); from
another, by polling the store for events after the last one sent. Each
event stream holds one of its caller's ``Settings.max_event_streams_per_user``
(counted per process, in a dict: a stream is a connection to this process)
until it ends or its client goes; one more is a 429 before it starts.
Listing approvals reads a second connection to the store on a thread of
its own, so that no number of paused runs holds up the loop.

On SIGTERM the service stops taking runs (503), lets the tool calls running
finish (up to ``Settings.shutdown_grace``), checkpoints every run and lets
go of it, unfinished but not ended: a restart, or another process sharing
the store, carries each on. A 202 is a promise to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
import weakref
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol, TypeVar

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tether.core.envelope import outcome_code
from tether.core.errors import ApprovalMismatch, ConfigurationError
from tether.core.events import RUN_FINISHED, RUN_PAUSED, TEXT, TRANSIENT, RunEvent
from tether.core.machine import PendingCall, RunState, Status
from tether.core.nesting import utf8
from tether.core.redact import redact, redact_arguments
from tether.drivers.ids import new_id
from tether.drivers.local.durable import cancel, decide, ended_parent, top_run, waiting_calls
from tether.drivers.local.runner import Agent, Driver
from tether.models.base import Model
from tether.serve.problems import Problem
from tether.serve.schedule import FairSlots
from tether.serve.settings import DEFAULT_RUNS_RETRY_AFTER, Settings
from tether.store import LeaseHeld, RunNotFound, RunStore, StoreError, TamperedRun, open_store
from tether.store.records import RunSummary, StoredRun
from tether.tools.context import Principal
from tether.tools.tool import Tool

KEEPALIVE_SECONDS = 15.0
ENDS_STREAM = frozenset({RUN_FINISHED, RUN_PAUSED})
TAKEOVER_SCAN_LIMIT = 1_000  # runs taken over at most per scan; the next scan takes more
INTERRUPTED = frozenset({Status.READY.value, Status.AWAITING_MODEL.value, Status.AWAITING_TOOLS.value})
SURFACE = "server"  # in each run's setup: the runs this service started, the only ones it takes over
POLL_SECONDS = 0.25  # how often a client following a run driven elsewhere looks for its new events
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

log = logging.getLogger("tether.serve")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamEvent:
    kind: str
    seq: int | None  # None for streamed text pieces, which the store does not keep
    step: int
    data: dict[str, Any]

    def sse(self, run_id: str) -> str:
        payload = {"run_id": run_id, "seq": self.seq, "kind": self.kind, "step": self.step, "data": self.data}
        lines = [f"event: {self.kind}"]
        if self.seq is not None:
            lines.append(f"id: {self.seq}")
        lines.append("data: " + json.dumps(payload, ensure_ascii=False, default=str))  # one line: no indent
        return "\n".join(lines) + "\n\n"


@dataclass(slots=True)
class LiveRun:
    run_id: str
    owner: str
    next_seq: int = 0  # the store's seq of the last event this run has
    driver: Driver | None = None  # once the run has a slot
    driving: bool = False  # has its slot: the driver renews the lease; before that ``keep`` does
    task: asyncio.Task[None] | None = None
    followers: set[asyncio.Queue[StreamEvent | None]] = field(default_factory=set)

    def on_event(self, event: RunEvent) -> None:
        if event.kind in TRANSIENT and event.kind != TEXT:
            return  # not stored, so no seq to resume from; the page shows calls from the stored events
        if event.run_id != self.run_id:
            return  # a child run's (a sub-agent's): numbered in its own log, not this run's
        seq = None
        if event.kind != TEXT:
            self.next_seq += 1
            seq = self.next_seq
        item = StreamEvent(event.kind, seq, event.step, redact(event.data))
        for queue in self.followers:
            queue.put_nowait(item)

    def end(self) -> None:
        for queue in self.followers:
            queue.put_nowait(None)


class EventStream:
    """A run's events as SSE text (``RunService.follow``), holding one of its caller's event streams and, for a
    run driven here, a queue among the run's followers.

    Both are given back (``release``, once) when the stream ends, fails or is
    cancelled (its client gone), and by ``aclose`` also when it never
    started: a response cut off before its first chunk never runs the
    generator's own cleanup. ``EventStreamResponse`` closes it however the
    response ends.
    """

    def __init__(self, lines: AsyncGenerator[str], release: Callable[[], None]) -> None:
        self.lines = lines
        self.release = release

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> str:
        try:
            return await anext(self.lines)
        except BaseException:  # its end, an error, or the client gone (cancelled): given back at once
            self.release()
            raise

    async def aclose(self) -> None:
        self.release()
        await self.lines.aclose()


class EventStreamResponse(StreamingResponse):
    """An ``EventStream`` as server-sent events; the stream is closed however the response ends."""

    def __init__(self, stream: EventStream) -> None:
        super().__init__(stream, media_type="text/event-stream", headers=SSE_HEADERS)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.stream.aclose()


def open_run_store(settings: Settings, *, reader: bool = False) -> RunStore:
    """The run store ``settings.run_db`` names: a SQLite file, or PostgreSQL (typed as the SQLite store, whose
    contract both keep); ``reader``: a second one, for the listings read on a thread of their own."""
    options: dict[str, Any] = {"log_content": settings.log_content, "lease_seconds": settings.lease_seconds}
    if reader and settings.shared_store:
        options["pool_size"] = 1
    return open_store(settings.run_db, **options)


def storable(key: str) -> bool:
    """Whether every store can hold ``key`` as an id: PostgreSQL's text refuses NUL, and no store writes a lone
    surrogate. An id from a request that is not names no run or conversation (the store is not asked: it would
    fail, not miss)."""
    return "\x00" not in key and utf8(key)


class Caller(Protocol):
    """Who acts on a run here: a served agent's caller (``tether.serve.runs``), or an application's user."""

    @property
    def id(self) -> str: ...

    @property
    def username(self) -> str: ...


class RunService:
    """Starts, follows, lists and decides on runs, all on the event loop's thread."""

    surface = SURFACE  # in each run's setup: a service takes over only the runs of its own surface

    def __init__(
        self,
        settings: Settings,
        store: RunStore,
        tools: Sequence[Tool],
        resolve_principal: Callable[[Principal], Awaitable[Principal | None]] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.resolve_principal = resolve_principal
        # Read-only, on one thread of its own: listings that may be long never run on the loop.
        self.reader = open_run_store(settings, reader=True)
        self.reads = ThreadPoolExecutor(1, thread_name_prefix="tether-run-reads")
        # Built once: a tool's schema and validator cost milliseconds, and tools hold no per-user state
        # (who is asking comes from the run's principal, in each call's context).
        self.tools = list(tools)
        self.model: Model | None = None  # one client shared by every run, made on first use
        self.slots = FairSlots(
            settings.max_concurrent_runs, settings.max_runs_per_user, settings.max_queued_runs_per_user
        )
        self.live: dict[str, LiveRun] = {}
        self.streams: Counter[str] = Counter()  # event streams open per user (``hold_stream``)
        self.refused: set[str] = set()  # runs not to resume (another surface's, tampered with): not tried again
        self.unreadable: set[str] = set()  # runs whose row was edited: left out of listings, logged once
        self.keeper: asyncio.Task[None] | None = None
        self.stopping = False  # SIGTERM: no new runs; those in progress are handed on
        self._held: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def io(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call: on the loop for a local SQLite file, on a thread for a store across a network."""
        if self.store.remote:
            return await asyncio.to_thread(call, *args, **kwargs)
        return call(*args, **kwargs)

    @contextlib.asynccontextmanager
    async def one_at_a_time(self, run_id: str) -> AsyncIterator[None]:
        """Act on ``run_id`` (decide, settle, cancel, take it over; or, a conversation's id, record its next turn)
        for one request of this process at a time.

        The store's lease keeps other processes out, not this one's own
        requests (one lease owner), and the live registry only once a run is
        driven: a PostgreSQL store is called on threads, so two decisions
        sent at once could otherwise both be recorded and both resume the
        run, two drivers on one run.
        """
        lock = self._held.get(run_id)
        if lock is None:
            lock = self._held[run_id] = asyncio.Lock()
        async with lock:
            yield

    def _agent(self, principal: Principal) -> Agent:
        if self.model is None:
            self.model = self.settings.model_factory()
        return Agent(
            self.model,
            self.tools,
            principal=principal,
            store=self.store,
            system=self.settings.system,
            budget=self.settings.budget,
            setup={"surface": self.surface},
            resolve_principal=self.resolve_principal,
        )

    # --- driving -----------------------------------------------------------------

    def admit(self, user_id: str) -> None:
        """Nothing, if a new run of ``user_id`` may be recorded now; else the 503 (stopping) or 429 (the user has as
        many runs going and waiting as allowed) problem. Asked before anything of the run is recorded."""
        if self.stopping:
            raise Problem(503, "the service is stopping; try again in a moment", headers={"Retry-After": "5"})
        if not self.slots.admits(user_id):
            raise Problem(
                429,
                "you have as many runs going and waiting as you may; try again when one has finished",
                headers={"Retry-After": str(DEFAULT_RUNS_RETRY_AFTER)},
            )

    async def start(self, user: Caller, prompt: str, principal: Principal) -> LiveRun:
        """Record a new run of ``user`` (status ``ready``), its tools called as ``principal``, and have it driven
        when a slot is free; 429 past the user's limits."""
        self.admit(user.id)
        live = LiveRun(new_id(), user.id)
        agent = self._agent_or_503(principal)
        live.driver = agent.driver(prompt, run_id=live.run_id, on_event=live.on_event)
        try:
            # On disk before the 202: a restart drives it.
            await self.io(self.store.checkpoint, live.driver.state, durable=True)
        except StoreError as exc:
            log.error("cannot record a new run: %s", exc)
            raise Problem(503, "the service cannot record runs now; the error is logged") from None
        driver = live.driver
        self._launch(live, agent, lambda _: driver)
        return live

    def resume(self, run_id: str, principal: Principal) -> LiveRun:
        """Drive a stored run on (``LeaseHeld`` in its task if another process drives it)."""
        live = LiveRun(run_id, principal.id)

        def make(agent: Agent) -> Driver:  # on a thread for a remote store (``_drive``)
            live.next_seq = len(self.store.events(run_id))  # the driver's events follow these
            return agent.resume(run_id, on_event=live.on_event)

        self._launch(live, self._agent_or_503(principal), make)
        return live

    async def take_over(self) -> list[str]:
        """Drive on the runs in flight that no live lease holds; runs waiting for a person stay waiting.

        Those are runs a stop cut off (this process's own, before a
        restart) and runs of a process that died, once its lease has
        expired; whichever process takes the lease first drives the run.
        Called at start and then every third of a lease term (``keep``).
        """
        if self.stopping:
            return []
        try:
            found = await self.io(
                self.listed,
                self.store,
                limit=TAKEOVER_SCAN_LIMIT,
                statuses=INTERRUPTED,
                unleased=True,
                oldest_update_first=True,
            )
        except StoreError as exc:
            log.warning("cannot look for runs to take over: %s", exc)
            return []
        taken = []
        for summary in found:  # oldest first: each user's runs keep their order in line
            async with self.one_at_a_time(summary.run_id):
                if await self._take_over(summary.run_id):
                    taken.append(summary.run_id)
        if taken:
            log.info("took over %d run(s) in flight that no process drives", len(taken))
        return taken

    def listed(self, store: RunStore, *args: Any, **kwargs: Any) -> list[RunSummary]:
        """``store.list_runs(*args, **kwargs)`` without the runs whose row was edited (``skipped``): the others
        are still taken over and listed, and each of those is logged, once per process, for a person to look at
        (tether runs verify)."""
        skipped: list[tuple[str, StoreError]] = []
        found = store.list_runs(*args, skipped=skipped, **kwargs)
        for run_id, exc in skipped:
            if run_id not in self.unreadable:
                self.unreadable.add(run_id)
                log.warning("%s; the run is left out of listings and take-overs", exc)
        return found

    async def _take_over(self, run_id: str) -> bool:
        """Drive ``run_id`` on if no one does (``take_over``); whether this process now drives it."""
        if run_id in self.live or run_id in self.refused or self.stopping:
            return False
        try:
            await self.io(self.store.acquire, run_id)  # held from now on, by the driver or by ``keep``
        except LeaseHeld:
            return False  # another process took it first
        except StoreError as exc:
            log.warning("cannot take over run %s: %s", run_id, exc)
            return False
        try:
            stored = await self.io(self.store.load, run_id)
            if stored.setup.get("surface") != self.surface:
                self.refused.add(run_id)  # a run of `tether run` on a shared store: not ours to drive
                await self.io(self.store.release, run_id)
                return False
            if stored.state.status.value not in INTERRUPTED:
                await self.io(self.store.release, run_id)  # finished or paused since the scan
                return False
            if stored.parent_id is not None:
                # A sub-agent's child run never goes on alone: its parent's take-over carries it on, and one
                # cut off with a parent that has ended since is cancelled.
                await self.io(self.store.release, run_id)
                if (why := await self.io(ended_parent, self.store, stored)) is not None:
                    await self.io(cancel, self.store, run_id, reason=why, by="tether serve")
                    log.info("cancelled run %s: %s", run_id, why)
                return False
            self.resume(run_id, stored.principal)
        except (StoreError, Problem, ApprovalMismatch) as exc:
            log.warning("cannot resume run %s: %s", run_id, exc)
            if isinstance(exc, TamperedRun):
                self.refused.add(run_id)  # until a person looks at it: tether runs verify
            with contextlib.suppress(StoreError):
                await self.io(self.store.release, run_id)
            return False
        return True

    async def start_keeping(self) -> None:
        """Take over the runs a stop cut off, then keep doing so (``keep``) for as long as the service runs."""
        await self.take_over()
        self.keeper = asyncio.create_task(self.keep(), name="tether lease keeper")

    async def keep(self) -> None:
        """Every third of a lease term: renew the leases of runs waiting here for a slot, then ``take_over``."""
        while True:
            await asyncio.sleep(self.settings.lease_seconds / 3)
            try:
                for live in list(self.live.values()):
                    if not live.driving:
                        with contextlib.suppress(LeaseHeld):  # not ours (yet): its driver will find out
                            await self.io(self.store.renew, live.run_id)
                await self.take_over()
            except StoreError as exc:
                log.warning("cannot renew or take over runs now: %s", exc)
            except Exception:  # never the end of the keeping: the next round tries again
                log.exception("renewing leases or taking over runs failed")

    def _agent_or_503(self, principal: Principal) -> Agent:
        try:
            return self._agent(principal)  # now, so that a model misconfiguration is the caller's answer
        except ConfigurationError as exc:
            log.error("cannot start a run: %s", exc)
            raise Problem(503, "the service cannot reach a model now; the error is logged") from None

    def _launch(self, live: LiveRun, agent: Agent, make: Callable[[Agent], Driver]) -> None:
        self.live[live.run_id] = live
        live.task = asyncio.create_task(self._drive(live, agent, make), name=f"run {live.run_id}")

    async def _drive(self, live: LiveRun, agent: Agent, make: Callable[[Agent], Driver]) -> None:
        try:
            async with self.slots.slot(live.owner):
                if self.stopping:  # its turn came while the service stops: hand it on, unstarted
                    with contextlib.suppress(StoreError):
                        await self.io(self.store.release, live.run_id)
                    return
                live.driving = True
                live.driver = await self.io(make, agent)
                if self.stopping:
                    live.driver.suspend()
                await live.driver.run()
        except asyncio.CancelledError:
            raise
        except LeaseHeld as exc:
            log.info("run %s is driven elsewhere: %s", live.run_id, exc)
        except Exception:
            log.exception("run %s failed outside the run state machine", live.run_id)
        finally:
            # Before any await: the run is not live once its driver is done.
            if self.live.get(live.run_id) is live:
                del self.live[live.run_id]
            live.end()

    def begin_stop(self) -> None:
        """Take no more runs and ask every run being driven to stop at its next safe point (``aclose`` waits)."""
        self.stopping = True
        if self.keeper is not None:
            self.keeper.cancel()
        for live in self.live.values():
            if live.driver is not None and live.driving:
                live.driver.suspend()

    async def aclose(self) -> None:
        """Hand every run in progress on, unfinished, then close the model client (SIGTERM, or any stop).

        No run starts from now on. Each run being driven stops at its next
        safe point: a model request in flight is abandoned, a tool call in
        flight may finish within ``Settings.shutdown_grace``, and no other
        call starts; the run is checkpointed and released, its status live.
        Runs still waiting for a slot stay ``ready``, released too. The next
        process (a restart, or another sharing the store) takes them all at
        once; a call cut off past the grace period has an unknown outcome,
        which its reconcile hook or a person settles, never a blind re-run.
        """
        self.begin_stop()
        for live in list(self.live.values()):
            if not live.driving:  # cancelled below before it can have a slot: no await in between
                with contextlib.suppress(StoreError):
                    await self.io(self.store.release, live.run_id)
                if live.task is not None:
                    live.task.cancel()
        tasks = [live.task for live in self.live.values() if live.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace)
            for task in late:
                task.cancel()  # suspending: saved and released as it is, never recorded as cancelled
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.model is not None:
            await self.model.aclose()
        self.reads.shutdown(wait=True)
        self.reader.close()

    # --- reading -----------------------------------------------------------------

    async def owned_state(self, run_id: str, user: Caller) -> tuple[RunState, float | None, float | None]:
        """The run's state if ``user`` owns it; a 404 if it is missing *or* someone else's."""
        stored = await self._owned(run_id, user)
        return stored.state, stored.created_at, stored.updated_at

    async def _shown(self, run_id: str) -> StoredRun:
        """The run a request names, as stored (shown as stored; acting on it checks it), or the 404 of a missing
        id; an id no store can hold names no run, and the store is not asked (``storable``)."""
        if not storable(run_id):
            raise _no_run(run_id)
        try:
            return await self.io(self.store.load, run_id, check=False)
        except RunNotFound:
            raise _no_run(run_id) from None

    async def _owned(self, run_id: str, user: Caller) -> StoredRun:
        stored = await self._shown(run_id)
        if stored.principal.id != user.id:
            raise _no_run(run_id)
        return stored

    async def view(self, run_id: str, user: Caller) -> dict[str, Any]:
        stored = await self._owned(run_id, user)
        state, created_at, updated_at = stored.state, stored.created_at, stored.updated_at
        children = await self.io(self.store.children, run_id)
        # A run waiting with child runs (sub-agents) waits on their calls: each names the run it belongs to.
        waiting = await self.io(waiting_calls, self.store, run_id, state) if state.waiting_on else []
        return {
            "run_id": run_id,
            "parent_id": stored.parent_id,
            "children": [c.run_id for c in children],
            "status": state.status.value,
            "output": state.output,
            "reason": state.reason,
            "created_at": created_at,
            "updated_at": updated_at,
            "usage": {
                "input_tokens": state.usage.input_tokens,
                "output_tokens": state.usage.output_tokens,
                "total_tokens": state.usage.total_tokens,
            },
            "steps": _steps(state),
            "pending_approvals": [_approval(run_id, call) for call in _pending_approvals(state)]
            + [_approval(child, call) for child, call in waiting if child != run_id],
        }

    async def list_for(self, user: Caller, limit: int) -> list[dict[str, Any]]:
        found = await self.io(self.store.list_runs, principal_id=user.id, limit=limit)
        return [
            {
                "run_id": r.run_id,
                "status": r.status,
                "created_at": r.created_at,
                "updated_at": r.updated_at,
                "steps": r.steps,
            }
            for r in found
        ]

    def hold_stream(self, user_id: str) -> Callable[[], None]:
        """Count one more event stream of ``user_id``'s, or raise the 429 problem when it holds
        ``Settings.max_event_streams_per_user`` already; what gives it back (once: calling it again does nothing).

        Asked before the stream reads anything. A counter in this process, never the store: streams are
        connections to this process, and one opened or closed costs a dict update.
        """
        limit = self.settings.max_event_streams_per_user
        if self.streams[user_id] >= limit:
            raise Problem(
                429,
                f"you have {limit} event streams open, as many as you may; close one before opening another",
                headers={"Retry-After": str(DEFAULT_RUNS_RETRY_AFTER)},
            )
        self.streams[user_id] += 1
        held = True

        def give_back() -> None:
            nonlocal held
            if held:
                held = False
                self.streams[user_id] -= 1
                if self.streams[user_id] <= 0:
                    del self.streams[user_id]

        return give_back

    async def follow(self, run_id: str, user: Caller, after: int = 0) -> EventStream:
        """The run's events as SSE text: the stored ones, then live ones until it finishes or pauses.

        ``after``: only the events numbered above it (a client resuming with ``Last-Event-ID``). A run in
        flight that another process drives is followed by polling the store. The stream holds one of ``user``'s
        event streams (``hold_stream``: the 429 problem past the limit, before anything is read) until it ends or
        is closed: serve it as an ``EventStreamResponse``, which closes it however the response ends.
        """
        give_back = self.hold_stream(user.id)
        live: LiveRun | None = None
        queue: asyncio.Queue[StreamEvent | None] | None = None

        def release() -> None:
            give_back()
            if live is not None and queue is not None:
                live.followers.discard(queue)

        try:
            state, _, _ = await self.owned_state(run_id, user)
            live = self.live.get(run_id)
            if live is not None:
                queue = asyncio.Queue()
                live.followers.add(queue)
            # Subscribed before reading the store: an event stored meanwhile arrives twice and is skipped by its seq.
            found = await self.io(self.store.events, run_id, after=after)
        except BaseException:
            release()
            raise
        stored = [StreamEvent(e.kind, e.seq, e.step, e.data) for e in found]
        if live is None and state.status.value in INTERRUPTED and not any(e.kind in ENDS_STREAM for e in stored[-1:]):
            return EventStream(self._poll(run_id, stored, after), release)
        return EventStream(self._stream(run_id, stored, queue, after), release)

    async def _poll(self, run_id: str, stored: list[StreamEvent], after: int = 0) -> AsyncGenerator[str]:
        """The stored events, then those stored later (by whichever process drives the run) until it ends or pauses."""
        last = after
        for event in stored:
            last = event.seq or last
            yield event.sse(run_id)
        quiet = 0.0
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                found = await self.io(self.store.events, run_id, after=last)
            except StoreError as exc:
                log.warning("cannot read the events of run %s: %s", run_id, exc)
                return
            for e in found:
                last = e.seq
                yield StreamEvent(e.kind, e.seq, e.step, e.data).sse(run_id)
                if e.kind in ENDS_STREAM:
                    return
            quiet = 0.0 if found else quiet + POLL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"

    async def _stream(
        self,
        run_id: str,
        stored: list[StreamEvent],
        queue: asyncio.Queue[StreamEvent | None] | None,
        after: int = 0,
    ) -> AsyncGenerator[str]:
        """The stored events, then those ``queue`` brings (the run is driven here) until it ends or pauses; the
        queue leaves the run's followers with the stream (``EventStream``)."""
        last = after
        for event in stored:
            last = event.seq or last
            yield event.sse(run_id)
        if queue is None:
            return
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if item is None:
                return
            if item.seq is not None and item.seq <= last:
                continue
            yield item.sse(run_id)
            if item.kind in ENDS_STREAM:
                return

    # --- approvals ---------------------------------------------------------------

    async def pending_approvals(self, limit: int) -> list[dict[str, Any]]:
        """The calls waiting for a decision, the longest waiting first, at most ``limit``."""
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self.reads, self._read_approvals, limit)
        return [a for a in found if a["run_id"] not in self.live]  # a live run is being resumed: decided

    def _read_approvals(self, limit: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        waiting = {Status.AWAITING_APPROVAL.value}
        for summary in self.listed(self.reader, limit=limit, statuses=waiting, oldest_update_first=True):
            for call in summary.undecided():
                found.append({**_approval(summary.run_id, call), "owner": summary.principal,
                              "requested_at": summary.updated_at})  # fmt: skip
            if len(found) >= limit:
                break
        return found[:limit]

    async def decide(
        self,
        run_id: str,
        call_id: str,
        *,
        approved: bool,
        reason: str | None,
        fingerprint: str | None,
        by: Caller,
    ) -> dict[str, Any]:
        """Record a decision, then resume the run once no call waits for one."""
        if not storable(run_id):
            raise _no_run(run_id)
        try:
            # A child run's call (decided through its own id) goes on with the run at the top of its tree, which
            # carries the child on: a child never goes on alone. One request at a time acts on that tree here.
            top = await self.io(top_run, self.store, run_id)
        except RunNotFound:
            raise _no_run(run_id) from None
        async with self.one_at_a_time(top):
            if run_id in self.live or top in self.live:
                raise Problem(409, f"run {run_id} is running; decisions are taken while it waits for approval")
            return await self._decide(
                run_id, top, call_id, approved=approved, reason=reason, fingerprint=fingerprint, by=by
            )

    async def _decide(
        self,
        run_id: str,
        top: str,
        call_id: str,
        *,
        approved: bool,
        reason: str | None,
        fingerprint: str | None,
        by: Caller,
    ) -> dict[str, Any]:
        try:
            stored = await self.io(self.store.load, run_id)
        except RunNotFound:
            raise _no_run(run_id) from None
        except TamperedRun as exc:
            log.warning("%s", exc)
            raise Problem(409, f"run {run_id} fails its audit check and is not acted on; the error is logged") from None
        if not any(c.id == call_id for m in stored.state.messages for c in m.tool_calls) and not (
            stored.state.waiting_on
            and any(p.call_id == call_id for _, p in await self.io(waiting_calls, self.store, run_id, stored.state))
        ):
            raise Problem(404, f"run {run_id} has no call {call_id}")
        try:
            call = await self.io(
                decide,
                self.store,
                run_id,
                call_id,
                approved=approved,
                reason=reason,
                by=by.username,
                fingerprint=fingerprint,
            )
        except ApprovalMismatch as exc:
            raise Problem(409, str(exc)) from None
        except LeaseHeld:
            raise Problem(409, f"run {run_id} is being driven elsewhere; try again later") from None
        state = (await self.io(self.store.load, top)).state
        resumed = state.status is not Status.AWAITING_APPROVAL
        if state.waiting_on:  # it waits with child runs: it goes on (and carries them on) once none waits on a person
            resumed = not await self.io(waiting_calls, self.store, top, state)
        if resumed:
            try:
                await self.io(self.store.acquire, top)  # before another process's scan can: this one drives it
            except LeaseHeld:
                pass  # another process took it first, and drives it
            else:
                self.resume(top, stored.principal)
        return {
            "run_id": run_id,
            "call_id": call_id,
            "tool": call.tool,
            "approved": approved,
            "status": "running" if resumed else state.status.value,
        }


def _no_run(run_id: str) -> Problem:
    return Problem(404, f"no run {run_id}")


def _pending_approvals(state: RunState) -> list[PendingCall]:
    if state.status is not Status.AWAITING_APPROVAL:
        return []
    return state.undecided()


def _approval(run_id: str, call: PendingCall) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "call_id": call.call_id,
        "tool": call.tool,
        "arguments": redact(call.arguments),  # as the inbox shows them: the fingerprint binds the exact ones
        "fingerprint": call.fingerprint,
        "reason": call.approval_reason,  # e.g. "the run read untrusted text from search_kb"
    }


def _steps(state: RunState) -> list[dict[str, Any]]:
    """One entry per model reply that the transcript holds, with its calls and their outcomes."""
    replies = {m.tool_call_id: m.content or "" for m in state.messages if m.role == "tool"}
    steps: list[dict[str, Any]] = []
    for message in (m for m in state.messages if m.role == "assistant"):
        calls = []
        for c in message.tool_calls:
            result = replies.get(c.id)
            calls.append(
                {
                    "id": c.id,
                    "tool": c.name,
                    "arguments": redact_arguments(c.arguments),
                    "executed": c.id in state.executed,
                    "outcome": None if result is None else outcome_code(result),
                    "result": result,
                }
            )
        steps.append({"step": len(steps) + 1, "content": message.content, "calls": calls})
    return steps


def stop_runs_on_sigterm(runs: RunService, loop: asyncio.AbstractEventLoop) -> None:
    """On SIGTERM, hand the runs on at once, then let the server's own handler stop it as usual.

    The server closes its connections before the application's shutdown; a
    client following a run would hold that up for as long as the run goes
    on. Suspended now, each run stops at its next safe point and its
    followers' streams end.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        return  # no server handler to chain to (not under uvicorn): the shutdown hands the runs on

    def on_sigterm(number: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(runs.begin_stop)
        previous(number, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
