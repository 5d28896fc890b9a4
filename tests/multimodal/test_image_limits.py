"""Image limits, http(s) fetching and the processed-image cache, through the HTTP app.

A tiny weightless Qwen2-VL folder is served in-process (one model load for the module); a
loopback HTTP server plays the remote image host. Each limit answers with a clear error
(400 or 413) and the app keeps serving.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from render_service.api import Renderer
from render_service.config import Limits, ServiceConfig
from render_service.http.app import create_app
from render_service.model import ModelBundle

from .tiny_vlm import build_qwen2_vl_dir, data_uri, png

IMAGE = png((90, 60), 1)
OTHER = png((64, 64), 2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen2_vl_dir(tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture(scope="module")
def bundle(model_dir: Path) -> ModelBundle:
    return ModelBundle.load(ServiceConfig(model=str(model_dir)))


@pytest.fixture(scope="module")
def image_host() -> Iterator[str]:
    """http://127.0.0.1:<port>/a.png serves IMAGE; anything else is 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path != "/a.png":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            self.wfile.write(IMAGE)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _client(model_dir: Path, bundle: ModelBundle, *, limits: dict[str, Any] | None = None, **overrides: Any) -> TestClient:
    config = ServiceConfig(model=str(model_dir), limits=Limits(**(limits or {})), **overrides)
    return TestClient(create_app(config, bundle=bundle))


def _body(*urls: str, **extra: Any) -> dict[str, Any]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "Describe."}, *parts]}], **extra}


def _error(response: Any, status: int, needle: str) -> None:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert error["code"] == status and needle in error["message"], error


def _still_serves(client: TestClient) -> None:
    response = client.post("/v1/chat/completions/render", json=_body(data_uri(IMAGE)))
    assert response.status_code == 200 and response.json()["features"]["mm_hashes"]["image"]


def test_image_count_limit(model_dir: Path, bundle: ModelBundle) -> None:
    with _client(model_dir, bundle, limits={"max_images": 2}) as client:
        _error(client.post("/v1/chat/completions/render", json=_body(*[data_uri(IMAGE)] * 3)), 400, "At most 2 image(s)")
        _still_serves(client)


def test_pixel_limit(model_dir: Path, bundle: ModelBundle) -> None:
    with _client(model_dir, bundle, limits={"max_image_pixels": 90 * 60 - 1}) as client:
        _error(client.post("/v1/chat/completions/render", json=_body(data_uri(IMAGE))), 400, "Image too large")
        assert client.post("/v1/chat/completions/render", json=_body(data_uri(OTHER))).status_code == 200


def test_body_limit_is_413(model_dir: Path, bundle: ModelBundle) -> None:
    with _client(model_dir, bundle, limits={"max_body_bytes": 4096}) as client:
        response = client.post("/v1/chat/completions/render", json=_body(data_uri(png((200, 200), 3))))
        assert response.status_code == 413, response.text[:300]


def test_untrusted_mm_kwargs_are_400(model_dir: Path, bundle: ModelBundle) -> None:
    with _client(model_dir, bundle) as client:
        body = _body(data_uri(IMAGE), mm_processor_kwargs={"max_pixels": 3136})
        _error(client.post("/v1/chat/completions/render", json=body), 400, "--trust-request-mm-kwargs")


def test_http_images_are_refused_by_default(model_dir: Path, bundle: ModelBundle, image_host: str) -> None:
    with _client(model_dir, bundle) as client:
        _error(client.post("/v1/chat/completions/render", json=_body(image_host + "/a.png")), 400, "not enabled")


def test_http_image_from_an_allowed_host_equals_its_data_uri(
    model_dir: Path, bundle: ModelBundle, image_host: str
) -> None:
    """The hash covers the encoded bytes, so a fetched image renders exactly like its data URI."""
    with _client(model_dir, bundle, allowed_media_domains=("127.0.0.1",)) as client:
        fetched = client.post("/v1/chat/completions/render", json=_body(image_host + "/a.png"))
        inline = client.post("/v1/chat/completions/render", json=_body(data_uri(IMAGE)))
        assert fetched.status_code == 200, fetched.text[:500]
        assert fetched.json()["token_ids"] == inline.json()["token_ids"]
        assert fetched.json()["features"] == inline.json()["features"]
        _error(client.post("/v1/chat/completions/render", json=_body(image_host + "/missing.png")), 400, "404")


def test_http_image_from_another_host_is_refused(model_dir: Path, bundle: ModelBundle, image_host: str) -> None:
    with _client(model_dir, bundle, allowed_media_domains=("images.example",)) as client:
        response = client.post("/v1/chat/completions/render", json=_body(image_host + "/a.png"))
        assert response.status_code == 400 and "127.0.0.1" in response.json()["error"]["message"]


def test_processed_images_are_reused_and_the_cache_stays_in_budget(model_dir: Path, bundle: ModelBundle) -> None:
    renderer = Renderer(ServiceConfig(model=str(model_dir)), bundle=bundle)
    cache = renderer.images.cache
    first = renderer.render_chat(_body(data_uri(IMAGE), request_id="r"))
    again = renderer.render_chat(_body(data_uri(IMAGE), request_id="r"))
    assert again == first and cache.hits == 1 and cache.misses == 1

    one_item = cache.size_bytes
    small = Renderer(ServiceConfig(model=str(model_dir), mm_processor_cache_gb=1.5 * one_item / 1024**3), bundle=bundle)
    for seed in range(4):
        small.render_chat(_body(data_uri(png((90, 60), 10 + seed))))
        assert small.images.cache.size_bytes <= small.images.cache.capacity_bytes
    assert len(small.images.cache) == 1  # the budget holds one of these items: older ones evicted


def test_a_client_uuid_never_selects_another_images_pixels(model_dir: Path, bundle: ModelBundle) -> None:
    """vLLM uses the uuid as the mm_hash; our cache is keyed by content, so a reused uuid with
    different pixels still gets its own tensors."""
    renderer = Renderer(ServiceConfig(model=str(model_dir)), bundle=bundle)

    def render(image: bytes) -> dict[str, Any]:
        part = {"type": "image_url", "image_url": {"url": data_uri(image)}, "uuid": "same-id"}
        return renderer.render_chat({"messages": [{"role": "user", "content": [part]}]})["features"]

    first, second = render(IMAGE), render(png((90, 60), 99))
    assert first["mm_hashes"] == second["mm_hashes"] == {"image": ["same-id"]}
    assert first["kwargs_data"] != second["kwargs_data"]
