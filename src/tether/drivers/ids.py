"""Ids of runs and conversations: time-ordered UUIDs (version 7, RFC 9562), as 32 hex digits.

The first 48 bits are the Unix time in milliseconds and the next 12 the
fraction of that millisecond (RFC 9562's method 3), then 62 random bits: ids
made one after another sort in the order they were made, so a store's
b-trees keyed by run id grow at one end (a run's rows, written together,
land on the pages the previous run's rows left warm) instead of at random
pages across the file. The random part keeps ids made on different machines
apart; an id is a name, not a secret (who may read a run is its principal's
business, checked on every request).
"""

from __future__ import annotations

import os
import time

__all__ = ["new_id"]


def new_id() -> str:
    """A new version-7 UUID's ``hex``: time-ordered to a quarter of a microsecond, then random."""
    now = time.time_ns()
    millis, fraction = divmod(now, 1_000_000)
    raw = bytearray(os.urandom(16))
    raw[0:6] = millis.to_bytes(6, "big")
    sub = fraction * 4096 // 1_000_000  # 12 bits of the millisecond's fraction
    raw[6] = 0x70 | sub >> 8  # the version, 7
    raw[7] = sub & 0xFF
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 9562
    return raw.hex()
