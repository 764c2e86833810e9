"""What every HTTP model adapter shares: one aiohttp session, retries, errors, SSE lines.

aiohttp, not httpx: measured in ``bench/http_clients.py``, httpx2 used about
2.5x the CPU per request and 4x the wall time for 500 requests in flight.

An adapter subclasses ``HTTPModel``, builds its body and parses its replies;
``post`` maps every foreign failure to a ``ModelError`` subclass, and
``retrying`` retries the retryable ones (429, 5xx including Anthropic's 529,
connection failures) with backoff honouring ``Retry-After``; 401/403 are not
retried.

aiohttp itself is imported at an adapter's first request (on a thread, so
that the event loop is not held up), not with the adapter: building an agent,
and a CLI command that sends no request, do without its ~150 ms (issue 19).

A reply is read within ``max_reply_bytes`` (counted as the bytes arrive,
streamed or not, so memory stays bounded by it): one that grows past it is a
``ModelResponseError`` naming the limit. Its JSON is decoded within
``MAX_REPLY_DEPTH`` levels of nesting (``tether.core.nesting``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from tether.core import nesting
from tether.core.deferred import deferred
from tether.core.errors import (
    AuthenticationError,
    ConfigurationError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    RateLimited,
    ReplyTooLarge,
    ServerError,
)

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2
MAX_RETRY_AFTER = 60.0
# No real reply comes near it: the largest of the recorded ones in tests is under 0.5 MB.
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024

T = TypeVar("T")

if TYPE_CHECKING:
    import aiohttp
else:
    aiohttp = deferred("aiohttp")  # imported by the first request (``HTTPModel._client``)


def checked_base_url(url: str, setting: str) -> str:
    """``url`` without a trailing slash, if it is an ``http(s)://`` URL with a host; else a ``ConfigurationError``.

    ``setting`` names where the URL came from (``--base-url``, ``OPENAI_BASE_URL``), so the error says what to
    fix before a run is recorded, not as a connection failure inside it.
    """
    from urllib.parse import urlsplit

    problem = None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number from 0 to 65535)
    except ValueError as exc:
        problem = str(exc)[:1].lower() + str(exc)[1:]
    else:
        if parts.scheme not in ("http", "https"):
            problem = "it must start with http:// or https://"
        elif not parts.hostname:
            problem = "it names no host"
        elif any(c.isspace() or not c.isprintable() for c in url):
            problem = "it contains a space or a control character"
        elif parts.query or parts.fragment:
            problem = "paths are appended to it, so it cannot have a query or a fragment"
        elif parts.username is not None or parts.password is not None:
            problem = "it carries a user name or password, which errors would show; give the key as the API key"
    if problem is not None:
        shown = re.sub(r"//[^/@]*@", "//***@", url)  # never echo a password written into the URL
        raise ConfigurationError(f"{setting} {shown!r} is not a base URL: {problem}; e.g. http://127.0.0.1:8080/v1")
    return url.rstrip("/")


OPENAI_API = "https://api.openai.com/v1"


def openai_endpoint(adapter: str, base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The checked base URL (``base_url``, ``OPENAI_BASE_URL``, else OpenAI's) and the request headers of an
    OpenAI adapter; a ``ConfigurationError`` naming ``adapter`` when OpenAI's own API is meant without a key."""
    url = checked_base_url(
        base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_API, "base_url" if base_url else "OPENAI_BASE_URL"
    )
    api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    if not api_key and url == OPENAI_API:
        raise ConfigurationError(
            f"no API key: pass {adapter}(api_key=...) or set OPENAI_API_KEY; for another server, "
            "base_url=... or OPENAI_BASE_URL"
        )
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return url, headers


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime  # a header date is rare: its module is loaded when one comes

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    from datetime import UTC, datetime  # a header date is the one clock read here

    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def http_error(status: int, text: str, retry_after: float | None, key_variable: str) -> ModelHTTPError:
    """The most specific error for a non-2xx answer; ``key_variable`` is named on 401/403."""
    from tether.models.stream import error_message  # only an error needs it (issue 19: the cost of the import)

    try:
        message = error_message(nesting.loads(text, nesting.MAX_REPLY_DEPTH).get("error", text))
    except (ValueError, AttributeError):
        message = error_message(text) if text else "no body"
    if status in (401, 403):
        return AuthenticationError(status, f"{message} (check {key_variable})")
    if status == 429:
        return RateLimited(status, message, retry_after)
    if status >= 500:  # 529 is Anthropic's "overloaded"
        return ServerError(status, message, retry_after)
    return ModelHTTPError(status, message)


class _Fields:
    """The fields of the server-sent event being read, line by line."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.data: list[str] = []

    def line(self, raw: bytes | bytearray) -> tuple[str | None, str] | None:
        """Take one line (without its newline); the event it completes, if any."""
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if line.startswith("data:"):
            self.data.append(line[5:].lstrip(" "))
        elif line.startswith("event:"):
            self.name = line[6:].strip()
        elif not line and self.data:
            return self.event()
        return None

    def event(self) -> tuple[str | None, str]:
        event = self.name, "\n".join(self.data)
        self.name, self.data = None, []
        return event


KEEPALIVE_EVENTS = frozenset({"ping"})  # events that say only "still here" (Anthropic's ``ping``)


async def sse_events(
    content: aiohttp.StreamReader, max_bytes: int, read_timeout: float | None = None
) -> AsyncIterator[tuple[str | None, str]]:
    """``(event name, data)`` for each server-sent event; comments and blank keep-alives skipped.

    A last event without its closing blank line is still yielded. Past
    ``max_bytes`` received (a line, an event or the whole stream) it raises
    ``ReplyTooLarge``: lines are split here, not by aiohttp's ``readline``,
    which refuses a line over its own buffer size with an error of its own.

    ``read_timeout`` bounds the wait for the next event that carries data: a
    comment or a ``KEEPALIVE_EVENTS`` event does not restart it (aiohttp's
    timeout restarts at any byte, and a server that sends only keep-alives
    would hold the run until ``max_bytes``, days later). Past it, ``ModelTimeout``.
    """
    loop = asyncio.get_running_loop()
    quiet_until = None if read_timeout is None else loop.time() + read_timeout
    fields = _Fields()
    line = bytearray()
    received = 0
    while True:
        try:
            async with asyncio.timeout_at(quiet_until):  # None: no bound
                chunk = await content.readany()
        except TimeoutError:
            raise ModelTimeout(
                f"the stream sent no event with data for {read_timeout:g} s (read_timeout), only keep-alives"
            ) from None
        if not chunk:
            break
        received += len(chunk)
        if received > max_bytes:
            raise ReplyTooLarge(max_bytes)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line += chunk[start:end]
            start = end + 1
            event = fields.line(line)
            line.clear()
            if event is not None:
                yield event
                if read_timeout is not None and event[0] not in KEEPALIVE_EVENTS:
                    quiet_until = loop.time() + read_timeout
        line += chunk[start:]
    if line:
        fields.line(line)  # a last line without its newline: only an empty line ends an event
    if fields.data:
        yield fields.event()


async def read_within(content: aiohttp.StreamReader, max_bytes: int) -> bytes:
    """The whole body, or ``ReplyTooLarge`` as soon as more than ``max_bytes`` have arrived."""
    body = bytearray()
    while chunk := await content.readany():  # what iter_any yields, without its iterator
        if len(body) + len(chunk) > max_bytes:
            raise ReplyTooLarge(max_bytes)
        body += chunk
    return bytes(body)


async def _close_with_loop(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Closes ``session`` when its event loop shuts down, even if nobody calls ``aclose``.

    An async generator is how: ``asyncio.run`` (and every well-behaved loop
    owner) finalizes the async generators of a loop before closing it. This
    is what keeps a plain script free of "Unclosed client session" warnings.
    """
    try:
        yield
    finally:
        await session.close()


class HTTPModel:
    """One lazily opened ``aiohttp.ClientSession`` per model and event loop, closed by ``aclose`` or with its loop."""

    name: str
    base_url: str
    key_variable: str  # the environment variable to name when the key is refused

    def __init__(
        self,
        headers: Mapping[str, str],
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        if max_reply_bytes < 1:
            raise ConfigurationError(f"max_reply_bytes must be at least 1, not {max_reply_bytes}")
        self.max_retries = max_retries
        self.max_reply_bytes = max_reply_bytes
        self._headers = dict(headers)
        self._timeouts = connect_timeout, read_timeout
        # One client per event loop: an aiohttp session belongs to the loop it was made in, and a
        # script may call asyncio.run (or run_sync) several times with the same model.
        self._sessions: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]] = {}

    async def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        # A new client: aiohttp is imported off the event loop (by the process's first request; after that it is
        # there). Requests that came meanwhile may have made one: the check again, then nothing waits until it is kept.
        await asyncio.to_thread(importlib.import_module, "aiohttp")
        entry = self._sessions.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        for gone in [other for other in self._sessions if other.is_closed()]:
            del self._sessions[gone]  # closed with its loop, by its guard
        connect_timeout, read_timeout = self._timeouts
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        session = aiohttp.ClientSession(
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout),
            connector=connector,
            raise_for_status=False,
            json_serialize=self.encode,
        )
        guard = _close_with_loop(session)
        await anext(guard)
        self._sessions[loop] = (session, guard)
        return session

    def encode(self, body: Any) -> str:
        """The JSON text of a request body (a subclass may reuse the text of parts that do not change)."""
        return json.dumps(body)

    def events(self, response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str | None, str]]:
        """The events of a streamed reply, within ``max_reply_bytes`` and ``read_timeout`` (``sse_events``)."""
        return sse_events(response.content, self.max_reply_bytes, self._timeouts[1])

    async def aclose(self) -> None:
        """Close the client of the running event loop (the others close when their loop ends)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    async def within(self, work: Awaitable[T], timeout: float | None) -> T:
        """``work``, or ``ModelTimeout`` once the run's deadline passes."""
        try:
            if timeout is None:
                return await work
            async with asyncio.timeout(timeout):  # in this task: no task of its own, unlike wait_for
                return await work
        except TimeoutError:
            raise ModelTimeout("the run's deadline passed while waiting for the model") from None

    async def retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, again after a retryable failure, at most ``max_retries`` more times."""
        tries = 0
        while True:
            try:
                return await attempt()
            except ModelError as exc:
                if not exc.retryable or tries >= self.max_retries:
                    raise
                delay = getattr(exc, "retry_after", None)
                if delay is None:
                    delay = min(8.0, 0.5 * 2**tries) * (0.5 + random.random() / 2)
                if delay > MAX_RETRY_AFTER:
                    raise
                tries += 1
                await asyncio.sleep(delay)

    async def post(
        self,
        url: str,
        body: dict[str, Any],
        read_stream: Callable[[aiohttp.ClientResponse], Awaitable[T]],
        read_body: Callable[[bytes], T],
    ) -> T:
        """POST ``body``; an SSE answer goes to ``read_stream``, any other to ``read_body``."""
        entry = self._sessions.get(asyncio.get_running_loop())
        session = entry[0] if entry is not None and not entry[0].closed else await self._client()
        try:
            async with session.post(url, json=body) as response:
                if response.status >= 400:
                    try:
                        text = (await read_within(response.content, self.max_reply_bytes)).decode(errors="replace")
                    except ReplyTooLarge:  # the status still says what happened (and whether to retry)
                        text = f"an error body larger than max_reply_bytes ({self.max_reply_bytes} bytes), not read"
                    wait = retry_after(response.headers.get("Retry-After"))
                    raise http_error(response.status, text, wait, self.key_variable)
                if body.get("stream") and response.content_type == "text/event-stream":
                    return await read_stream(response)
                raw = await read_within(response.content, self.max_reply_bytes)
        except ReplyTooLarge as exc:
            raise ReplyTooLarge(exc.max_bytes, type(self).__name__) from None  # the reader knows no adapter
        except ModelTimeout as exc:  # a stream of keep-alives (``sse_events``): named as aiohttp's timeouts are
            raise ModelTimeout(f"{self.base_url} timed out: {exc}") from None
        except aiohttp.ClientConnectorError as exc:
            raise ModelConnectionError(f"cannot connect to {self.base_url}: {exc.strerror or exc}") from None
        except (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError) as exc:
            raise ModelTimeout(f"{self.base_url} timed out: {exc}") from None
        except aiohttp.ClientError as exc:
            raise ModelConnectionError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        return read_body(raw)
