"""ServiceMiddleware: API key, body limit, saturation and metrics, on a bare ASGI app."""

from __future__ import annotations

import asyncio

import httpx

from render_service.errors import PayloadTooLargeError
from render_service.http.errors import error_response
from render_service.http.middleware import ServiceMiddleware


async def echo_app(scope, receive, send):  # type: ignore[no-untyped-def]
    """Reads the whole body and answers its length; maps the 413 error like the real app."""
    body = b""
    try:
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
    except PayloadTooLargeError as exc:
        await error_response(exc.status, exc.to_body())(scope, receive, send)
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(0.3)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(len(body)).encode()})


def make_client(**kwargs) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    options = dict(api_key=None, max_body_bytes=100, max_concurrent=10,
                   known_paths=frozenset({"/x", "/health", "/metrics", "/slow"}))
    options.update(kwargs)
    app = ServiceMiddleware(echo_app, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def test_api_key_protects_everything_but_health_and_metrics() -> None:
    """Without the right bearer token: 401 vLLM-style; probes stay open."""
    async with make_client(api_key="sekret") as client:
        assert (await client.post("/x", content=b"")).status_code == 401
        assert (await client.post("/x", content=b"")).json() == {"error": "Unauthorized"}
        wrong = await client.post("/x", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await client.post("/x", headers={"Authorization": "Bearer sekret"}, content=b"ab")
        assert ok.status_code == 200 and ok.text == "2"
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_declared_oversized_body_gets_413_before_reading() -> None:
    """Content-Length over the limit is refused with an OpenAI-style 413 body."""
    async with make_client() as client:
        response = await client.post("/x", content=b"a" * 101)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "PayloadTooLargeError"
    assert response.json()["error"]["code"] == 413


async def test_streamed_oversized_body_gets_413_while_reading() -> None:
    """A chunked body without Content-Length is cut off once it passes the limit."""
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(5):
            yield b"a" * 40

    async with make_client() as client:
        response = await client.post("/x", content=chunks())
    assert response.status_code == 413


async def test_body_at_the_limit_passes() -> None:
    """Exactly max_body_bytes is allowed."""
    async with make_client() as client:
        response = await client.post("/x", content=b"a" * 100)
    assert response.status_code == 200 and response.text == "100"


async def test_saturated_worker_answers_503_with_retry_after() -> None:
    """With max_concurrent in flight, the next request gets 503 and a Retry-After header."""
    async with make_client(max_concurrent=1) as client:
        slow = asyncio.create_task(client.post("/slow", content=b""))
        await asyncio.sleep(0.05)
        busy = await client.post("/x", content=b"")
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["type"] == "ServiceUnavailableError"
        assert (await slow).status_code == 200
        assert (await client.post("/x", content=b"")).status_code == 200


async def test_request_id_is_echoed_when_enabled() -> None:
    """--enable-request-id-headers echoes X-Request-Id."""
    async with make_client(echo_request_id=True) as client:
        response = await client.post("/x", headers={"X-Request-Id": "abc"})
    assert response.headers["x-request-id"] == "abc"



async def test_any_of_several_api_keys_is_accepted() -> None:
    """vLLM's --api-key k1 k2: either key authenticates; anything else is 401."""
    async with make_client(api_key=("k1", "k2")) as client:
        for key, status in (("k1", 200), ("k2", 200), ("k3", 401), ("k1k2", 401)):
            response = await client.post("/x", headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == status, key
