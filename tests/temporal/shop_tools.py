"""Tools for the Temporal tests: a read-only price list and an order that takes effect once per idempotency key.

``place_order`` appends one line per effect to the file named by
``SHOP_ORDERS``, so a test counts effects across worker processes. With
``SHOP_HANG_AFTER`` set it holds still that many seconds after the effect,
before returning (time for a test to kill its worker mid-call). With
``SHOP_PRICE_SECONDS`` set, ``price`` takes that long, and each of its runs
adds a line to the file named by ``SHOP_PRICE_LOG`` when it starts and when
it ends (time for a test to stop its worker mid-call, and to count runs).
With ``SHOP_ORDER_GATE`` set, ``place_order`` adds a line to the file named
by ``SHOP_ORDER_STARTED`` when it starts, then waits for the file named by
``SHOP_ORDER_GATE`` to exist before the effect (time for a test to kill its
worker before the effect, or to look at the run store while it waits); with
``SHOP_HOOK_GATE`` and ``SHOP_HOOK_STARTED``, its reconcile hook does the same.
With ``SHOP_NO_APPROVAL`` set, ``place_order`` needs no approval.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from tether.tools import ToolContext, tool
from tether.tools.tool import Executed, NotExecuted

PRICES = {"tea": 3, "coffee": 4}


def _orders(key: str) -> list[dict[str, Any]]:
    try:
        with open(os.environ["SHOP_ORDERS"]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [line for line in lines if line["key"] == key]


PRICE_TIMEOUT = 20.0  # seconds; a worker's graceful shutdown waits at least this long for a price


def _log_price(what: str) -> None:
    if log := os.environ.get("SHOP_PRICE_LOG"):
        with open(log, "a") as f:
            f.write(f"{what} {os.getpid()}\n")


@tool(read_only=True, timeout=PRICE_TIMEOUT)
async def price(item: str) -> int:
    """The price of one unit of an item.

    Args:
        item: tea or coffee.
    """
    _log_price("started")
    await asyncio.sleep(float(os.environ.get("SHOP_PRICE_SECONDS", "0")))
    _log_price("finished")
    return PRICES[item]


def _hold(what: str, key: str) -> None:
    """With ``SHOP_{what}_GATE`` set: note the start in ``SHOP_{what}_STARTED``, then wait for the gate to open."""
    if gate := os.environ.get(f"SHOP_{what}_GATE"):
        with open(os.environ[f"SHOP_{what}_STARTED"], "a") as f:
            f.write(f"{key} {os.getpid()}\n")
        while not os.path.exists(gate):
            time.sleep(0.02)


def _reconcile(context: ToolContext, arguments: dict[str, Any]) -> Executed | NotExecuted | None:
    """Look the order up by its idempotency key, as a real shop's API would allow (not with ``SHOP_NO_HOOK``)."""
    _hold("HOOK", context.idempotency_key)
    if os.environ.get("SHOP_NO_HOOK"):
        return None  # the hook cannot tell: a person must
    found = _orders(context.idempotency_key)
    return Executed({"order": context.idempotency_key}) if found else NotExecuted()


def _needs_approval(arguments: dict[str, Any]) -> bool:
    return not os.environ.get("SHOP_NO_APPROVAL")


ORDER_RESULT_CHARS = 5_000  # its own bound on a result, which a person's result for it is cut to as well


@tool(approval=_needs_approval, reconcile=_reconcile, max_result_chars=ORDER_RESULT_CHARS)
def place_order(item: str, quantity: int, context: ToolContext) -> dict[str, str]:
    """Order an item; takes effect once.

    Args:
        item: tea or coffee.
        quantity: How many units.
    """
    _hold("ORDER", context.idempotency_key)
    with open(os.environ["SHOP_ORDERS"], "a") as f:
        f.write(json.dumps({"key": context.idempotency_key, "item": item, "quantity": quantity}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("SHOP_HANG_AFTER", "0")))
    return {"order": context.idempotency_key}


TOOLS = [price, place_order]
