"""The I/O of a Temporal run: the model, the tools and their reconcile hooks, as activities.

Activities run on workers, which hold the model credentials and the tools.
``call_model`` also judges the reply's calls against the tools as they are
on this worker (strict decoding, tool offered to the principal, strict
schema, approval rule) and returns those verdicts with the reply: the
workflow only replays what was recorded.

A tool receives ``idempotency_key = run_id:call_id`` as with the local
driver; the run id is the workflow id, so a retried read-only call carries
the same key as its first attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from temporalio import activity

from tether.core.budget import estimate_usage
from tether.core.errors import ModelError
from tether.core.machine import PendingCall
from tether.core.messages import Message, ToolCall, Usage
from tether.models.base import Model, ModelRequest
from tether.temporal.workflow import CALL_MODEL, RECONCILE, RUN_TOOL, reply_to_dict, verdict_to_dict
from tether.tools.context import Principal, ToolContext
from tether.tools.tool import Executed, NotExecuted, Tool
from tether.tools.toolbox import Toolbox, result_envelope

T = TypeVar("T")


def principal_to_dict(principal: Principal) -> dict[str, Any]:
    return {"id": principal.id, "scopes": sorted(principal.scopes), "roles": sorted(principal.roles)}


def principal_from_dict(data: dict[str, Any]) -> Principal:
    return Principal(data["id"], frozenset(data["scopes"]), frozenset(data.get("roles", ())))


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work``, heartbeating meanwhile: if this worker dies, the missed heartbeat lets another retry soon."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return await work
    task = asyncio.ensure_future(work)
    every = max(0.05, timeout.total_seconds() / 3)
    try:
        while not task.done():
            activity.heartbeat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), every)
    finally:
        if not task.done():
            task.cancel()
    return task.result()


class Activities:
    """The activities a worker offers for one model and one set of tools."""

    def __init__(self, model: Model, tools: Iterable[Tool], *, max_tokens: int | None = None) -> None:
        self.model = model
        self.tools = list(tools)
        self.max_tokens = max_tokens
        Toolbox(self.tools)  # two tools of one name are refused now, not in the first run
        self._toolboxes: dict[tuple[str, tuple[str, ...]], Toolbox] = {}

    def toolbox(self, principal: dict[str, Any]) -> Toolbox:
        key = (principal["id"], tuple(principal["scopes"]))
        found = self._toolboxes.get(key)
        if found is None:
            found = self._toolboxes[key] = Toolbox(self.tools, principal_from_dict(principal))
        return found

    def all(self) -> Sequence[Callable[..., Any]]:
        return [self.call_model, self.run_tool, self.reconcile]

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, request: dict[str, Any]) -> dict[str, Any]:
        """One model request, and the verdict on each call of the reply."""
        toolbox = self.toolbox(request["principal"])
        messages = [Message.from_dict(m) for m in request["messages"]]
        timeout = None
        if request["deadline_at"] is not None:
            info = activity.info()
            timeout = max(0.0, request["deadline_at"] - info.current_attempt_scheduled_time.timestamp())
        model_request = ModelRequest(messages, toolbox.specs, max_tokens=self.max_tokens, timeout=timeout)
        try:
            reply = await _heartbeating(self.model.complete(model_request))
        except ModelError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        estimated = reply.usage == Usage() and request["counts_tokens"]
        if estimated:
            reply = replace(reply, usage=estimate_usage(messages, toolbox.specs, reply))
        verdicts: list[dict[str, Any] | None] = []
        for wire in reply.tool_calls:
            if not (isinstance(wire.name, str) and isinstance(wire.arguments, str)):
                verdicts.append(None)  # the machine refuses the reply before judging any call
                continue
            call = ToolCall(wire.id if isinstance(wire.id, str) else "", wire.name, wire.arguments)
            found = toolbox.offered.get(wire.name)
            timeout_s = found.timeout if found is not None else None
            verdicts.append(verdict_to_dict(toolbox.check(call), wire.name, wire.arguments, timeout_s))
        return {"reply": reply_to_dict(reply), "usage_estimated": estimated, "verdicts": verdicts}

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run one accepted call; a side-effecting one heartbeats while it runs."""
        toolbox = self.toolbox(request["principal"])
        call = PendingCall.from_dict(request["call"])
        work = asyncio.ensure_future(toolbox.execute(call, request["run_id"], request["deadline_at"]))
        every = max(0.05, float(request.get("heartbeat_seconds") or 10.0) / 3)
        try:
            while not work.done():
                activity.heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(work), every)
        finally:
            if not work.done():
                work.cancel()
        outcome = work.result()
        return {"content": outcome.content, "untrusted": outcome.untrusted}

    @activity.defn(name=RECONCILE)
    async def reconcile(self, request: dict[str, Any]) -> dict[str, Any]:
        """Ask the tool's ``reconcile`` hook what became of a call; ``known`` is False when it cannot tell."""
        toolbox = self.toolbox(request["principal"])
        call = PendingCall.from_dict(request["call"])
        found = toolbox.offered.get(call.tool)
        if found is None or found.reconcile is None or call.arguments is None:
            return {"known": False}
        context = ToolContext(request["run_id"], call.call_id, toolbox.principal, None)
        try:
            verdict = found.reconcile(context, call.arguments)
            if asyncio.iscoroutine(verdict):
                verdict = await verdict
        except Exception:
            return {"known": False}  # a failing hook knows nothing: leave the call to a person
        if isinstance(verdict, Executed):
            return {"known": True, "executed": True, "result": result_envelope(verdict.result, found.max_result_chars)}
        if isinstance(verdict, NotExecuted):
            return {"known": True, "executed": False}
        return {"known": False}
