"""Pure-ASGI middleware: API key, body-size limit, per-worker concurrency bound, metrics.

Plain ASGI (not BaseHTTPMiddleware) so streaming responses pass through untouched and the
per-request overhead stays a few function calls.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Iterable
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from render_service.errors import PayloadTooLargeError, SaturatedError
from render_service.http.errors import error_body, log_client_error
from render_service.http.metrics import METRICS, VLLM_EXCLUDED_HANDLERS, VLLM_HTTP_METRICS

__all__ = ["ServiceMiddleware"]

request_log = logging.getLogger("render_service.requests")


# Probes and scrapes stay open when --api-key is set (Kubernetes and Prometheus can't send it).
# An app with more probes (the gateway's /ready) passes its own `open_paths`.
OPEN_PATHS = frozenset({"/health", "/metrics", "/ping"})


async def _send_json(send: Send, status: int, body: Any, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    payload = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class ServiceMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | Iterable[str] | None,
        max_body_bytes: int,
        max_concurrent: int,
        known_paths: frozenset[str],
        echo_request_id: bool = False,
        open_paths: frozenset[str] = OPEN_PATHS,
        log_requests: bool = False,
        max_log_len: int | None = None,
    ) -> None:
        self.app = app
        self.open_paths = open_paths
        # vLLM's http_* metrics skip its probes (and ours: /ready); unknown paths are "none".
        self.vllm_excluded = VLLM_EXCLUDED_HANDLERS + tuple(open_paths)
        keys = (api_key,) if isinstance(api_key, str) else tuple(api_key or ())
        # Accepted Authorization values, one per key (vLLM's --api-key takes several); None: open.
        self.api_keys = tuple(b"Bearer " + key.encode() for key in keys if key) or None
        self.max_body_bytes = max_body_bytes
        self.max_concurrent = max_concurrent
        self.known_paths = known_paths
        self.echo_request_id = echo_request_id
        self.in_flight = 0
        self.log_requests = log_requests
        self.max_log_len = max_log_len

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        endpoint = path if path in self.known_paths else "other"
        started = time.perf_counter()
        status_box = [500]
        response_bytes = [0]

        async def send_recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
                response_bytes[0] = _header_int(message.get("headers", ()), b"content-length") or 0
                if self.echo_request_id:
                    message = _with_request_id(scope, message)
            await send(message)

        if self.log_requests and path not in self.open_paths:
            receive = self._logging_receive(scope, receive)
        try:
            await self._dispatch(scope, receive, send_recording, path)
        finally:
            METRICS.requests_by(endpoint, str(status_box[0])).inc()
            elapsed = time.perf_counter() - started
            METRICS.latency_by(endpoint).observe(elapsed)
            if not path.startswith(self.vllm_excluded):
                handler = path if path in self.known_paths else "none"
                VLLM_HTTP_METRICS.observe(scope["method"], status_box[0], handler,
                                          _content_length(scope) or 0, response_bytes[0], elapsed)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        guarded = path not in self.open_paths and scope["method"] != "OPTIONS"
        if self.api_keys is not None and guarded:
            if not self._authorized(scope):
                METRICS.rejected.labels("unauthorized").inc()
                log_client_error(scope, 401, "missing or wrong API key")
                await _send_json(send, 401, {"error": "Unauthorized"})
                return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            METRICS.rejected.labels("body_too_large").inc()
            log_client_error(scope, 413, f"Content-Length {declared} exceeds --max-body-bytes")
            await _send_json(send, 413, _too_large_body(self.max_body_bytes))
            return
        if path in self.open_paths:  # probes neither take a slot nor get refused when saturated
            await self.app(scope, self._bounded_receive(receive), send)
            return
        if self.in_flight >= self.max_concurrent:
            METRICS.rejected.labels("saturated").inc()
            error = SaturatedError(
                f"Server is saturated ({self.max_concurrent} requests in flight); retry later."
            )
            headers = [(name.encode(), value.encode()) for name, value in error.headers.items()]
            await _send_json(send, error.status, error.to_body(), headers)
            return
        self.in_flight += 1
        try:
            await self.app(scope, self._bounded_receive(receive), send)
        finally:
            self.in_flight -= 1

    def _authorized(self, scope: Scope) -> bool:
        assert self.api_keys is not None
        for name, value in scope["headers"]:
            if name == b"authorization":
                # Every key is compared (no early exit), so timing does not tell which matched.
                matches = [hmac.compare_digest(value, expected) for expected in self.api_keys]
                return any(matches)
        return False

    def _logging_receive(self, scope: Scope, receive: Receive) -> Receive:
        """--enable-log-requests, as vLLM's RequestLogger: the request at INFO, its JSON body
        (cut at --max-log-len) at DEBUG once it is read; nothing is buffered below DEBUG."""
        request_id = _header(scope, b"x-request-id") or "-"
        request_log.info("Received request %s: %s %s", request_id, scope["method"], scope["path"])
        if not request_log.isEnabledFor(logging.DEBUG):
            return receive
        parts: list[bytes] = []
        limit = self.max_log_len

        async def logging_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    body = b"".join(parts).decode("utf-8", "replace")
                    request_log.debug("Request %s JSON body: %s", request_id, body[:limit] if limit else body)
            return message

        return logging_receive

    def _bounded_receive(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    METRICS.rejected.labels("body_too_large").inc()
                    raise PayloadTooLargeError(_too_large_body(limit)["error"]["message"])
            return message

        return bounded


def _too_large_body(limit: int) -> dict[str, Any]:
    return error_body(
        f"Request body exceeds the limit of {limit} bytes (--max-body-bytes).",
        "PayloadTooLargeError",
        413,
    )


def _content_length(scope: Scope) -> int | None:
    return _header_int(scope["headers"], b"content-length")


def _header_int(headers: Iterable[tuple[bytes, bytes]], wanted: bytes) -> int | None:
    for name, value in headers:
        if name == wanted:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return str(value.decode("latin-1"))
    return None


def _with_request_id(scope: Scope, message: Message) -> Message:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            headers = [*message.get("headers", []), (b"x-request-id", value)]
            return {**message, "headers": headers}
    return message
