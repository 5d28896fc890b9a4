"""Named limits over real HTTP: each refusal has its status, the OpenAI error body and a message
naming the limit; the worker keeps serving afterwards.

| limit                         | where enforced                         | answer |
| ----------------------------- | -------------------------------------- | ------ |
| --max-body-bytes              | middleware (Content-Length, streamed)  | 413    |
| --max-messages, --max-tools   | app (before the render pool)           | 400    |
| prompt tokens > max_model_len | render core (vLLM's message)           | 400    |
| --max-concurrent-requests     | middleware, per worker                 | 503 + Retry-After |
| tool-call buffer              | parsers, surfaced by streaming derender | 400   |
| images                        | not supported yet: any image part is a 400 before decoding |
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from render_service.config import Limits

from .reliability_support import EOS, PARSER_FLAGS, TOOLS, stream_chunks

BODY_LIMIT = 64 * 1024
SMALL = {"max_body_bytes": BODY_LIMIT, "max_messages": 8, "max_tools": 3}
USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def small(make_app, serve) -> Iterator[httpx.Client]:  # noqa: ANN001
    with httpx.Client(base_url=serve(make_app(limits=SMALL)).url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def default(default_server) -> Iterator[httpx.Client]:  # noqa: ANN001
    with httpx.Client(base_url=default_server.url, timeout=120) as client:
        yield client


def _error(response: httpx.Response, status: int, error_type: str, *needles: str) -> dict:
    assert response.status_code == status, (response.status_code, response.text[:400])
    body = response.json()
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == error_type and error["code"] == status
    for needle in needles:
        assert needle in error["message"], (needle, error["message"])
    return error


def _still_serves(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions/render", json={"messages": [USER]})
    assert response.status_code == 200 and response.json()["token_ids"]


def test_limit_defaults_are_named_and_positive() -> None:
    """Every limit has a named default (documented in the README's Security section)."""
    limits = Limits()
    assert limits.max_body_bytes == 32 * 1024 * 1024
    assert limits.max_messages == 4096 and limits.max_tools == 512
    assert limits.max_concurrent_requests == 1024
    assert limits.render_timeout_s == 30.0 and limits.max_template_output_chars == 16 * 1024 * 1024


# -- body size (413) ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/v1/chat/completions/derender", "/tokenize"])
def test_declared_oversized_body_is_413(small, path: str) -> None:  # noqa: ANN001
    content = b'{"messages": [], "pad": "' + b"x" * BODY_LIMIT + b'"}'
    response = small.post(path, content=content, headers={"content-type": "application/json"})
    _error(response, 413, "PayloadTooLargeError", f"{BODY_LIMIT} bytes", "--max-body-bytes")
    _still_serves(small)


def test_chunked_oversized_body_is_413(small) -> None:  # noqa: ANN001
    """Without Content-Length the body is counted while it is read."""

    def chunks() -> Iterator[bytes]:
        yield b'{"messages": [], "pad": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}'

    response = small.post("/v1/chat/completions/render", content=chunks(), headers={"content-type": "application/json"})
    _error(response, 413, "PayloadTooLargeError", "--max-body-bytes")
    _still_serves(small)


def test_body_at_the_limit_is_read(small) -> None:  # noqa: ANN001
    """A body of exactly the limit is parsed (here: a valid render request padded to the limit)."""
    head = b'{"messages": [{"role": "user", "content": "hi"}], "pad": "'
    content = head + b"x" * (BODY_LIMIT - len(head) - 2) + b'"}'
    assert len(content) == BODY_LIMIT
    response = small.post("/v1/chat/completions/render", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 200


# -- messages and tools (400) ------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/tokenize"])
def test_too_many_messages_is_400(small, path: str) -> None:  # noqa: ANN001
    assert small.post(path, json={"messages": [USER] * 8}).status_code == 200
    response = small.post(path, json={"messages": [USER] * 9})
    error = _error(response, 400, "BadRequestError", "9 messages", "limit is 8", "--max-messages")
    assert error["param"] == "messages"


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/tokenize"])
def test_too_many_tools_is_400(small, path: str) -> None:  # noqa: ANN001
    tools = [{"type": "function", "function": {"name": f"f{k}", "parameters": {"type": "object"}}} for k in range(4)]
    assert small.post(path, json={"messages": [USER], "tools": tools[:3]}).status_code == 200
    error = _error(small.post(path, json={"messages": [USER], "tools": tools}), 400, "BadRequestError",
                   "4 tools", "limit is 3", "--max-tools")  # fmt: skip
    assert error["param"] == "tools"


def test_derender_chat_request_counts_are_bounded(small) -> None:  # noqa: ANN001
    """The chat_request echoed to derender is held to the same message and tool limits."""
    chunk = {"request_id": "r", "choices": [{"index": 0, "token_ids": [9707]}]}
    body = {"stream": True, "generate_chunk": chunk, "chat_request": {"messages": [USER] * 9}}
    _error(small.post("/v1/chat/completions/derender", json=body), 400, "BadRequestError", "--max-messages")
    body["chat_request"] = {"messages": [USER], "tools": TOOLS * 2}
    _error(small.post("/v1/chat/completions/derender", json=body), 400, "BadRequestError", "--max-tools")


# -- prompt tokens > max_model_len (vLLM's 400) ------------------------------------------------


def test_prompt_longer_than_max_model_len_is_vllms_400(default) -> None:  # noqa: ANN001
    max_len = default.get("/v1/models").json()["data"][0]["max_model_len"]
    text = " hello" * (max_len + 100)  # one token per word
    response = default.post("/v1/chat/completions/render", json={"messages": [{"role": "user", "content": text}]})
    error = _error(response, 400, "BadRequestError", f"maximum context length is {max_len} tokens")
    assert error["param"] == "input_tokens"
    completion = default.post("/v1/completions/render", json={"prompt": text})
    _error(completion, 400, "BadRequestError", f"maximum context length is {max_len} tokens")
    _still_serves(default)


def test_max_tokens_above_the_remaining_context_is_400(default) -> None:  # noqa: ANN001
    max_len = default.get("/v1/models").json()["data"][0]["max_model_len"]
    body = {"messages": [USER], "max_tokens": max_len + 1}
    _error(default.post("/v1/chat/completions/render", json=body), 400, "BadRequestError", "max_model_len")


# -- images -------------------------------------------------------------------------------------


def test_image_parts_for_a_text_only_model_are_refused_before_any_decoding(default) -> None:  # noqa: ANN001
    """The embedded model is text-only: any image part is a clear 400 without decoding. The
    image count, pixel and byte limits are tested on an image model in
    tests/multimodal/test_image_limits.py."""
    tiny_png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    content = [{"type": "image_url", "image_url": {"url": tiny_png}}, {"type": "text", "text": "what?"}]
    response = default.post("/v1/chat/completions/render", json={"messages": [{"role": "user", "content": content}]})
    _error(response, 400, "BadRequestError", "does not take image inputs")


# -- concurrency per worker (503) ----------------------------------------------------------------

SLOW_TEMPLATE = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_saturated_worker_answers_503_then_recovers(make_app, serve) -> None:  # noqa: ANN001
    """With --max-concurrent-requests 1, a request arriving while one is in flight gets 503 with
    Retry-After; once the slow one ends (here: a template cut by a 3 s render timeout), the
    worker serves again."""
    app = make_app(limits={"max_concurrent_requests": 1, "render_timeout_s": 3.0}, trust_request_chat_template=True)
    url = serve(app).url
    slow_result: dict[str, httpx.Response] = {}

    def slow() -> None:
        body = {"messages": [USER], "chat_template": SLOW_TEMPLATE}
        slow_result["r"] = httpx.post(url + "/v1/chat/completions/render", json=body, timeout=60)

    thread = threading.Thread(target=slow)
    thread.start()
    refused = None
    with httpx.Client(base_url=url, timeout=30) as client:
        while thread.is_alive() and refused is None:
            response = client.get("/v1/models")
            if response.status_code == 503:
                refused = response
                assert client.get("/health").status_code == 200  # probes pass while saturated
            time.sleep(0.05)
        thread.join(timeout=60)
        assert refused is not None, "no 503 while a request was in flight"
        _error(refused, 503, "ServiceUnavailableError", "saturated", "retry")
        assert refused.headers["retry-after"] == "1"
        _error(slow_result["r"], 400, "BadRequestError", "timed out")
        assert client.get("/health").status_code == 200
        _still_serves(client)


# -- tool-call buffer (400 from streaming derender) ------------------------------------------------


def test_oversized_streamed_tool_call_is_a_typed_400(default, bundle) -> None:  # noqa: ANN001
    """A tool call that must be held whole (its arguments come before its name) and grows
    past the parser's buffer bound is refused with a 400, not buffered without end (the state
    would carry it on every chunk). A call in the usual order streams and holds nothing."""
    tok = bundle.hf_tokenizer
    head = tok.encode('<think>\nx\n</think>\n\n<tool_call>\n{"arguments": {"city": "',
                      add_special_tokens=False)  # fmt: skip
    filler = tok.encode("-" * 4096, add_special_tokens=False)  # a few long (~96-char) tokens
    ids = head + filler * 140 + [EOS]  # ~570k chars of one tool call in ~6k tokens
    chat = {"messages": [USER], "tools": TOOLS}
    state, last = None, None
    for k, chunk in enumerate(stream_chunks("generate-tokens-toolbuf", ids, split_sizes_fixed(len(ids), 500))):
        body = {"stream": True, "generate_chunk": chunk, "stream_state": state}
        if k == 0:
            body |= {"chat_request": chat, "prompt_token_ids": [1, 2, 3]}
        last = default.post("/v1/chat/completions/derender", json=body)
        if last.status_code != 200:
            break
        state = last.json()["stream_state"]
    assert last is not None
    _error(last, 400, "BadRequestError", "tool call")
    _still_serves(default)


def test_max_tool_call_chars_flag_lowers_the_bound(default, make_app, serve, bundle) -> None:  # noqa: ANN001
    """--max-tool-call-chars reaches the parsers: a 20k-char call held across chunks (its
    arguments come before its name) is refused under a 10k limit, with a message naming the
    flag, and accepted under the default."""
    tok = bundle.hf_tokenizer
    head = tok.encode('<tool_call>\n{"arguments": {"city": "', add_special_tokens=False)
    tail = tok.encode('"}, "name": "get_weather"}\n</tool_call>', add_special_tokens=False)
    ids = head + tok.encode("-" * 4096, add_special_tokens=False) * 5 + tail + [EOS]
    chunks = stream_chunks("generate-tokens-toolflag", ids, split_sizes_fixed(len(ids), 20))
    chat = {"messages": [USER], "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}}

    def run(client: httpx.Client) -> httpx.Response:
        state, response = None, None
        for k, chunk in enumerate(chunks):
            body = {"stream": True, "generate_chunk": chunk, "stream_state": state}
            if k == 0:
                body |= {"chat_request": chat, "prompt_token_ids": [1, 2, 3]}
            response = client.post("/v1/chat/completions/derender", json=body)
            if response.status_code != 200:
                break
            state = response.json()["stream_state"]
        assert response is not None
        return response

    assert run(default).status_code == 200
    with httpx.Client(base_url=serve(make_app(limits={"max_tool_call_chars": 10_000})).url, timeout=60) as limited:
        _error(run(limited), 400, "BadRequestError", "--max-tool-call-chars")


def split_sizes_fixed(n: int, size: int) -> list[int]:
    return [size] * (n // size) + ([n % size] if n % size else [])


def test_parser_flags_match_the_cli_default() -> None:
    """These tests run the configuration `render-service serve` uses for the embedded model."""
    from render_service.cli import DEFAULT_MODEL_PARSERS

    assert PARSER_FLAGS["reasoning_parser"] == DEFAULT_MODEL_PARSERS["reasoning_parser"]
    assert PARSER_FLAGS["tool_call_parser"] == DEFAULT_MODEL_PARSERS["tool_call_parser"]
