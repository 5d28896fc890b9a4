"""Images through the gateway: http(s) URLs are fetched (async, under the render service's
FetchPolicy) before rendering, data URIs decoded; the engine gets vLLM's `features`.

The real render core runs on a tiny weightless Qwen2-VL folder; the engines are scripted.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import ScriptedEngine

from ..multimodal.tiny_vlm import build_qwen2_vl_dir, data_uri, png
from .conftest import FAST_TIMEOUTS

IMAGE = png((90, 60), seed=7)
OTHER = png((90, 60), seed=8)


HITS: list[str] = []  # paths the image server was asked for


class _ImageHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        HITS.append(self.path)
        body = {"/cat.png": IMAGE, "/dog.png": OTHER}.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("content-type", "image/png")
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def image_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ImageHandler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def vlm_config(tmp_path_factory: pytest.TempPathFactory) -> ServiceConfig:
    model_dir: Path = build_qwen2_vl_dir(tmp_path_factory.mktemp("tiny-qwen2-vl"))
    return ServiceConfig(model=str(model_dir), allowed_media_domains=("127.0.0.1",))


@pytest.fixture(scope="module")
def vlm_codec(vlm_config: ServiceConfig) -> InProcessCodec:
    return InProcessCodec(vlm_config)


@asynccontextmanager
async def vlm_gateway(config: ServiceConfig, codec: InProcessCodec
                      ) -> AsyncIterator[tuple[httpx.AsyncClient, ScriptedEngine]]:
    engine = ScriptedEngine("http://e0", tokens=[9906])
    gateway_config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS,
                                   health=HealthSettings(interval_s=60))
    app = create_gateway_app(config, gateway_config, codec=codec,
                             client_factory={"http://e0": engine}.__getitem__)
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://gw") as client):
        yield client, engine


def image_chat(*urls: str) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    text = {"type": "text", "text": "What is it?"}
    return {"messages": [{"role": "user", "content": [*parts, text]}], "max_tokens": 4}


async def test_http_image_url_is_fetched_and_sent_as_features(vlm_config, vlm_codec, image_server) -> None:  # type: ignore[no-untyped-def]
    """An allowed http URL is downloaded by the gateway; the engine gets the same `features`
    (mm hash, placeholders, tensors) as for the same bytes sent inline."""
    async with vlm_gateway(vlm_config, vlm_codec) as (client, engine):
        body = image_chat(f"{image_server}/cat.png")
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert "/cat.png" in HITS
    (call,) = engine.calls
    inline = vlm_codec.render_chat(image_chat(data_uri(IMAGE)), None)
    assert call.body["features"] is not None
    assert call.body["features"] == inline["features"]
    assert call.body["token_ids"] == inline["token_ids"]


async def test_different_images_get_different_hashes(vlm_config, vlm_codec, image_server) -> None:  # type: ignore[no-untyped-def]
    """Two URLs with different pictures: two different mm hashes reach the engine."""
    async with vlm_gateway(vlm_config, vlm_codec) as (client, engine):
        response = await client.post("/v1/chat/completions", json=image_chat(
            f"{image_server}/cat.png", f"{image_server}/dog.png"))
    assert response.status_code == 200, response.text
    hashes = engine.calls[0].body["features"]["mm_hashes"]["image"]
    assert len(hashes) == 2 and hashes[0] != hashes[1]


async def test_data_uri_image_through_the_gateway(vlm_config, vlm_codec) -> None:  # type: ignore[no-untyped-def]
    """A data URI needs no fetch; streaming too."""
    async with vlm_gateway(vlm_config, vlm_codec) as (client, engine):
        body = image_chat(data_uri(IMAGE)) | {"stream": True}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")
    features = engine.calls[0].body["features"]
    assert len(features["mm_hashes"]["image"]) == 1 and features["kwargs_data"] is not None


async def test_url_outside_the_allowed_domains_is_refused(vlm_config, vlm_codec, image_server) -> None:  # type: ignore[no-untyped-def]
    """The render service's policy applies: another host is a 400 before any engine work."""
    other_host = image_server.replace("127.0.0.1", "localhost")
    async with vlm_gateway(vlm_config, vlm_codec) as (client, engine):
        body = image_chat(f"{other_host}/cat.png")
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert "allowed domains" in response.json()["error"]["message"]
    assert engine.calls == []


@pytest.mark.parametrize("field", ["messages", "tools"])
async def test_too_many_messages_or_tools_is_refused_before_any_fetch(  # type: ignore[no-untyped-def]
    vlm_config, vlm_codec, image_server, field: str
) -> None:
    """--max-messages / --max-tools are checked on the raw body first: no image is fetched for
    a request render would refuse anyway."""
    limits = dataclasses.replace(vlm_config.limits, max_messages=2, max_tools=1)
    config = dataclasses.replace(vlm_config, limits=limits)
    body = image_chat(f"{image_server}/cat.png?{field}")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    if field == "messages":
        body["messages"] = [{"role": "user", "content": "hi"}] * 2 + body["messages"]
    else:
        body["tools"] = [tool, tool]
    async with vlm_gateway(config, vlm_codec) as (client, engine):
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and f"--max-{field}" in error["message"]
    assert f"/cat.png?{field}" not in HITS and engine.calls == []
