"""Resource lifecycle and serving plumbing: prompt aborts, render threads, probes, engine key,
admission headers and the middleware bound."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client import REGISTRY

from render_service.config import Limits, ServiceConfig
from render_service.errors import ConfigError
from render_service.gateway.app import create_gateway_app
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import Fault, ScriptedEngine, scripted_transport

from .conftest import FAST_TIMEOUTS, Harness, fake_engines, running_gateway
from .gateway_fakes import MODEL, FakeCodec, ids_of


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://gw") as c):
        yield c


def chat(**extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def asgi_scope(path: str) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1), "server": ("gw", 80)}


async def call_app(h: Harness, body: dict, on_last_body: Any, *,
                   hang_up_after_s: float | None = None, send_delay_s: float = 0.0) -> bytes:
    """Drive the ASGI app by hand; `on_last_body()` runs when the final body message is sent.
    `send_delay_s`: a slow client (each body write takes that long)."""
    messages = [{"type": "http.request", "body": orjson.dumps(body), "more_body": False}]
    sent: list[bytes] = []

    async def receive() -> dict:
        if messages:
            return messages.pop()
        if hang_up_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(hang_up_after_s)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body":
            if send_delay_s:
                await asyncio.sleep(send_delay_s)
            sent.append(message.get("body", b""))
            if not message.get("more_body", False):
                on_last_body()

    async with asyncio.timeout(5):
        await h.app(asgi_scope("/v1/chat/completions"), receive, send)  # type: ignore[operator]
    return b"".join(sent)


async def test_stop_string_aborts_and_releases_before_the_response_ends() -> None:
    """The engine stream is closed, its load count released and its abort issued before the
    last byte goes out, not whenever the garbage collector gets to the generator."""
    engines = fake_engines("http://e0", tokens=ids_of("one two three four"), token_delay_s=0.001)
    seen: dict[str, Any] = {}
    async with running_gateway(engines) as h:
        pool_engine = h.gateway.pools["collocated"].engines[0]
        aborts = "render_service_gateway_engine_aborts_total"
        aborts_before = metric(aborts, reason="stop_string")

        def at_end() -> None:
            seen.update(live=set(engines["http://e0"].live), outstanding=pool_engine.outstanding,
                        aborts=metric(aborts, reason="stop_string"))

        body = await call_app(h, chat(stream=True, stop=["two"], request_id="ao"), at_end)
        await h.settle()
    assert b'"stop_reason":"two"' in body
    assert seen == {"live": set(), "outstanding": 0, "aborts": aborts_before + 1}
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-ao"]


async def test_client_disconnect_aborts_and_releases_at_once() -> None:
    """A slow client hangs up mid-stream (the engine stream waits at a yield, not in IO): by the
    time the app returns, the engine stream is closed, its load released and the abort issued."""
    engines = fake_engines("http://e0", tokens=ids_of("x" * 200))
    async with running_gateway(engines) as h:
        pool_engine = h.gateway.pools["collocated"].engines[0]
        aborts = "render_service_gateway_engine_aborts_total"
        before = metric(aborts, reason="client_gone")
        await call_app(h, chat(stream=True, request_id="dd"), lambda: None, hang_up_after_s=0.1,
                       send_delay_s=0.02)
        assert not engines["http://e0"].live and pool_engine.outstanding == 0
        assert metric(aborts, reason="client_gone") == before + 1
        assert h.gateway.admission.active == 0
        await h.settle()
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-dd"]


class BarrierCodec(FakeCodec):
    """Renders only when `parties` renders run at once (a single render thread deadlocks)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=2)

    def render_chat(self, body: dict, request_id_header: str | None,
                    fetched_media: Any = None) -> dict:
        self.barrier.wait()
        return super().render_chat(body, request_id_header)


async def test_render_runs_on_renderer_num_workers_threads() -> None:
    """--renderer-num-workers sizes the gateway's render pool: two renders run side by side."""
    engines = fake_engines("http://e0")
    config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS,
                           health=HealthSettings(interval_s=60))
    app = create_gateway_app(ServiceConfig(renderer_num_workers=2), config, codec=BarrierCodec(2),
                             client_factory=engines.__getitem__)
    async with serving(app) as c:
        first, second = await asyncio.gather(c.post("/v1/chat/completions", json=chat()),
                                             c.post("/v1/chat/completions", json=chat()))
    assert (first.status_code, second.status_code) == (200, 200)


async def test_liveness_is_the_process_readiness_needs_engines() -> None:
    """/health is 200 while engines boot; /ready and /ping are 503 until one is healthy."""
    engines = fake_engines("http://p0", "http://d0")
    engines["http://d0"].healthy = False
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0",)) as h:
        booting = [await h.client.get(path) for path in ("/health", "/ready", "/ping")]
        engines["http://d0"].healthy = True
        await h.gateway.health.check_once()
        up = [await h.client.get(path) for path in ("/health", "/ready", "/ping")]
        up.append(await h.client.post("/ping"))  # SageMaker's method, which vLLM also takes
    assert [r.status_code for r in booting] == [200, 503, 503]
    assert booting[1].json() == {"ready": False, "pools": {"prefill": {"healthy": 1, "total": 1},
                                                           "decode": {"healthy": 0, "total": 1}}}
    assert [r.status_code for r in up] == [200, 200, 200, 200]


async def test_ready_stays_open_with_an_api_key() -> None:
    """Kubernetes cannot send the API key: /ready is open like /health."""
    engines = fake_engines("http://e0")
    config = GatewayConfig(engines=("http://e0",), health=HealthSettings(interval_s=60))
    app = create_gateway_app(ServiceConfig(api_key="k"), config, codec=FakeCodec(),
                             client_factory=engines.__getitem__)
    async with serving(app) as c:
        ready = await c.get("/ready")
        models = await c.get("/v1/models")
    assert ready.status_code == 200 and models.status_code == 401


def test_prompt_embeds_refused_at_start() -> None:
    """The engines' generate API has no field for embeddings: serving them would answer the
    placeholder tokens instead, so the gateway does not start with the flag."""
    config = GatewayConfig(engines=("http://e0",))
    with pytest.raises(ConfigError, match="--enable-prompt-embeds"):
        create_gateway_app(ServiceConfig(enable_prompt_embeds=True), config, codec=FakeCodec())


async def with_http_engines(engine_key: str | None, gateway_key: str | None
                            ) -> list[httpx.Response]:
    engines = {"http://e0": ScriptedEngine("http://e0", tokens=ids_of("ok"))}
    config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS, max_retries=0,
                           health=HealthSettings(interval_s=60), engine_api_key=gateway_key)
    app = create_gateway_app(ServiceConfig(), config, codec=FakeCodec(),
                             engine_transport=scripted_transport(engines, api_key=engine_key))
    async with serving(app) as c:
        return [await c.post("/v1/chat/completions", json=chat()),
                await c.post("/v1/chat/completions", json=chat(stream=True))]


async def test_engine_api_key_is_sent_as_bearer() -> None:
    """--engine-api-key reaches engines that require it (vLLM --api-key), JSON and SSE."""
    batch, stream = await with_http_engines("s3cret", "s3cret")
    assert batch.status_code == 200 and batch.json()["choices"][0]["message"]["content"] == "ok"
    assert stream.status_code == 200 and stream.content.endswith(b"data: [DONE]\n\n")


async def test_missing_engine_api_key_is_a_gateway_error_not_the_clients() -> None:
    """An engine refusing the gateway (401) is a 502 naming the flag, not relayed as 401."""
    batch, stream = await with_http_engines("s3cret", None)
    for response in (batch, stream):
        assert response.status_code == 502
        assert "--engine-api-key" in response.json()["error"]["message"]


def test_engine_api_key_from_flag_env_and_file(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The key comes from the flag, else RENDER_SERVICE_ENGINE_API_KEY, else the file; it never
    shows in the config's repr."""
    from render_service.gateway.cli import gateway_config_from_args

    from .test_gateway_routing import parse

    config_file = tmp_path / "gw.json"
    config_file.write_text('{"engines": ["http://e"], "engine_api_key": "from-file"}')
    monkeypatch.delenv("RENDER_SERVICE_ENGINE_API_KEY", raising=False)
    from_file = gateway_config_from_args(parse(["--config", str(config_file)]))
    assert from_file.engine_api_key == "from-file"
    monkeypatch.setenv("RENDER_SERVICE_ENGINE_API_KEY", "from-env")
    config = gateway_config_from_args(parse(["--config", str(config_file)]))
    assert config.engine_api_key == "from-env" and "from-env" not in repr(config)
    flagged = parse(["--config", str(config_file), "--engine-api-key", "from-flag"])
    assert gateway_config_from_args(flagged).engine_api_key == "from-flag"


async def test_saturated_503_says_when_to_retry() -> None:
    """The admission 503 carries Retry-After: 1, like the middleware's."""
    engines = fake_engines("http://e0")
    engines["http://e0"].faults.append(Fault.hang())
    async with running_gateway(engines, max_concurrent_streams=1, max_retries=0) as h:
        held = asyncio.ensure_future(h.client.post("/v1/chat/completions", json=chat(stream=True)))
        await asyncio.sleep(0.1)
        refused = await h.client.post("/v1/chat/completions", json=chat(stream=True))
        await held
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"


async def test_streams_are_not_capped_by_the_middleware_limit() -> None:
    """--max-concurrent-streams above --max-concurrent-requests: the streams are all admitted."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"), token_delay_s=0.05)
    config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS, max_concurrent_streams=4,
                           health=HealthSettings(interval_s=60))
    service = ServiceConfig(limits=Limits(max_concurrent_requests=2))
    app = create_gateway_app(service, config, codec=FakeCodec(), client_factory=engines.__getitem__)
    async with serving(app) as c:
        responses = await asyncio.gather(*(c.post("/v1/chat/completions", json=chat(stream=True))
                                           for _ in range(4)))
    assert [r.status_code for r in responses] == [200] * 4
