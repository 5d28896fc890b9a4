"""The one place where errors become HTTP responses (OpenAI / vLLM error bodies).

Mapping (vLLM 0.33, `serve/exception_handling/error_response.py`):
  RenderServiceError subclasses -> their own status, type and headers (503: Retry-After)
  request-body validation       -> 400 "Bad Request" (never FastAPI's 422)
  HTTPException                 -> its status, type = the HTTP phrase
  anything else                 -> 500 InternalServerError (logged with its stack)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from render_service.errors import RenderServiceError

__all__ = ["install_error_handlers", "handled_error_response", "error_response", "error_body", "log_client_error"]

log = logging.getLogger(__name__)

_MAX_LISTED_ERRORS = 10  # vLLM lists at most 10 validation errors
_MAX_INPUT_CHARS = 200
_MAX_LOGGED_CHARS = 2000


def error_body(message: str, error_type: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": status}}


def error_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    response = Response(orjson.dumps(body), status_code=status, media_type="application/json")
    response.headers.update(headers or {})  # after the content headers, as before
    return response


def log_client_error(scope: Mapping[str, Any], status: int, message: str) -> None:
    """A 4xx's reason at INFO with its request id (X-Request-Id, else "-"): vLLM logs why it
    refused a request; a client's mistake is no WARNING."""
    if not 400 <= status < 500 or not log.isEnabledFor(logging.INFO):
        return
    request_id = "-"
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            request_id = value.decode("latin-1")
            break
    log.info("request %s %s %s -> %d: %s", request_id, scope.get("method"), scope.get("path"), status,
             message[:_MAX_LOGGED_CHARS])


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    lines = []
    for err in errors[:_MAX_LISTED_ERRORS]:
        entry = {k: err.get(k) for k in ("type", "loc", "msg")}
        entry["input"] = str(err.get("input"))[:_MAX_INPUT_CHARS]
        lines.append("  " + str(entry)[:1000])
    count = len(errors)
    noun = "error" if count == 1 else "errors"
    loc = errors[0].get("loc", ()) if errors else ()
    param = ".".join(str(p) for p in loc if not str(p).startswith("function-")) or None
    return f"{count} validation {noun}:\n" + "\n".join(lines), param


async def _on_service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RenderServiceError)
    if exc.status >= 500:
        log.error("request failed: %s", exc.message)
    log_client_error(request.scope, exc.status, exc.message)
    return error_response(exc.status, exc.to_body(), exc.headers)


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    message, param = _validation_message(list(exc.errors()))
    log_client_error(request.scope, 400, message)
    return error_response(400, error_body(message, "Bad Request", 400, param))


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    log_client_error(request.scope, exc.status_code, str(exc.detail))
    return error_response(
        exc.status_code, error_body(str(exc.detail), _phrase(exc.status_code), exc.status_code)
    )


async def _on_unexpected(_: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, error_body("Internal server error", "InternalServerError", 500))


_HANDLERS: tuple[tuple[type[Exception], Callable[[Request, Exception], Awaitable[Response]]], ...] = (
    (RenderServiceError, _on_service_error),
    (RequestValidationError, _on_validation_error),
    (HTTPException, _on_http_exception),
    (Exception, _on_unexpected),
)


def install_error_handlers(app: FastAPI) -> None:
    for exc_type, handler in _HANDLERS:
        app.add_exception_handler(exc_type, handler)


async def handled_error_response(request: Request, exc: Exception) -> tuple[Response, bool]:
    """The response the installed handlers give `exc`, picked as Starlette picks (the first
    class of its MRO with a handler), and whether it is the catch-all 500 (which Starlette
    re-raises after sending, so the server logs it)."""
    for cls in type(exc).__mro__:
        for exc_type, handler in _HANDLERS:
            if cls is exc_type:
                return await handler(request, exc), cls is Exception
    raise AssertionError("Exception has a handler")  # every exception's MRO has Exception
