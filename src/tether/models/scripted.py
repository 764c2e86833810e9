"""A scripted model for in-process tests and examples: no network at all.

Each step takes the next entry of the script: a ``ModelReply``, an
exception to raise, or a function of the request returning a reply.

    model = ScriptedModel([reply_calls(("c1", "multiply", '{"a": 2, "b": 3}')), reply_text("6")])

``reply_text`` and ``reply_calls`` build ``ModelReply`` values for this
in-process model. They are not ``tether.testing.text`` / ``tool_calls``,
which build what ``FakeServer`` sends over HTTP; each name means one thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tether.core.errors import ModelResponseError
from tether.core.messages import ModelReply, Usage, WireToolCall
from tether.core.settings import ModelSettings
from tether.models.base import ModelRequest, settings_for

Step = ModelReply | BaseException | Callable[[ModelRequest], ModelReply]


def reply_text(content: str, finish_reason: str = "stop", usage: tuple[int, int] = (10, 5)) -> ModelReply:
    """A ``ModelReply`` with text only, for ``ScriptedModel`` (``FakeServer`` takes ``tether.testing.text``)."""
    return ModelReply(choices=1, finish_reason=finish_reason, content=content, usage=Usage(*usage))


def reply_calls(
    *specs: tuple[Any, Any, Any],
    finish_reason: str = "tool_calls",
    content: str | None = None,
    usage: tuple[int, int] = (10, 5),
) -> ModelReply:
    """A ``ModelReply`` with tool calls given as ``(id, name, arguments_text)``, for ``ScriptedModel``.

    ``FakeServer`` takes ``tether.testing.tool_calls`` instead.
    """
    return ModelReply(
        choices=1,
        finish_reason=finish_reason,
        content=content,
        tool_calls=tuple(WireToolCall(i, "function", n, a) for i, n, a in specs),
        usage=Usage(*usage),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class ScriptedModel:
    """Replies from a script, recording each request (``requests``) and the settings it was asked with.

    ``settings_asked`` holds, per request, the model settings it would have sent: its own ``settings``
    with the request's over them (None when nothing was set). ``name`` tells models apart in a
    ``FallbackModel``.
    """

    name = "scripted"

    def __init__(
        self, script: Iterable[Step], *, settings: ModelSettings | None = None, name: str | None = None
    ) -> None:
        self._script = list(script)
        self.requests: list[ModelRequest] = []
        self.settings = settings
        self.settings_asked: list[ModelSettings | None] = []
        if name is not None:
            self.name = name

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The script's next reply (or raise its next exception); records the request in ``requests``."""
        self.requests.append(request)
        self.settings_asked.append(settings_for(self.settings, request))
        if len(self.requests) > len(self._script):
            raise ModelResponseError(f"the script has only {len(self._script)} replies")
        step = self._script[len(self.requests) - 1]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(request)
        if request.on_text is not None and step.content:
            request.on_text(step.content)
        if request.on_tool_delta is not None:
            for index, call in enumerate(step.tool_calls):
                if isinstance(call.arguments, str):
                    request.on_tool_delta(index, _str_or_none(call.id), _str_or_none(call.name), call.arguments)
        return step

    async def aclose(self) -> None:
        """Nothing to close."""
        return None
