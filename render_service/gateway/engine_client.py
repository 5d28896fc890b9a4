"""EngineClient: the only way the gateway talks to a `vllm serve --tokens-only` engine.

Three calls, each on one engine:
  generate(body, timeout_s)  POST /inference/v1/generate (stream=false) -> the JSON response
  stream(body)               POST /inference/v1/generate (stream=true)  -> async iterator of the
                             parsed `data:` events, ending quietly at `[DONE]`
  abort(request_ids)         POST /inference/v1/abort_requests, best effort
plus check_health() for the health checker. Failures are raised as the typed engine errors of
`gateway.errors`; `stream()` raises them from the iteration, so a stage can tell "failed before
the first event" (retryable) from "failed mid-stream" (not).

The iterator does not apply phase deadlines itself (the decode stage wraps each `anext` in
the right one: first token or inter-token); it opens the HTTP request on the first `anext`, so
the time-to-first-token deadline covers connect and response headers too.

`HttpEngineClient` shares one pooled `httpx.AsyncClient` (`EngineHttp`, with an explicit
lifecycle) across every engine; with `api_key` it sends `Authorization: Bearer <key>` on every
call (vLLM's --api-key guards /inference/..., not /health). `gateway.testing.ScriptedEngine` is
the in-memory implementation used by the unit tests.

A connect failure (refused, or the connect deadline) raises `EngineUnreachableError`: the
request was never sent, which the decode stage needs to know (stages.DecodeStage).
"""

from __future__ import annotations

import abc
import enum
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import httpx
import orjson

from render_service.errors import EngineTimeoutError
from render_service.gateway.errors import (
    EngineFailedError,
    EngineUnavailableError,
    EngineUnreachableError,
    error_from_status,
)
from render_service.gateway.sse import DONE_PAYLOAD, SSEDecoder, SSEProtocolError

__all__ = ["EngineClient", "HttpEngineClient", "EngineHttp", "ClientState", "engine_request_id",
           "GENERATE_PATH", "ABORT_PATH"]

log = logging.getLogger(__name__)

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/inference/v1/abort_requests"
HEALTH_PATH = "/health"
# vLLM 0.32 and 0.33 both name the engine request "generate-tokens-" + the body's request_id
# (`ServingTokens.serve_tokens`); abort_requests wants that full name.
ENGINE_REQUEST_PREFIX = "generate-tokens-"
ABORT_TIMEOUT_S = 2.0
_JSON_HEADERS = {"content-type": "application/json"}


def engine_request_id(request_id: str) -> str:
    return ENGINE_REQUEST_PREFIX + request_id


class EngineClient(abc.ABC):
    """One engine. Implementations: HttpEngineClient (real), ScriptedEngine (tests)."""

    url: str

    @abc.abstractmethod
    async def generate(self, body: dict[str, Any], *, timeout_s: float) -> dict[str, Any]: ...

    @abc.abstractmethod
    def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]: ...

    @abc.abstractmethod
    async def abort(self, request_ids: list[str]) -> bool: ...

    @abc.abstractmethod
    async def check_health(self, *, timeout_s: float) -> bool: ...


class ClientState(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


class EngineHttp:
    """The one pooled HTTP client shared by every HttpEngineClient of a gateway."""

    def __init__(self, *, connect_timeout_s: float, max_connections: int,
                 api_key: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport  # tests: httpx.MockTransport
        self.connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None
        self.state = ClientState.UNOPENED

    @property
    def client(self) -> httpx.AsyncClient:
        if self.state is ClientState.CLOSED:
            raise RuntimeError("engine HTTP client used after close")
        if self._client is None:
            # Read/write/pool deadlines are the stages' job (per phase); httpx only bounds connect.
            timeout = httpx.Timeout(None, connect=self.connect_timeout_s)
            limits = httpx.Limits(max_connections=self._max_connections,
                                  max_keepalive_connections=min(self._max_connections, 256))
            self._client = httpx.AsyncClient(timeout=timeout, limits=limits, headers=self._headers,
                                             transport=self._transport)
            self.state = ClientState.OPEN
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        self.state = ClientState.CLOSED


class HttpEngineClient(EngineClient):
    def __init__(self, url: str, http: EngineHttp) -> None:
        self.url = url.rstrip("/")
        self._http = http

    def __repr__(self) -> str:
        return f"HttpEngineClient({self.url!r})"

    async def generate(self, body: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        try:
            response = await self._http.client.post(
                self.url + GENERATE_PATH, content=orjson.dumps(body), headers=_JSON_HEADERS,
                timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, self._http.connect_timeout_s)),
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EngineUnreachableError(f"engine {self.url} unreachable: {_describe(exc)}") from exc
        except httpx.TimeoutException as exc:
            raise EngineTimeoutError(f"engine {self.url} did not answer within {timeout_s:g} s") from exc
        except httpx.TransportError as exc:
            raise EngineUnavailableError(f"engine {self.url} unreachable: {_describe(exc)}") from exc
        payload = _json_or_none(response.content)
        if response.status_code != 200:
            raise error_from_status(response.status_code, payload, f"engine {self.url}")
        if not isinstance(payload, dict):
            raise EngineFailedError(f"engine {self.url} answered a body that is not a JSON object")
        return payload

    async def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        request = self._http.client.build_request(
            "POST", self.url + GENERATE_PATH, content=orjson.dumps(body), headers=_JSON_HEADERS)
        try:
            response = await self._http.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EngineUnreachableError(f"engine {self.url} unreachable: {_describe(exc)}") from exc
        except httpx.TransportError as exc:
            raise EngineUnavailableError(f"engine {self.url} unreachable: {_describe(exc)}") from exc
        try:
            if response.status_code != 200:
                content = await response.aread()
                raise error_from_status(response.status_code, _json_or_none(content), f"engine {self.url}")
            async with aclosing(_events(response, self.url)) as events:
                async for event in events:
                    yield event
        finally:
            await response.aclose()

    async def abort(self, request_ids: list[str]) -> bool:
        try:
            response = await self._http.client.post(
                self.url + ABORT_PATH, content=orjson.dumps({"request_ids": request_ids}),
                headers=_JSON_HEADERS, timeout=ABORT_TIMEOUT_S)
        except httpx.HTTPError as exc:
            log.warning("abort %s on %s failed: %s", request_ids, self.url, _describe(exc))
            return False
        if response.status_code != 200:
            log.warning("abort %s on %s: HTTP %d", request_ids, self.url, response.status_code)
        return response.status_code == 200

    async def check_health(self, *, timeout_s: float) -> bool:
        try:
            response = await self._http.client.get(self.url + HEALTH_PATH, timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200


async def _events(response: httpx.Response, url: str) -> AsyncGenerator[dict[str, Any], None]:
    decoder = SSEDecoder()
    try:
        async for data in response.aiter_bytes():
            for payload in decoder.feed(data):
                if payload == DONE_PAYLOAD:
                    return
                yield _parse_event(payload, url)
    except httpx.TimeoutException as exc:
        raise EngineTimeoutError(f"engine {url}: stream read timed out") from exc
    except httpx.TransportError as exc:
        raise EngineUnavailableError(f"engine {url} dropped the stream: {_describe(exc)}") from exc
    except SSEProtocolError as exc:
        raise EngineFailedError(f"engine {url}: {exc}") from exc
    raise EngineUnavailableError(f"engine {url} ended the stream without [DONE]")


def _parse_event(payload: str, url: str) -> dict[str, Any]:
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EngineFailedError(f"engine {url} sent an event that is not JSON") from exc
    if not isinstance(event, dict):
        raise EngineFailedError(f"engine {url} sent an event that is not a JSON object")
    if "error" in event:
        err = event["error"] if isinstance(event["error"], dict) else {}
        raise EngineFailedError(f"engine {url}: {err.get('message', 'error event')}")
    return event


def _json_or_none(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
