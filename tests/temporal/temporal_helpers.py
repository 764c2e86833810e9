"""What the Temporal tests share: a scripted shop model and `tether worker` as a child process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tether.drivers.temporal.client import status
from tether.store import SQLiteStore
from tether.testing.fake_server import ReplySpec, text, tool_calls

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"


def shop(request: dict[str, Any]) -> ReplySpec:
    """Price, then order, then answer, whatever run asks."""
    last = request["messages"][-1]
    if last["role"] == "user":
        return tool_calls([("c1", "price", '{"item": "tea"}')])
    if last.get("tool_call_id") == "c1":
        return tool_calls([("c2", "place_order", '{"item": "tea", "quantity": 2}')])
    return text("Ordered 2 tea for 6.")


def child_env(orders: Path, **extra: str) -> dict[str, str]:
    """The environment of a test's child processes: the shop's orders file, and a run store beside it."""
    store = {"TETHER_DB": str(orders.parent / "runs.db")}
    return dict(os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{HERE}", SHOP_ORDERS=str(orders), **store | extra)


def transcript(orders: Path, run_id: str) -> list[dict[str, Any]]:
    """A run's messages as the workers of ``child_env(orders)`` stored them."""
    store = SQLiteStore(orders.parent / "runs.db")
    try:
        return [m.to_dict() for m in store.messages(run_id)]
    finally:
        store.close()


def spawn_worker(address: str, queue: str, base_url: str, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    """`tether worker` with the shop's tools (and ``extra`` options), returned once it polls."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--temporal", address, "--task-queue", queue,
         "--tools", "shop_tools:TOOLS", "--base-url", base_url, "--model", "fake", "--api-key", "k", *extra],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stderr is not None
    line = process.stderr.readline()
    if "worker polling" not in line:
        process.kill()
        raise AssertionError(f"the worker did not start: {line}{process.stderr.read()}")
    return process


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


async def until(client: Client, run_id: str, wanted: str, seconds: float = 30) -> None:
    """Wait until the run's status (the workflow's status query) is ``wanted``."""
    deadline = time.monotonic() + seconds
    while (await status(client, run_id))["status"] != wanted:
        assert time.monotonic() < deadline, f"run {run_id} never reached {wanted}"
        await asyncio.sleep(0.05)
