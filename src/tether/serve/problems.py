"""Every error the API returns is ``application/problem+json`` (RFC 9457).

``{"type", "title", "status", "detail"}``, with ``type`` ``about:blank`` and
``title`` the status phrase. Handlers below turn our own ``Problem``,
Starlette's HTTP errors, request validation errors and anything unexpected
into that shape. A request that fails validation is a 422 whose ``errors``
lists where and what (at most ``MAX_LISTED_ERRORS``), never the input. An
unexpected error is logged with its traceback and answered with a fixed
sentence: nothing of it reaches the client.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.tools.decoding import DuplicateKey, no_duplicates

PROBLEM_JSON = "application/problem+json"
# Errors a 422 lists (its detail names the first five and counts the rest): a body of many wrong fields
# gets a short answer, not one several times its own size.
MAX_LISTED_ERRORS = 20

log = logging.getLogger("tether.serve")


class Problem(Exception):
    """Raise in a route to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_response(
    status: int,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    body = {"type": "about:blank", "title": _title(status), "status": status, "detail": detail, **(extra or {})}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}), media_type=PROBLEM_JSON)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(exc.status, exc.detail, headers=exc.headers, extra=exc.extra)


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else _title(exc.status_code)
    return problem_response(exc.status_code, detail, headers=exc.headers)


async def _on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Only where and what: pydantic's "input" would echo the request (a password, say) back.
    found = exc.errors()
    errors = [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", "invalid"))}
        for error in found[:MAX_LISTED_ERRORS]
    ]
    detail = "; ".join(f"{'.'.join(e['loc']) or 'request'}: {e['msg']}" for e in errors[:5]) or "invalid request"
    if len(found) > 5:
        detail += f"; and {len(found) - 5} more ({len(found)} in all)"
    return problem_response(422, detail, extra={"errors": errors})


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "the server failed to handle this request; the error is logged")


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with a 413 problem.

    Starlette's own limit answers in plain text from outside the exception
    handlers; this one declines a too-long ``Content-Length`` at once and
    otherwise counts the body as the route reads it, raising an HTTP error
    that the handlers above turn into a problem document.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"the request body is larger than {self.limit} bytes"
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await problem_response(413, detail)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise StarletteHTTPException(413, detail)
            return message

        await self.app(scope, counted, send)


class _StrictRequest(Request):
    """A request whose JSON body holds no key twice in one object (``tether.tools.decoding.no_duplicates``)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = json.loads(await self.body(), object_pairs_hook=no_duplicates)
            except DuplicateKey as exc:
                raise StarletteHTTPException(422, f"body: {exc}") from None
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is refused (422) when an object holds a key twice, as a model's arguments are:
    ``{"approve": false, "approve": true}`` would be an approval (the last key wins), while a proxy, an audit log
    or a reviewer may read the first. Everything else about the body is FastAPI's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictRequest(request.scope, request.receive))

        return strict


def install(app: FastAPI, *, max_body_bytes: int) -> None:
    """The API's problem documents, its body limit, and its strict JSON bodies (for the routes added after)."""
    app.router.route_class = StrictJSONRoute
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_invalid_request)
    app.add_exception_handler(Exception, _on_unexpected)
