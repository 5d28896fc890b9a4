"""HttpEngineClient over httpx.MockTransport, and the SSE decoder, byte by byte."""

from __future__ import annotations

import json

import httpx
import pytest

from render_service.errors import EngineTimeoutError
from render_service.gateway.engine_client import EngineHttp, HttpEngineClient
from render_service.gateway.errors import (
    EngineFailedError,
    EngineRejectedError,
    EngineUnavailableError,
)
from render_service.gateway.sse import SSEDecoder, SSEProtocolError

EVENTS = [{"request_id": "generate-tokens-r", "choices": [{"index": 0, "token_ids": [i]}]}
          for i in range(3)]
STREAM = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS) + b"data: [DONE]\n\n"


def test_sse_decoder_any_split() -> None:
    """Every split of the byte stream gives the same payloads (CRLF too)."""
    expected = [json.dumps(e) for e in EVENTS] + ["[DONE]"]
    for raw in (STREAM, STREAM.replace(b"\n", b"\r\n")):
        for cut in range(len(raw) + 1):
            decoder = SSEDecoder()
            assert decoder.feed(raw[:cut]) + decoder.feed(raw[cut:]) == expected
        decoder = SSEDecoder()
        assert [p for i in range(len(raw)) for p in decoder.feed(raw[i:i + 1])] == expected


def test_sse_decoder_bounds_an_endless_event() -> None:
    """An event that never ends cannot grow the buffer without limit."""
    decoder = SSEDecoder()
    with pytest.raises(SSEProtocolError):
        for _ in range(10):
            decoder.feed(b"data: " + b"x" * (1024 * 1024))


def client_for(handler) -> HttpEngineClient:  # type: ignore[no-untyped-def]
    http = EngineHttp(connect_timeout_s=1, max_connections=4, transport=httpx.MockTransport(handler))
    return HttpEngineClient("http://engine", http)


async def test_stream_yields_events_until_done() -> None:
    """JSON events in order; the iterator ends at [DONE]; the body sent is the request."""
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"], seen["body"] = request.url.path, json.loads(request.content)
        return httpx.Response(200, content=STREAM, headers={"content-type": "text/event-stream"})

    events = [e async for e in client_for(handler).stream({"request_id": "r", "stream": True})]
    assert events == EVENTS
    assert seen == {"path": "/inference/v1/generate", "body": {"request_id": "r", "stream": True}}


@pytest.mark.parametrize("content, error", [
    (STREAM[:-len(b"data: [DONE]\n\n")], EngineUnavailableError),  # cut without [DONE]
    (b'data: {"error": {"message": "Internal server error", "code": 500}}\n\n', EngineFailedError),
    (b"data: not json\n\n", EngineFailedError),
])
async def test_stream_failures_are_typed(content: bytes, error: type) -> None:
    """A cut stream, an error event or garbage each raise their engine error."""
    client = client_for(lambda request: httpx.Response(200, content=content))
    with pytest.raises(error):
        async for _ in client.stream({"request_id": "r"}):
            pass


async def test_status_codes_map_to_errors() -> None:
    """4xx -> EngineRejectedError with the engine's status and message; 5xx -> EngineFailedError."""
    body = {"error": {"message": "max_tokens too large", "type": "BadRequestError", "param": "max_tokens",
                      "code": 400}}
    client = client_for(lambda request: httpx.Response(400, json=body))
    with pytest.raises(EngineRejectedError) as rejected:
        await client.generate({"request_id": "r"}, timeout_s=1)
    assert rejected.value.status == 400 and rejected.value.to_body() == body
    client = client_for(lambda request: httpx.Response(503, text="busy"))
    with pytest.raises(EngineFailedError):
        await client.generate({"request_id": "r"}, timeout_s=1)


async def test_transport_errors_and_timeouts() -> None:
    """Connection refused -> EngineUnavailableError; a read timeout -> EngineTimeoutError."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(EngineUnavailableError):
        await client_for(refuse).generate({"request_id": "r"}, timeout_s=1)
    with pytest.raises(EngineTimeoutError):
        await client_for(slow).generate({"request_id": "r"}, timeout_s=1)
    assert await client_for(refuse).check_health(timeout_s=1) is False
    assert await client_for(refuse).abort(["x"]) is False


async def test_abort_posts_request_ids() -> None:
    """abort_requests gets {"request_ids": [...]} on the /inference path."""
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"], seen["body"] = request.url.path, json.loads(request.content)
        return httpx.Response(200)

    assert await client_for(handler).abort(["generate-tokens-a"]) is True
    assert seen == {"path": "/inference/v1/abort_requests", "body": {"request_ids": ["generate-tokens-a"]}}
