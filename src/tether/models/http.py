"""What every HTTP model adapter shares: one aiohttp session, retries, errors, SSE lines.

aiohttp, not httpx: measured in ``bench/http_clients.py``, httpx2 used about
2.5x the CPU per request and 4x the wall time for 500 requests in flight.

An adapter subclasses ``HTTPModel``, builds its body and parses its replies;
``post`` maps every foreign failure to a ``ModelError`` subclass, and
``retrying`` retries the retryable ones (429, 5xx including Anthropic's 529,
connection failures) with backoff honouring ``Retry-After``; 401/403 are not
retried.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import aiohttp

from tether.core.errors import (
    AuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    RateLimited,
    ServerError,
)
from tether.models.stream import error_message

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2
MAX_RETRY_AFTER = 60.0

T = TypeVar("T")


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: a number or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    from datetime import UTC, datetime  # a header date is the one clock read here

    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def http_error(status: int, text: str, retry_after: float | None, key_variable: str) -> ModelHTTPError:
    """The most specific error for a non-2xx answer; ``key_variable`` is named on 401/403."""
    try:
        message = error_message(json.loads(text).get("error", text))
    except (ValueError, AttributeError):
        message = text[:300] or "no body"
    if status in (401, 403):
        return AuthenticationError(status, f"{message} (check {key_variable})")
    if status == 429:
        return RateLimited(status, message, retry_after)
    if status >= 500:  # 529 is Anthropic's "overloaded"
        return ServerError(status, message, retry_after)
    return ModelHTTPError(status, message)


async def sse_events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str | None, str]]:
    """``(event name, data)`` for each server-sent event; comments and blank keep-alives skipped.

    A last event without its closing blank line is still yielded.
    """
    name: str | None = None
    data: list[str] = []
    async for raw_line in content:
        line = raw_line.decode("utf-8", errors="replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif not line and data:
            yield name, "\n".join(data)
            name, data = None, []
    if data:
        yield name, "\n".join(data)


class HTTPModel:
    """One lazily opened ``aiohttp.ClientSession`` per model, closed by ``aclose``."""

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
    ) -> None:
        self.max_retries = max_retries
        self._headers = dict(headers)
        self._timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=read_timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=self._timeout, connector=connector, raise_for_status=False
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def within(self, work: Awaitable[T], timeout: float | None) -> T:
        """``work``, or ``ModelTimeout`` once the run's deadline passes."""
        try:
            return await asyncio.wait_for(work, timeout)
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
        try:
            async with self._client().post(url, json=body) as response:
                if response.status >= 400:
                    text = await response.text(errors="replace")
                    wait = retry_after(response.headers.get("Retry-After"))
                    raise http_error(response.status, text, wait, self.key_variable)
                if body.get("stream") and response.content_type == "text/event-stream":
                    return await read_stream(response)
                raw = await response.read()
        except aiohttp.ClientConnectorError as exc:
            raise ModelConnectionError(f"cannot connect to {self.base_url}: {exc.strerror or exc}") from None
        except (aiohttp.ServerTimeoutError, aiohttp.SocketTimeoutError) as exc:
            raise ModelTimeout(f"{self.base_url} timed out: {exc}") from None
        except aiohttp.ClientError as exc:
            raise ModelConnectionError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
        return read_body(raw)
