"""A set of tools offered to one principal: the machine's ``Catalog``.

``check`` is the per-call gate of DESIGN.md §3.3 (strict decoding, tool
offered, strict schema); ``invoke`` runs an accepted call and always returns
a result envelope: timeouts, tool errors and unserializable results become
error codes, never tracebacks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine, Generator, Iterable
from dataclasses import dataclass
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from tether.core import envelope
from tether.core.deferred import deferred
from tether.core.envelope import ErrorCode
from tether.core.envelope import truncate as truncate  # re-exported
from tether.core.errors import ToolDefinitionError
from tether.core.nesting import MAX_DEPTH, nested_deeper, value_nested_deeper
from tether.core.quick import quick_init
from tether.tools.context import LOCAL_PRINCIPAL, Principal, ToolContext
from tether.tools.decoding import InvalidJson, strict_loads
from tether.tools.strict import drop_nulls
from tether.tools.tool import DEFAULT_MAX_RESULT_CHARS, Retry, Tool, ToolError

if TYPE_CHECKING:
    from tether.core import machine
    from tether.core.machine import Accepted, PendingCall, Rejected
    from tether.core.messages import ToolCall
else:
    # The state machine is needed once a run starts, not to build an agent (issue 19: the cost of the import).
    machine = deferred("tether.core.machine")


def _validation_error(exc: Exception) -> bool:
    import pydantic  # imported already: the tool's argument model is a pydantic model

    return isinstance(exc, pydantic.ValidationError)


# Made once (json.dumps with options makes one per call). NaN and Infinity are no JSON: a result holding one
# is the tool's failure, not an envelope no reader can decode.
_TEXT = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_TOO_DEEP = envelope.error(ErrorCode.TOOL_FAILED, f"the tool returned a value nested more than {MAX_DEPTH} levels deep")


def result_envelope(result: Any, limit: int) -> str:
    """The ``ok`` envelope for a tool's return value, cut to ``limit``.

    A value JSON can write as it is (numbers, text, lists and dicts of them)
    is written once; anything else (a model, a date, a set) goes through
    pydantic's conversion first.
    """
    try:
        value, text = result, _TEXT(result)
    except (TypeError, ValueError, RecursionError):
        from pydantic_core import PydanticSerializationError, to_jsonable_python

        try:
            value = to_jsonable_python(result)
            text = _TEXT(value)
        except (TypeError, ValueError, PydanticSerializationError, RecursionError):
            if value_nested_deeper(result, MAX_DEPTH):  # pydantic stops at a depth of its own, far deeper
                return _TOO_DEEP
            return envelope.error(ErrorCode.TOOL_FAILED, "the tool returned a value that is not JSON")
    if nested_deeper(text, MAX_DEPTH):  # every reader of the envelope (the model's history, the store) walks it
        return _TOO_DEEP
    text = envelope.text(text)
    if len(text) <= limit:  # every call's result on the hot path: ok_within's answer, without the call
        return f'{{"ok": true, "result": {text}}}'
    return envelope.ok_within(value, limit, text)


@quick_init
@dataclass(frozen=True, slots=True)
class ToolResult:
    """What running a call gave: the envelope, and whether its text taints the run.

    ``untrusted`` holds when the tool is declared ``untrusted_output`` or
    marked this result with ``ToolContext.mark_untrusted()``.
    """

    content: str
    untrusted: bool
    retry: str | None = None  # the tool raised Retry with this message (``content`` is then a retryable tool_failed)


class Toolbox:
    """The tools a principal may use. Tools it may not use do not exist for it."""

    def __init__(self, tools: Iterable[Tool], principal: Principal = LOCAL_PRINCIPAL, *, strict: bool = False) -> None:
        self.principal = principal
        # With ``strict`` tools are offered in OpenAI's strict mode where their schema allows, for a server that
        # enforces it; else each with its own schema (a rewrite the server does not enforce is a schema nobody wrote).
        self.strict = strict
        self.all: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.all:
                raise ToolDefinitionError(f"two tools are named {t.name!r}; give one another name with @tool(name=...)")
            self.all[t.name] = t
        self.offered = {n: t for n, t in self.all.items() if principal.allows(t.scopes)}
        self.specs = [t.spec(strict) for t in self.offered.values()]
        # Whose words among the offered tools' descriptions are not the host's: the model reads them in every
        # request, so a run offering them is tainted from its start (the first such author names why).
        self.described_by = next((t.described_by for t in self.offered.values() if t.described_by), None)

    def check(self, call: ToolCall) -> Accepted | Rejected:
        """Judge ``call``: its JSON, its tool, its arguments against the schema; ``Accepted`` or ``Rejected``."""
        try:
            arguments = strict_loads(call.arguments)
        except InvalidJson as exc:
            return machine.Rejected(ErrorCode.INVALID_JSON, str(exc))
        found = self.offered.get(call.name)
        if found is None:
            names = ", ".join(self.offered) or "none"
            return machine.Rejected(
                ErrorCode.UNKNOWN_TOOL, f"no tool named {envelope.quoted(call.name)}; available: {names}"
            )
        if self.strict:
            arguments = drop_nulls(arguments, found.strict_nulls)  # strict mode's "not given"
        problems = found.validation_errors(arguments)
        if problems:
            return machine.Rejected(ErrorCode.INVALID_ARGUMENTS, "; ".join(problems))
        return machine.Accepted(
            arguments=arguments,
            read_only=found.read_only,
            needs_approval=found.needs_approval(arguments),
            untrusted_output=found.untrusted_output,
            sinks=found.sinks,
            trusted_fields=found.trusted_fields,
            principal_sinks=found.principal_sinks,
            fixed=found.fixed,
            max_result_chars=None if found.max_result_chars == DEFAULT_MAX_RESULT_CHARS else found.max_result_chars,
        )

    async def invoke(
        self,
        call: PendingCall,
        run_id: str,
        deadline_at: float | None = None,
        *,
        principal: Principal | None = None,
        deps: Any = None,
    ) -> str:
        """Run one accepted call; the envelope the model will see."""
        return (await self.execute(call, run_id, deadline_at, principal=principal, deps=deps)).content

    async def execute(
        self,
        call: PendingCall,
        run_id: str,
        deadline_at: float | None = None,
        *,
        principal: Principal | None = None,
        deps: Any = None,
    ) -> ToolResult:
        """Run one accepted call: the envelope, and whether it taints the run.

        ``principal``: who the call runs for, if the run's principal was looked up again since;
        ``deps``: the run's dependencies, for the tool's context.
        """
        found = self.offered.get(call.tool)
        if found is None or call.arguments is None:
            return ToolResult(
                envelope.error(ErrorCode.UNKNOWN_TOOL, f"no tool named {envelope.quoted(call.tool)}"), False
            )
        context: ToolContext[Any] = ToolContext(run_id, call.call_id, principal or self.principal, deadline_at, deps)
        try:
            content = await self._run(found, call.arguments, context)
        except Retry as retry:
            message = truncate(str(retry), 300)
            content = envelope.error(ErrorCode.TOOL_FAILED, message, retryable=True)
            return ToolResult(content, found.untrusted_output or context.untrusted, message)
        return ToolResult(content, found.untrusted_output or context.untrusted)

    @staticmethod
    async def _run(found: Tool, arguments: dict[str, Any], context: ToolContext) -> str:
        deadline_at = context.deadline_at
        try:
            kwargs = found.bind(arguments, context)
        except ValueError as exc:  # pydantic's ValidationError, from a typed function's argument model
            if found.args_model is None or not _validation_error(exc):
                raise
            first = exc.errors()[0]  # type: ignore[attr-defined]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            return envelope.error(ErrorCode.INVALID_ARGUMENTS, f"{where}: {first['msg']}")
        limit = found.timeout
        if deadline_at is not None:
            left = max(0.0, deadline_at - time.time())
            limit = left if limit is None else min(limit, left)
        try:
            if found.inline and not found.is_async:
                # Declared not to block: no thread hop, and no timer, which could only fire once it had returned.
                result = found.function(**kwargs)
            elif found.is_async:
                result = await _within(found.function(**kwargs), limit)
            else:  # a sync tool may block: keep it off the event loop
                async with asyncio.timeout(limit):  # no extra task, unlike wait_for
                    result = await asyncio.to_thread(found.function, **kwargs)
        except TimeoutError:
            if found.read_only:
                return envelope.error(ErrorCode.TIMEOUT, f"{found.name} did not finish within {limit}s")
            # The work may still take effect (a thread cannot be stopped): never invite a retry.
            return envelope.error(
                ErrorCode.TIMEOUT,
                f"{found.name} did not finish within {limit}s; its effect is unknown, do not repeat it",
                retryable=False,
            )
        except ToolError as exc:
            return envelope.error(ErrorCode.TOOL_FAILED, truncate(str(exc), 300))
        except Retry:
            raise  # the caller counts it (``execute``)
        except Exception as exc:
            return envelope.error(ErrorCode.TOOL_FAILED, f"{found.name} failed ({type(exc).__name__})")
        return result_envelope(result, found.max_result_chars)


async def _within(work: Coroutine[Any, Any, Any], limit: float | None) -> Any:
    """``await work`` under a timeout of ``limit`` seconds, with no timer for a coroutine that never waits.

    The coroutine runs up to its first wait first: one that returns before
    waiting (most in-process tools) gave the event loop no chance to run a
    timer, so none is made. One that waits goes on under ``asyncio.timeout_at``
    with the deadline taken before it started, as ``asyncio.timeout(limit)``
    around the whole ``await`` would have set it.
    """
    if type(work) is not CoroutineType:  # an awaitable of another kind: awaited as it always was
        async with asyncio.timeout(limit):
            return await work
    deadline = None if limit is None else asyncio.get_running_loop().time() + limit
    try:
        waiting = work.send(None)
    except StopIteration as done:
        return done.value
    async with asyncio.timeout_at(deadline):
        return await _Resumed(work, waiting)


class _Resumed:
    """Awaits the rest of a coroutine already run to its first wait (``waiting``: what it yielded there).

    Values sent and exceptions thrown in (a cancellation) reach the coroutine
    as they would through ``await``; closing it closes the coroutine.
    """

    __slots__ = ("_waiting", "_work")

    def __init__(self, work: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self._work, self._waiting = work, waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        work, waiting = self._work, self._waiting
        while True:
            try:
                sent = yield waiting
            except GeneratorExit:
                work.close()
                raise
            except BaseException as exc:
                try:
                    waiting = work.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting = work.send(sent)
                except StopIteration as done:
                    return done.value
