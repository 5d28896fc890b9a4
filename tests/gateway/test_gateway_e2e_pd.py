"""End to end over a real prefill + decode pair (NIXL, CPU KV buffers), openai SDK as client.

Token-for-token check: the same rendered request, seeded, sent straight to the decode engine
(which then prefills locally, i.e. collocated) must give the tokens the gateway's P/D path
gives; the decode engine's metrics must show the prompt's KV arrived over the connector.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY

from render_service.gateway.config import HealthSettings
from render_service.gateway.context import Leg, engine_body
from tests.harness.engine_api import generate, metrics_text

from .e2e_support import dead_url, running

pytestmark = pytest.mark.engine

MODEL = "tiny-qwen3"
PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper " * 6}]


# A prefill engine busy with a first NIXL handshake on 2 loaded cores can answer /health slowly;
# one slow probe must not send the request down the recompute path the KV check then fails.
PATIENT_HEALTH = HealthSettings(interval_s=0.5, timeout_s=5.0, failure_threshold=3)


@pytest.fixture(scope="module")
def pd_gw(e2e_config, e2e_codec, pd_engines):  # type: ignore[no-untyped-def]
    with running(e2e_config, e2e_codec, prefill=(pd_engines.prefill_url,),
                 decode=(pd_engines.decode_url,), health=PATIENT_HEALTH) as gateway:
        _warm_nixl_handshake(gateway, pd_engines.decode_url)
        yield gateway


def _warm_nixl_handshake(gateway, decode_url: str, attempts: int = 3) -> None:  # type: ignore[no-untyped-def]
    """The first P/D request makes decode handshake with prefill over NIXL; on a loaded 2-core
    machine that handshake can time out (vLLM then recomputes on decode, correctly but without
    pulling KV). Warm it up until one transfer pulled KV, so the tests see a settled pair."""
    for _ in range(attempts):
        gateway.client().chat.completions.create(model=MODEL, messages=PROMPT, max_tokens=2)
        if kv_pulled_tokens(decode_url) > 0:
            return


def kv_pulled_tokens(decode_url: str) -> float:
    """Prompt tokens the decode engine did not compute itself (KV from the connector)."""
    text = metrics_text(decode_url)
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prompt_tokens_by_source_total{") and 'source="external_kv_transfer"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_pd_seeded_output_equals_collocated(pd_gw, e2e_codec, pd_engines) -> None:  # type: ignore[no-untyped-def]
    """P/D through the gateway = the decode engine alone, token for token; KV was pulled."""
    body = {"model": MODEL, "messages": PROMPT, "seed": 7, "max_tokens": 24, "temperature": 1.0,
            "return_token_ids": True, "ignore_eos": True}
    pulled_before = kv_pulled_tokens(pd_engines.decode_url)
    extra = {k: body[k] for k in ("return_token_ids", "ignore_eos")}
    out = pd_gw.client().chat.completions.create(
        **{k: v for k, v in body.items() if k not in extra}, extra_body=extra)
    pd_tokens = out.choices[0].model_extra["token_ids"]
    rendered = e2e_codec.render_chat({**body, "request_id": "direct-pd-ref"}, None)
    reference = generate(pd_engines.decode_url,
                         engine_body(Leg(0, rendered), stream=False, request_id="direct-pd-ref"))
    assert pd_tokens == reference["choices"][0]["token_ids"]
    assert len(pd_tokens) == 24
    assert kv_pulled_tokens(pd_engines.decode_url) >= pulled_before + len(rendered["token_ids"]) - 16


def test_pd_streaming_equals_batch(pd_gw) -> None:  # type: ignore[no-untyped-def]
    """Streaming over P/D assembles to the non-streaming answer (same seed)."""
    client = pd_gw.client()
    extra = {"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
    batch = client.chat.completions.create(model=MODEL, messages=PROMPT, seed=11, max_tokens=16,
                                           extra_body=extra)
    stream = client.chat.completions.create(model=MODEL, messages=PROMPT, seed=11, max_tokens=16,
                                            stream=True, extra_body=extra)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == batch.choices[0].message.content


def test_pd_scripted_tool_call_stream(pd_gw, scripts) -> None:  # type: ignore[no-untyped-def]
    """A scripted tool call streamed over P/D (the script runs on the decode side)."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}
    text = '<tool_call>\n{"name": "lookup", "arguments": {"q": "nixl"}}\n</tool_call>'
    stream = pd_gw.client().chat.completions.create(
        model=MODEL, messages=PROMPT, tools=[tool], stream=True, extra_body=scripts.xargs(text))
    name, args = "", ""
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                name += (call.function.name or "") if call.function else ""
                args += (call.function.arguments or "") if call.function else ""
    assert name == "lookup" and json.loads(args) == {"q": "nixl"}


def test_pd_n2(pd_gw) -> None:  # type: ignore[no-untyped-def]
    """n = 2 over P/D: both choices come back complete."""
    out = pd_gw.client().chat.completions.create(model=MODEL, messages=PROMPT, n=2, seed=3,
                                                 max_tokens=8, extra_body={"ignore_eos": True})
    assert sorted(c.index for c in out.choices) == [0, 1]
    assert all(c.finish_reason == "length" for c in out.choices)


def test_prefill_engine_down_recomputes_on_decode(e2e_config, e2e_codec, pd_engines, scripts) -> None:  # type: ignore[no-untyped-def]
    """The prefill pool is unreachable: the decode engine answers alone (recomputed prompt)."""
    before = REGISTRY.get_sample_value("render_service_gateway_recompute_fallbacks_total") or 0
    with running(e2e_config, e2e_codec, prefill=(dead_url(),), decode=(pd_engines.decode_url,)) as gw:
        out = gw.client().chat.completions.create(model=MODEL, messages=PROMPT,
                                                  extra_body=scripts.xargs("Still here."))
        gw.wait_idle()
    assert out.choices[0].message.content == "Still here."
    assert REGISTRY.get_sample_value("render_service_gateway_recompute_fallbacks_total") == before + 1
