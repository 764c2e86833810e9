"""A one-line progress bar for ``tether eval``: cases done, accuracy so far, rate, ETA.

It draws only on a terminal (the stream is a TTY) and never when ``CI`` is
set, so logs and pipes get nothing but the final summary. Redraws are
limited to a few per second; the line is cleared when the eval ends.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from tether.eval.harness import ERROR, PASSED, CaseResult

BAR_WIDTH = 24
REDRAW_EVERY = 0.1  # seconds


def wanted(stream: TextIO) -> bool:
    """Whether a bar belongs on ``stream``: a terminal, outside CI."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Call ``start`` once, ``update`` per scored case, ``finish`` at the end."""

    def __init__(self, stream: TextIO, *, enabled: bool | None = None) -> None:
        self.stream = stream
        self.enabled = wanted(stream) if enabled is None else enabled
        self.total = 0
        self.done = 0
        self.passed = 0
        self.scored = 0
        self._started = 0.0
        self._drawn = 0.0

    def start(self, to_run: int, already: int) -> None:
        self.total = to_run
        self._started = time.monotonic()
        if already and self.enabled:
            self.stream.write(f"{already} case(s) already scored; running {to_run}\n")
        self._draw(force=True)

    def update(self, result: CaseResult) -> None:
        self.done += 1
        if result.outcome != ERROR:
            self.scored += 1
            self.passed += result.outcome == PASSED
        self._draw(force=self.done == self.total)

    def line(self) -> str:
        """The bar as text: ``[######------]  42/200  accuracy 95.2%  12.3 cases/s  ETA 0:13``."""
        total = max(self.total, 1)
        filled = BAR_WIDTH * self.done // total
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self.done / elapsed
        accuracy = f"{100 * self.passed / self.scored:5.1f}%" if self.scored else "    -"
        if self.done and rate > 0:
            left = int((self.total - self.done) / rate + 0.5)
            eta = f"{left // 60}:{left % 60:02d}"
        else:
            eta = "-:--"
        width = len(str(self.total))
        return (
            f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {self.done:>{width}}/{self.total}"
            f"  accuracy {accuracy}  {rate:5.1f} cases/s  ETA {eta}"
        )

    def _draw(self, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn < REDRAW_EVERY:
            return
        self._drawn = now
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
