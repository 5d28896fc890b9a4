"""The collocated and P/D flows over scripted engines: bodies sent, SSE bytes, n > 1, stops."""

from __future__ import annotations

import json

import orjson

from render_service.gateway.testing import EOS_ID, ScriptedEngine

from .conftest import fake_engines, running_gateway
from .gateway_fakes import MODEL, ids_of


def sse_payloads(raw: bytes) -> list[str]:
    """Split an SSE body, checking the exact `data: ...\\n\\n` framing vLLM serve uses."""
    assert raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    payloads = []
    for event in events[:-1]:
        assert event.startswith(b"data: ") and b"\n" not in event
        payloads.append(event[len(b"data: "):].decode())
    return payloads


def chat(content: str = "hi", **extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


async def test_streaming_chat_bytes_match_vllm_serve_shape() -> None:
    """Role chunk, one chunk per token, final chunk, [DONE]; serve's keys in serve's order."""
    engines = fake_engines("http://e0", tokens=ids_of("Hey"))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, request_id="r1"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    payloads = sse_payloads(response.content)
    assert payloads[-1] == "[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    head = {"id": "chatcmpl-r1", "object": "chat.completion.chunk", "created": chunks[0]["created"],
            "model": MODEL}
    assert chunks[0] == {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "logprobs": None, "finish_reason": None}],
                         "prompt_token_ids": None, "prompt_text": None}
    assert list(chunks[1]) == ["id", "object", "created", "model", "choices", "kv_transfer_params"]
    assert [c["choices"][0]["delta"] for c in chunks[1:]] == [
        {"content": "H"}, {"content": "e"}, {"content": "y"}, {"content": ""}]
    final = chunks[-1]["choices"][0]
    assert list(final) == ["index", "delta", "logprobs", "finish_reason", "stop_reason",
                           "token_ids", "weight_versions"]
    assert final["finish_reason"] == "stop"
    assert all(c["created"] == head["created"] and c["id"] == "chatcmpl-r1" for c in chunks)
    # The engine got the rendered ids as a tokens-only stream, with no stop strings or model.
    (call,) = engines["http://e0"].calls
    assert call.kind == "stream" and call.body["token_ids"] == ids_of("hi")
    assert call.body["model"] is None and "stop" not in call.body["sampling_params"]


async def test_usage_chunk_is_last_before_done() -> None:
    """stream_options.include_usage: a choices=[] chunk with the counts, exclude_none style."""
    engines = fake_engines("http://e0", tokens=ids_of("ab"))
    async with running_gateway(engines) as h:
        body = chat(stream=True, stream_options={"include_usage": True})
        response = await h.client.post("/v1/chat/completions", json=body)
    usage = orjson.loads(sse_payloads(response.content)[-2])
    assert usage["choices"] == [] and list(usage) == ["id", "object", "created", "model", "choices",
                                                      "usage", "system_fingerprint"]
    assert usage["usage"] == {"prompt_tokens": 2, "total_tokens": 5, "completion_tokens": 3}


async def test_non_streaming_chat_and_completion() -> None:
    """JSON in, derendered JSON out, with vLLM serve's ids."""
    engines = fake_engines("http://e0", tokens=ids_of("ok"))
    async with running_gateway(engines) as h:
        r = await h.client.post("/v1/chat/completions", json=chat(request_id="x"))
        c = await h.client.post("/v1/completions", json={"model": MODEL, "prompt": ["a", "bc"],
                                                         "request_id": "y"})
    assert r.status_code == 200 and r.json()["id"] == "chatcmpl-x"
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert c.status_code == 200 and c.json()["id"] == "cmpl-y"
    assert [ch["text"] for ch in c.json()["choices"]] == ["ok", "ok"]
    assert [call.kind for call in engines["http://e0"].calls] == ["generate"] * 3


async def test_streaming_completion_n2_two_prompts_flat_indexes() -> None:
    """Completions with 2 prompts x n=2: choices indexed prompt * n + choice, like serve."""
    engines = fake_engines("http://e0", tokens=ids_of("z"))
    async with running_gateway(engines) as h:
        body = {"model": MODEL, "prompt": ["p", "q"], "n": 2, "stream": True}
        response = await h.client.post("/v1/completions", json=body)
    chunks = [orjson.loads(p) for p in sse_payloads(response.content)[:-1]]
    finals = sorted(c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"])
    assert finals == [0, 1, 2, 3]
    assert list(chunks[0]["choices"][0]) == ["index", "text", "logprobs", "finish_reason", "stop_reason",
                                             "prompt_token_ids", "token_ids", "weight_versions"]
    assert len({c["id"] for c in chunks}) == 1


async def test_chat_n2_streams_each_choice() -> None:
    """n = 2: a role chunk per choice, then each choice's tokens with its own index."""
    def by_index(body: dict, index: int) -> list[int]:
        return ids_of("A" if index == 0 else "BB")

    engines = {"http://e0": ScriptedEngine("http://e0", tokens=by_index)}
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True, n=2))
    chunks = [orjson.loads(p) for p in sse_payloads(response.content)[:-1]]
    text = {0: "", 1: ""}
    for c in chunks:
        choice = c["choices"][0]
        text[choice["index"]] += choice["delta"].get("content", "")
    assert text == {0: "A", 1: "BB"}
    assert [c["choices"][0]["delta"].get("role") for c in chunks[:2]] == ["assistant", "assistant"]


async def test_stop_string_cuts_exactly_and_aborts_engine_at_once() -> None:
    """A stop string ends the choice at the match and aborts the engine request right away."""
    engines = fake_engines("http://e0", tokens=ids_of("one two three four five"))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions",
                                       json=chat(stream=True, stop=["thr"], request_id="s1"))
        await h.settle()
    chunks = [orjson.loads(p) for p in sse_payloads(response.content)[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "one two "
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"][0]["stop_reason"] == "thr"
    engine = engines["http://e0"]
    assert engine.aborts == ["generate-tokens-chatcmpl-s1"] and not engine.live


async def test_non_streaming_stop_string_streams_engine_and_aborts() -> None:
    """Non-streaming + stop: the engine is streamed so the match can stop it; text cut exactly."""
    engines = fake_engines("http://e0", tokens=ids_of("alpha beta gamma"))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stop="bet", request_id="s2"))
        await h.settle()
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == "alpha " and choice["finish_reason"] == "stop"
    assert engines["http://e0"].calls[0].kind == "stream"
    assert engines["http://e0"].aborts == ["generate-tokens-chatcmpl-s2"]


async def test_non_streaming_stop_string_keeps_prompt_logprobs() -> None:
    """prompt_logprobs come only in a JSON engine answer: with a stop string the gateway asks for
    JSON, and cuts the answer at the match exactly as the streamed scan would."""
    engines = fake_engines("http://e0", tokens=ids_of("alpha beta gamma"))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(
            "hey", stop="bet", prompt_logprobs=1, request_id="pl"))
    body = response.json()
    (call,) = engines["http://e0"].calls
    assert call.kind == "generate" and call.body["sampling_params"]["prompt_logprobs"] == 1
    assert body["prompt_logprobs"] == [None, {str(ord("e")): {"logprob": -1.0, "rank": 1, "decoded_token": None}},
                                       {str(ord("y")): {"logprob": -1.0, "rank": 1, "decoded_token": None}}]
    choice = body["choices"][0]
    assert choice["message"]["content"] == "alpha " and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == "bet"
    assert body["usage"]["completion_tokens"] == len("alpha bet")  # counted up to the match


async def test_pd_flow_prefill_then_decode_with_kv_params() -> None:
    """P/D: prefill max_tokens=1 non-streaming with do_remote_decode; decode gets its KV params."""
    engines = fake_engines("http://p0", "http://d0", tokens=ids_of("pd"))
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0",)) as h:
        response = await h.client.post("/v1/chat/completions",
                                       json=chat(stream=True, n=2, min_tokens=1, request_id="pd1"))
    assert response.status_code == 200
    (prefill,) = engines["http://p0"].calls
    assert prefill.kind == "generate" and prefill.body["stream"] is False
    assert prefill.body["sampling_params"]["max_tokens"] == 1
    assert prefill.body["sampling_params"]["n"] == 1
    assert "min_tokens" not in prefill.body["sampling_params"]
    assert prefill.body["kv_transfer_params"]["do_remote_decode"] is True
    assert prefill.body["kv_transfer_params"]["do_remote_prefill"] is False
    (decode,) = engines["http://d0"].calls
    assert decode.kind == "stream" and decode.body["token_ids"] == prefill.body["token_ids"]
    assert decode.body["kv_transfer_params"]["do_remote_prefill"] is True
    assert decode.body["kv_transfer_params"]["remote_engine_id"] == "http://p0"
    assert decode.body["sampling_params"]["n"] == 2


def scraped(text: str, name: str, **labels: str) -> float:
    """One sample's value from a /metrics exposition (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


async def test_models_health_metrics_routes() -> None:
    """GET /v1/models and /health answer; /metrics exposes the gateway's samples, which one
    streaming request moves (and the in-flight gauge is back to 0 after it)."""
    series = [("render_service_gateway_phase_duration_seconds_count", {"phase": "render"}),
              ("render_service_gateway_time_to_first_token_seconds_count", {"endpoint": "chat"}),
              ("render_service_gateway_engine_requests_total",
               {"engine": "http://e0", "pool": "collocated"})]
    async with running_gateway(fake_engines("http://e0")) as h:
        before = (await h.client.get("/metrics")).text
        await h.client.post("/v1/chat/completions", json=chat(stream=True))
        models = await h.client.get("/v1/models")
        health = await h.client.get("/health")
        after = (await h.client.get("/metrics")).text
    assert models.json()["data"][0]["id"] == MODEL
    assert health.status_code == 200
    for name, labels in series:
        assert scraped(after, name, **labels) == scraped(before, name, **labels) + 1, name
    assert scraped(after, "render_service_gateway_requests_in_flight") == 0


def test_error_event_shapes_match_vllm() -> None:
    """Chat errors are compact JSON (model_dump_json); completions use json.dumps spacing."""
    from render_service.gateway.serve_format import completion_error_event
    from render_service.gateway.sse import encode_error_event

    assert encode_error_event("boom", "InternalServerError", 500) == (
        b'data: {"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}\n\n')
    body = {"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}}
    assert completion_error_event("boom", "InternalServerError", 500) == (
        f"data: {json.dumps(body)}\n\n".encode())


def test_eos_constant_matches_qwen3() -> None:
    """The fake engine ends scripts with Qwen3's <|im_end|>, like the real scripted engine."""
    assert EOS_ID == 151645


def test_engine_body_restores_omitted_default_max_tokens() -> None:
    """Rendered sampling_params omit max_tokens=16 (msgspec omit_defaults); the engine must get it."""
    from render_service.gateway.context import Leg, engine_body, prefill_body

    rendered = {"request_id": "chatcmpl-a", "token_ids": [1, 2],
                "sampling_params": {"stop": ["x"], "min_tokens": 2, "seed": 1}}
    decode = engine_body(Leg(0, rendered), stream=True, request_id="chatcmpl-a")
    assert decode["sampling_params"] == {"min_tokens": 2, "seed": 1, "max_tokens": 16}
    assert prefill_body(Leg(0, rendered))["sampling_params"] == {"seed": 1, "max_tokens": 1, "n": 1}
