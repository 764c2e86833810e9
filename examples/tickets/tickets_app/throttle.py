"""Sign-in throttling: wrong passwords are counted per account and per client, and cost time.

Without it a client could try passwords as fast as argon2 hashes them, and
a flood of sign-ins kept the threads busy that run the tools. So:

- failures are counted per account name and per client address; at the
  limit the key is locked out, for ``lockout`` seconds doubled with each
  further failure (at most ``max_lockout``). While locked, a sign-in is
  answered 429 with ``Retry-After`` and its password is not even hashed;
- a success clears its account's count (not its client's: one good
  password must not buy a client more guesses at other accounts);
- a client may have ``client_in_flight`` sign-ins being checked at once,
  and the service ``max_pending``; more are answered at once, 429 (that
  client) or 503 (everyone: the hashing is saturated);
- the password hash runs on an executor of its own (``SignInLimits.workers``
  threads), never on the threads that run the tools, and at a lower CPU
  priority (Linux nice 10, those threads only): when the CPU is short,
  runs in progress go first and sign-ins wait.

The counts live in this process's memory, bounded in size: a restart
forgets them, and several processes each count on their own.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tickets_app.settings import SignInLimits

MAX_TRACKED = 100_000  # accounts and clients remembered; the oldest are forgotten first
HASHING_NICENESS = 10


def hashing_executor(workers: int) -> ThreadPoolExecutor:
    """The threads that check passwords: their own, at a lower CPU priority where the OS allows it."""
    return ThreadPoolExecutor(workers, thread_name_prefix="tether-sign-in", initializer=_lower_priority)


def _lower_priority() -> None:
    # On Linux a thread id names one thread for setpriority; elsewhere this would renice the whole process.
    if not hasattr(os, "setpriority") or not os.path.isdir(f"/proc/self/task/{threading.get_native_id()}"):
        return
    with contextlib.suppress(OSError):  # a priority we may not set: hashing still runs on its own threads
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASHING_NICENESS)


@dataclass(slots=True)
class _Failures:
    count: int
    last: float


class Throttled(Exception):
    """A sign-in refused before its password is checked; ``retry_after`` in whole seconds."""

    def __init__(self, retry_after: float, detail: str, status: int = 429) -> None:
        super().__init__(detail)
        self.retry_after = max(1, math.ceil(retry_after))
        self.detail = detail
        self.status = status


class SignInThrottle:
    """Decides whether a sign-in may be checked, and learns from its result. Event loop only."""

    def __init__(self, limits: SignInLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.accounts: OrderedDict[str, _Failures] = OrderedDict()
        self.clients: OrderedDict[str, _Failures] = OrderedDict()
        self.in_flight: Counter[str] = Counter()

    def begin(self, account: str, client: str) -> None:
        """Note a sign-in about to be checked, or raise ``Throttled``. Pair with ``end``."""
        now = self.clock()
        limits = self.limits
        for failures, key, limit in ((self.clients, client, limits.client_failures),
                                     (self.accounts, _account_key(account), limits.account_failures)):  # fmt: skip
            wait = self._locked_for(failures, key, limit, now)
            if wait > 0:
                raise Throttled(wait, "too many failed sign-ins; try again later")
        if self.in_flight[client] >= limits.client_in_flight:
            raise Throttled(1, "too many sign-ins at once from this client; try again shortly")
        if self.in_flight.total() >= limits.max_pending:
            raise Throttled(1, "too many sign-ins at once; try again shortly", status=503)
        self.in_flight[client] += 1

    def end(self, account: str, client: str, *, succeeded: bool) -> None:
        self.in_flight[client] -= 1
        if self.in_flight[client] <= 0:
            del self.in_flight[client]
        now = self.clock()
        if succeeded:
            self.accounts.pop(_account_key(account), None)
            return
        self._fail(self.accounts, _account_key(account), now)
        self._fail(self.clients, client, now)

    def _locked_for(self, failures: OrderedDict[str, _Failures], key: str, limit: int, now: float) -> float:
        """Seconds ``key`` stays locked out; 0 when it is not."""
        entry = failures.get(key)
        if entry is None:
            return 0.0
        if now - entry.last > self.limits.window:
            del failures[key]
            return 0.0
        if entry.count < limit:
            return 0.0
        lockout = min(self.limits.max_lockout, self.limits.lockout * 2.0 ** min(entry.count - limit, 32))
        return entry.last + lockout - now

    def _fail(self, failures: OrderedDict[str, _Failures], key: str, now: float) -> None:
        entry = failures.pop(key, None)
        if entry is None or now - entry.last > self.limits.window:
            entry = _Failures(0, now)
        entry.count += 1
        entry.last = now
        failures[key] = entry  # the most recent last: the oldest are first to go
        while len(failures) > MAX_TRACKED:
            failures.popitem(last=False)


def _account_key(username: str) -> str:
    return username.strip().casefold()
