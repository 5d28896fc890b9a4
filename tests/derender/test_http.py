"""The derender routes over HTTP (FastAPI app): bodies in, vLLM-shaped bodies and 400s out."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from .helpers import EOS, REQUEST_ID

from render_service.app import create_app
from render_service.config import ServiceConfig


@pytest.fixture(scope="module")
def client():  # noqa: ANN201
    with TestClient(create_app(ServiceConfig(stream_state_secret="http"))) as c:
        yield c


def test_batch_stream_and_errors(client, tok):  # noqa: ANN001
    ids = tok.encode("hello 😀", add_special_tokens=False) + [EOS]
    gen = {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]}
    r = client.post("/v1/chat/completions/derender", json={"generate_response": gen})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "hello 😀"
    step = {"stream": True, "generate_chunk": {"request_id": REQUEST_ID, "choices": gen["choices"]}}
    r = client.post("/v1/chat/completions/derender", json=step)
    assert r.status_code == 200 and set(r.json()) == {"chunk", "stream_state"}
    r = client.post("/v1/completions/derender", json={"generate_responses": [gen]})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "hello 😀"
    bad = client.post("/v1/chat/completions/derender", json={**step, "stream_state": {"rs": "1.a.b"}})
    assert bad.status_code == 400 and "invalid stream_state" in bad.json()["error"]["message"]
    bad = client.post("/v1/chat/completions/derender", json={"generate_response": {"choices": 1}})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
    missing = client.post("/v1/chat/completions/derender", json={"generate_response": gen, "model": "x"})
    assert missing.status_code == 404
