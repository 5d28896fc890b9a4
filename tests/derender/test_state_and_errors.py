"""stream_state: compact, bound to its stream, tamper-evident; and every bad-input path."""

from __future__ import annotations

import base64
import zlib

import orjson
import pytest

from render_service.errors import (
    BadRequestError,
    ConfigMismatchError,
    NotFoundError,
    StreamStateError,
)

from .conftest import PARSER_FLAGS, SECRET
from .helpers import EOS, REQUEST_ID, batch_chat, chat_request, stream


def _first(d, tok, **extra):  # noqa: ANN001, ANN003, ANN202
    ids = tok.encode("hello there", add_special_tokens=False)
    body = {"stream": True, "generate_chunk": {"request_id": REQUEST_ID, "choices": [
        {"index": 0, "token_ids": ids}]}, **extra}  # fmt: skip
    return d.derender_chat(body), ids


def _next(d, state, request_id=REQUEST_ID, index=0, **extra):  # noqa: ANN001, ANN003, ANN202
    return d.derender_chat({"stream": True, "stream_state": state, "generate_chunk": {
        "request_id": request_id, "choices": [{"index": index, "token_ids": [11]}]}, **extra})  # fmt: skip


def _tamper(state: dict, fn) -> dict:  # noqa: ANN001
    version, payload, mac = state["rs"].split(".")
    return {"rs": fn(version, payload, mac)}


def test_state_roundtrip_and_shape(plain, tok):  # noqa: ANN001
    first, _ = _first(plain, tok)
    assert set(first["stream_state"]) == {"rs"}
    assert _next(plain, first["stream_state"])["chunk"]["choices"][0]["delta"]["content"] == ","


@pytest.mark.parametrize(
    ("name", "mutate", "message"),
    [
        ("forged", lambda v, p, m: f"{v}.{p}.{'A' * len(m)}", "signature mismatch"),
        ("altered-payload", lambda v, p, m: f"{v}.{p[:-2]}AA.{m}", "signature mismatch"),
        ("truncated", lambda v, p, m: f"{v}.{p[: len(p) // 2]}", "malformed"),
        ("foreign-version", lambda v, p, m: f"9.{p}.{m}", "version"),
    ],
)
def test_bad_state_is_400(plain, tok, name, mutate, message):  # noqa: ANN001
    first, _ = _first(plain, tok)
    with pytest.raises(StreamStateError, match=message):
        _next(plain, _tamper(first["stream_state"], mutate))


def test_state_replayed_into_other_request_or_choice(plain, tok):  # noqa: ANN001
    first, _ = _first(plain, tok)
    with pytest.raises(StreamStateError, match="signature mismatch"):
        _next(plain, first["stream_state"], request_id="another-request")
    with pytest.raises(StreamStateError, match="signature mismatch"):
        _next(plain, first["stream_state"], index=1)
    with pytest.raises(StreamStateError):
        plain.derender_completion({"stream": True, "stream_state": first["stream_state"],
            "generate_chunk": {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": [11]}]}})  # fmt: skip


def test_state_from_a_replica_with_another_secret(plain, bundle, tok):  # noqa: ANN001
    from render_service.config import ServiceConfig
    from render_service.derender_api import Derenderer

    from .conftest import _BundleRenderer

    first, _ = _first(plain, tok)
    foreign = Derenderer(ServiceConfig(stream_state_secret=SECRET + "x"), _BundleRenderer(bundle))
    with pytest.raises(StreamStateError, match="signature mismatch"):
        _next(foreign, first["stream_state"])


@pytest.mark.parametrize(
    "state",
    [
        {"prev_tokens": [], "prefix_offset": 0, "read_offset": 0, "role_sent": True},  # vLLM's
        {"rs": 123},
        "opaque",
        {"rs": "1.x.y", "extra": 1},
    ],
)
def test_vllm_format_or_garbage_state_is_400(plain, state):  # noqa: ANN001
    with pytest.raises(StreamStateError):
        _next(plain, state)


def test_signed_but_corrupt_payload_is_400(plain):  # noqa: ANN001
    codec = plain.ctx.envelope.codec
    binding = f"chat\x1f{REQUEST_ID}\x1f0\x1f{plain.ctx.fingerprint}"
    wire = codec.encode({"kind": "chat", "index": 0, "unexpected": 1}, binding=binding)
    with pytest.raises(StreamStateError, match="invalid stream_state"):
        _next(plain, wire)


def test_usage_only_chunk_verifies_claimed_index(plain, tok):  # noqa: ANN001
    first, _ = _first(plain, tok)
    usage = {"stream": True, "stream_state": first["stream_state"], "generate_chunk": {
        "request_id": REQUEST_ID, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}}  # fmt: skip
    assert plain.derender_chat(usage)["chunk"]["usage"]["total_tokens"] == 3
    forged = _tamper(first["stream_state"], lambda v, p, m: f"{v}.{p}.{'B' * len(m)}")
    with pytest.raises(StreamStateError):
        plain.derender_chat({**usage, "stream_state": forged})


def test_state_size_does_not_grow_with_prompt_or_output(make_derenderer, tok):  # noqa: ANN001
    d = make_derenderer(**PARSER_FLAGS)
    prompt = (tok.encode("The history of the world, part one. ", add_special_tokens=False) * 4000)[:32000]
    text = "<think>\n" + "Reasoning step with 中文 and 😀 emoji. " * 300 + "</think>\n\nAnswer. " * 200
    ids = tok.encode(text, add_special_tokens=False)[:4000]
    req = chat_request(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    body = {"chat_request": req, "prompt_token_ids": prompt}
    chunks = stream(d.derender_chat, ids, [1] * len(ids), finish=None, first_body=body)
    sizes = [len(orjson.dumps(c["stream_state"])) for c in chunks]
    assert max(sizes) < 2048, max(sizes)
    assert max(sizes[-500:]) <= max(sizes[:500]) + 64  # no growth with the output


def test_model_and_fingerprint_checks(plain, tok):  # noqa: ANN001
    ids = tok.encode("hi", add_special_tokens=False) + [EOS]
    with pytest.raises(NotFoundError, match="does not exist"):
        batch_chat(plain, ids, model="other-model")
    assert batch_chat(plain, ids, model="Qwen/Qwen3-8B")["model"] == "Qwen/Qwen3-8B"
    good = plain.ctx.fingerprint
    assert batch_chat(plain, ids, render_fingerprint=good)["choices"]
    with pytest.raises(ConfigMismatchError, match="does not match"):
        batch_chat(plain, ids, render_fingerprint="0000")
    with pytest.raises(ConfigMismatchError):
        batch_chat(plain, ids, parse_context={"render_fingerprint": "0000"})
    with pytest.raises(ConfigMismatchError):
        batch_chat(plain, ids, chat_request=chat_request(parse_context={"render_fingerprint": "0"}))
    with pytest.raises(ConfigMismatchError):
        _first(plain, tok, render_fingerprint="0000")


def _gen(choices, **extra):  # noqa: ANN001, ANN003, ANN202
    return {"generate_response": {"request_id": "r", "choices": choices, **extra}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_gen([{"index": 0, "token_ids": []}]), "choice 0 has empty or null token_ids"),
        (_gen([{"index": 0, "token_ids": None}]), "choice 0 has empty or null token_ids"),
        (_gen([{"index": 0, "token_ids": [1] * 40961}]), "token_ids length .* max_model_len"),
        (_gen([{"index": 0, "token_ids": [1], "logprobs": {"content": [
            {"token_id": 1, "logprob": 0.0, "top_logprobs": [{"token_id": 1, "logprob": 0.0}] * 21}]}}]),
         "top_logprobs count .* max_logprobs"),  # fmt: skip
        (_gen([{"index": 0, "token_ids": [1], "logprobs": {"content": [
            {"token_id": 1, "logprob": 0.0}] * 40961}}]), "logprobs.content length"),  # fmt: skip
        (_gen([{"index": 0, "token_ids": [1]}], prompt_logprobs=[None] * 40961), "prompt_logprobs length"),
        ({**_gen([{"index": 0, "token_ids": [1]}]), "prompt_token_ids": [1] * 40961},
         "prompt_token_ids length"),  # fmt: skip
        (_gen([{"index": i, "token_ids": [1]} for i in range(16385)]), "choices count"),
        (_gen([{"index": 0, "token_ids": [-1]}]), "validation error"),
        (_gen([{"index": 0, "token_ids": [1]}], output_mode="text"), "validation error"),
        ({"generate_response": {"choices": "x"}}, "validation error"),
        ({}, "validation error"),
        ({"stream": "yes", **_gen([{"index": 0, "token_ids": [1]}])}, "validation error"),
        (_gen([{"index": 0, "token_ids": [1], "logprobs": {"content": [
            {"token": "hello", "logprob": 0.0}]}}]), "token_id"),  # fmt: skip
        ({**_gen([{"index": 0, "token_ids": [1]}]), "chat_request": {"messages": "x"}}, "validation"),
    ],
)
def test_bad_batch_inputs_are_400(plain, body, message):  # noqa: ANN001
    with pytest.raises(BadRequestError, match=message):
        plain.derender_chat(body)


@pytest.mark.parametrize(
    ("chunk", "extra", "message"),
    [
        ({"choices": [{"index": 0, "token_ids": [1]}, {"index": 1, "token_ids": [1]}]}, {},
         "at most one choice per chunk"),  # fmt: skip
        ({"choices": [{"index": 0, "token_ids": [1] * 20}]}, {"prompt_token_ids": [1] * 40950},
         "exceeds max_model_len"),  # fmt: skip
        ({"choices": [{"index": 0, "token_ids": [1]}], "output_mode": "text"}, {}, "validation"),
    ],
)
def test_bad_stream_inputs_are_400(plain, chunk, extra, message):  # noqa: ANN001
    body = {"stream": True, "generate_chunk": {"request_id": "r", **chunk}, **extra}
    with pytest.raises(BadRequestError, match=message):
        plain.derender_chat(body)


def test_max_model_len_bound_uses_state_counters(plain, tok):  # noqa: ANN001
    first = plain.derender_chat({"stream": True, "prompt_token_ids": [1] * 40950, "generate_chunk": {
        "request_id": "r", "choices": [{"index": 0, "token_ids": [1] * 10}]}})  # fmt: skip
    with pytest.raises(BadRequestError, match="exceeds max_model_len"):
        plain.derender_chat({"stream": True, "stream_state": first["stream_state"],
            "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [1]}]}})  # fmt: skip


def test_state_payload_is_compressed_json(plain, tok):  # noqa: ANN001
    first, _ = _first(plain, tok)
    payload = first["stream_state"]["rs"].split(".")[1]
    data = orjson.loads(zlib.decompress(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))
    assert data["kind"] == "chat" and data["index"] == 0 and "detok" in data


@pytest.mark.parametrize("path", ["derender_chat", "derender_completion"])
def test_negative_choice_index_is_400_on_first_stream_chunk(plain, path: str) -> None:  # noqa: ANN001
    """A negative choice index (found by schema fuzzing) is a validation 400, not a 500."""
    chunk = {"request_id": REQUEST_ID, "choices": [{"index": -3, "token_ids": [1], "finish_reason": None}]}
    with pytest.raises(BadRequestError, match="validation"):
        getattr(plain, path)({"stream": True, "generate_chunk": chunk, "stream_state": None})
