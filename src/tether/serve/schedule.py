"""Who drives a run next: slots for runs, shared fairly between users.

At most ``total`` runs are driven at once, and at most ``per_user`` of one
user's. A run that cannot have a slot waits in its user's line; when a slot
frees, the users with a waiting run take turns (round-robin), each user's
runs in the order they came. So one user's hundred slow runs delay another
user's run by at most one run's wait for a slot, not by the hundred.

``admits`` caps what a user may have waiting: the service answers 429 past
it instead of growing a line without end. Runs the service must drive
anyway (resumed after an approval, or after a restart) are not asked.

Everything here runs on the event loop's thread; there is no lock. The
slots and lines are one process's: several processes sharing a PostgreSQL
run store each apply these limits to the runs they drive, so with N of them
a user may have up to N times as many (docs/guides/postgres.md). A run a
process takes over from a dead one waits in the taker's line like a resumed
run, never refused.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairSlots:
    """``async with slots.slot(user_id): ...`` drives one run."""

    def __init__(self, total: int, per_user: int, queued_per_user: int) -> None:
        self.total = total
        self.per_user = per_user
        self.queued_per_user = queued_per_user
        self.running: Counter[str] = Counter()
        # Users with runs waiting, in the order of their turn: a user served goes to the back.
        self.waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @property
    def in_use(self) -> int:
        return self.running.total()

    def admits(self, user: str) -> bool:
        """Whether ``user`` may start one more run now (driven at once, or waiting in line)."""
        held = self.running[user] + len(self.waiting.get(user, ()))
        return held < self.per_user + self.queued_per_user

    @asynccontextmanager
    async def slot(self, user: str) -> AsyncIterator[None]:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(user, deque()).append(turn)
        self._hand_out()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(user)  # the slot came as the wait was cancelled
            else:
                self._forget(user, turn)
            raise
        try:
            yield
        finally:
            self._release(user)

    def _release(self, user: str) -> None:
        self.running[user] -= 1
        if self.running[user] <= 0:
            del self.running[user]
        self._hand_out()

    def _forget(self, user: str, turn: asyncio.Future[None]) -> None:
        line = self.waiting.get(user)
        if line is not None and turn in line:
            line.remove(turn)
            if not line:
                del self.waiting[user]

    def _hand_out(self) -> None:
        """Give free slots to waiting runs, one per user in turn, skipping users at their own limit."""
        while self.in_use < self.total:
            user = next((u for u in self.waiting if self.running[u] < self.per_user), None)
            if user is None:
                return
            line = self.waiting.pop(user)
            turn = line.popleft()
            if line:
                self.waiting[user] = line  # to the back of the turn order
            self.running[user] += 1
            turn.set_result(None)
