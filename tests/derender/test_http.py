"""The derender routes over HTTP (FastAPI app): bodies in, vLLM-shaped bodies and 400s out."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from render_service.config import ServiceConfig
from render_service.http.app import create_app

from .helpers import EOS, REQUEST_ID


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


# -- parsers errors on engine output: typed 400s in all four operations -------------------

# Qwen3's byte-level piece for the lone byte 0xA1: a UTF-8 continuation byte that never
# completes a character, so the detokenizer window grows by one token per id.
LONE_CONTINUATION = 94
DEGENERATE_RUN = 1100  # past the stream window cap (MAX_WINDOW_TOKENS = 1024)


@pytest.fixture(scope="module")
def parsed_client():  # noqa: ANN201
    from render_service.config import Limits

    from .conftest import PARSER_FLAGS

    config = ServiceConfig(stream_state_secret="http", limits=Limits(max_tool_call_chars=4096),
                           **PARSER_FLAGS)  # fmt: skip
    with TestClient(create_app(config), raise_server_exceptions=False) as c:
        yield c


def _gen(ids, **choice):  # noqa: ANN001, ANN003, ANN202
    return {"request_id": REQUEST_ID,
            "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop", **choice}]}  # fmt: skip


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _stream_until_error(client, path, ids, size, first_body):  # noqa: ANN001, ANN202
    """Post `ids` in chunks of `size`; the first non-200 response and its chunk number."""
    state = None
    for k, start in enumerate(range(0, len(ids), size)):
        last = start + size >= len(ids)
        chunk = {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": ids[start : start + size],
                                                        "finish_reason": "stop" if last else None}]}  # fmt: skip
        body = {"stream": True, "generate_chunk": chunk, "stream_state": state}
        if k == 0:
            body |= first_body
        r = client.post(path, json=body)
        if r.status_code != 200:
            return r, k
        state = r.json()["stream_state"]
    raise AssertionError("the stream never failed")


def _assert_typed_400(r, param, *words):  # noqa: ANN001, ANN002, ANN202
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["param"] == param
    for word in words:
        assert word in error["message"], error["message"]


def test_degenerate_output_batch_decodes_without_a_window_cap(parsed_client, tok):  # noqa: ANN001
    """Batch follows vLLM's batch derender (one uncapped pass): nothing decodes from the lone
    bytes, or one U+FFFD each once a real character follows. Equality with vLLM itself is in
    test_differential.py."""
    hello = tok.encode("hello", add_special_tokens=False)
    for tail, text in (([], ""), (hello, "\ufffd" * DEGENERATE_RUN + "hello")):
        gen = _gen([LONE_CONTINUATION] * DEGENERATE_RUN + tail + [EOS])
        r = parsed_client.post("/v1/completions/derender", json={"generate_responses": [gen]})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == text
        r = parsed_client.post("/v1/chat/completions/derender", json={
            "generate_response": gen, "chat_request": CHAT, "prompt_token_ids": [1, 2]})  # fmt: skip
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        assert (message["reasoning"] or "") + (message["content"] or "") == text


@pytest.mark.parametrize("path,first_body,failing_chunk", [
    ("/v1/completions/derender", {}, 4),
    # The two prompt ids seed the window: 2 + 4 * 256 > 1024 already on the 4th chunk.
    ("/v1/chat/completions/derender", {"chat_request": CHAT, "prompt_token_ids": [1, 2]}, 3),
], ids=["completion", "chat"])
def test_degenerate_output_stream_is_a_typed_400_at_the_window_cap(
    parsed_client, path, first_body, failing_chunk  # noqa: ANN001
) -> None:
    """A stream's state is bounded: the run overflows the detokenizer window on the chunk (of
    256 tokens) that takes it past 1024 tokens, and that is a 400, never a 500."""
    ids = [LONE_CONTINUATION] * DEGENERATE_RUN + [EOS]
    r, k = _stream_until_error(parsed_client, path, ids, 256, first_body)
    assert k == failing_chunk
    _assert_typed_400(r, "generate_chunk", "window exceeds 1024 tokens")


def test_tool_call_over_the_limit_in_batch_chat_is_a_typed_400(parsed_client, tok):  # noqa: ANN001
    """The tool parser's LimitExceededError (--max-tool-call-chars) in batch chat is a 400: a
    call that must be held whole (its arguments come before its name) exceeds the limit."""
    call = '<tool_call>\n{"arguments": {"city": "' + "x" * 5000
    ids = tok.encode("<think>\n\n</think>\n\n" + call, add_special_tokens=False)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    r = parsed_client.post("/v1/chat/completions/derender", json={
        "generate_response": _gen(ids, finish_reason="length"), "chat_request": {**CHAT, "tools": tools},
        "prompt_token_ids": [1, 2]})  # fmt: skip
    _assert_typed_400(r, "generate_response", "--max-tool-call-chars")
    r, _ = _stream_until_error(parsed_client, "/v1/chat/completions/derender", ids, 64,
                               {"chat_request": {**CHAT, "tools": tools}, "prompt_token_ids": [1, 2]})  # fmt: skip
    _assert_typed_400(r, "generate_chunk", "--max-tool-call-chars")


# -- the hot routes (http.app._HotRoutes) answer exactly as the framework routes -----------

def _comparable(response) -> tuple:  # noqa: ANN001
    """Status, content headers and body, without the per-call ids, clocks and state tokens."""
    body = response.json()
    if response.status_code == 200:
        for part in (body if isinstance(body, list) else [body]):
            for key in ("id", "created", "request_id", "stream_state"):
                part.pop(key, None)
            if isinstance(part.get("chunk"), dict):
                part["chunk"].pop("id", None), part["chunk"].pop("created", None)
    headers = {k: v for k, v in response.headers.items() if k not in ("content-length",)}
    return response.status_code, headers, body


async def _chunked():  # noqa: ANN202
    for part in (b'{"messages": "', b"x" * 5000, b'"}'):  # no Content-Length: 413 while reading
        yield part


async def test_hot_routes_answer_as_the_framework(client, tok, monkeypatch):  # noqa: ANN001
    import httpx

    app = client.app
    monkeypatch.setattr(app.entry, "max_body_bytes", 4096)
    hot = app.entry.app
    assert set(hot.handlers) == {f"/v1/{kind}/{op}" for kind in ("chat/completions", "completions")
                                 for op in ("render", "derender")} | {
        "/v1/messages/render", "/v1/responses/render", "/tokenize", "/detokenize"}
    ids = tok.encode("hello", add_special_tokens=False) + [EOS]
    gen = {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]}
    chat = {"messages": [{"role": "user", "content": "Hi"}]}
    json_ct = {"content-type": "application/json"}
    cases = [
        ("/v1/chat/completions/render", {"json": chat}),
        ("/v1/completions/render", {"json": {"prompt": "Hi"}}),
        ("/v1/chat/completions/render", {"content": b'{"messages": [', "headers": json_ct}),
        ("/v1/chat/completions/render", {"content": b"[1]", "headers": json_ct}),
        ("/v1/chat/completions/render", {"content": b"{}", "headers": {"content-type": "text/plain"}}),
        ("/v1/chat/completions/render", {"json": {**chat, "model": "nope"}}),
        ("/v1/chat/completions/render", {"content": "chunked", "headers": json_ct}),  # over the limit
        ("/v1/chat/completions/derender", {"json": {"generate_response": gen}}),
        ("/v1/chat/completions/derender", {"json": {"stream": True, "generate_chunk": gen}}),
        ("/v1/chat/completions/derender", {"json": {"stream": True, "generate_chunk": gen, "stream_state": {"rs": "1.a.b"}}}),
        ("/v1/completions/derender", {"json": {"generate_responses": [gen]}}),
        ("/tokenize", {"json": {"prompt": "Hi"}}),
        ("/detokenize", {"json": {"tokens": ids}}),
        ("/tokenize", {"json": {"prompt": "boom"}}),
    ]
    real_tokenize = app.state.service.renderer.tokenize

    def tokenize(body):  # noqa: ANN001, ANN202
        if body.get("prompt") == "boom":
            raise RuntimeError("boom")
        return real_tokenize(body)

    monkeypatch.setattr(app.state.service.renderer, "tokenize", tokenize)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    answers: dict[bool, list[tuple]] = {}
    handlers = hot.handlers
    for shortcut in (True, False):
        monkeypatch.setattr(hot, "handlers", handlers if shortcut else {})
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers[shortcut] = [
                _comparable(await client.post(path, **(kwargs | {"content": _chunked()} if kwargs.get("content") == "chunked" else kwargs)))
                for path, kwargs in cases
            ]
    assert [status for status, _, _ in answers[True]] == [200, 200, 400, 400, 400, 404, 413, 200, 200, 400, 200, 200, 200, 500]
    assert answers[True] == answers[False]
