"""`usage.completion_tokens_details.reasoning_tokens` through the gateway (real codec, scripted
engine): where vLLM 0.33's chat serving puts it (openai/chat_completion/serving.py: the
non-streamed usage, the include_usage chunk, every continuous_usage_stats chunk including the
role chunk), and that the stream runs the live count (vLLM's parser-engine quirks) while the
non-streamed response runs the token-level one. The counts themselves are checked against
vLLM's own parser objects in tests/parsers/test_reasoning_tokens.py; the parity with a real
`vllm serve` is tests/service/test_gateway_serve_parity.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import EOS_ID, ScriptedEngine
from tests.harness.tiny_model import tiny_qwen3_dir

from .conftest import FAST_TIMEOUTS
from .e2e_support import Scripts, service_config
from .test_gateway_flow import sse_payloads

MODEL = "tiny-qwen3"
THINK, END_THINK = "<think>", "</think>"
REASONING = "\nThe capital is Paris.\n"
USAGE = {"include_usage": True, "continuous_usage_stats": True}


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return tiny_qwen3_dir()


@pytest.fixture(scope="module")
def codec(model_dir: Path) -> InProcessCodec:
    return InProcessCodec(service_config(model_dir))


@pytest.fixture(scope="module")
def scripts(model_dir: Path) -> Scripts:
    return Scripts(model_dir)


@asynccontextmanager
async def gateway(codec: InProcessCodec) -> AsyncIterator[httpx.AsyncClient]:
    engines = {"http://e0": ScriptedEngine("http://e0")}
    config = GatewayConfig(engines=tuple(engines), timeouts=FAST_TIMEOUTS,
                           health=HealthSettings(interval_s=60))
    app = create_gateway_app(service_config(tiny_qwen3_dir()), config, codec=codec,
                             client_factory=engines.__getitem__)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield client


def chat(scripts: Scripts, text: str, *, thinking: bool = True, **extra: object) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Capital of France?"}],
            **scripts.xargs(text, thinking=thinking), **extra}
    return body


def between_markers(scripts: Scripts, text: str) -> int:
    """Tokens strictly between <think> and </think>: what vLLM counts for plain text."""
    ids = scripts.ids(text)
    start = scripts.ids(THINK)[0]
    end = scripts.ids(END_THINK)[0]
    first = ids.index(start) + 1 if start in ids else 0
    return ids.index(end) - first


async def test_non_streamed_usage_counts_reasoning_per_choice_summed(codec, scripts) -> None:
    text = f"{THINK}{REASONING}{END_THINK}\n\nParis."
    async with gateway(codec) as client:
        one = (await client.post("/v1/chat/completions", json=chat(scripts, text))).json()
        two = (await client.post("/v1/chat/completions", json=chat(scripts, text, n=2))).json()
        off = (await client.post("/v1/chat/completions",
                                 json=chat(scripts, "Paris.", thinking=False))).json()
    expected = between_markers(scripts, text)
    assert expected > 0
    assert one["usage"]["completion_tokens_details"] == {"reasoning_tokens": expected}
    assert list(one["usage"])[-1] == "completion_tokens_details"
    assert two["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2 * expected}
    assert off["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


async def test_stream_usage_on_role_every_chunk_and_final(codec, scripts) -> None:
    text = f"{THINK}{REASONING}{END_THINK}\n\nParis."
    async with gateway(codec) as client:
        raw = (await client.post("/v1/chat/completions", json=chat(
            scripts, text, stream=True, n=2, stream_options=USAGE))).content
    chunks = [orjson.loads(p) for p in sse_payloads(raw)[:-1]]
    role = [c for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]]
    assert [c["usage"]["completion_tokens_details"] for c in role] == [{"reasoning_tokens": 0}] * 2
    expected = between_markers(scripts, text)
    for index in (0, 1):
        counts = [c["usage"]["completion_tokens_details"]["reasoning_tokens"] for c in chunks
                  if c["choices"] and c["choices"][0]["index"] == index]
        assert counts == sorted(counts) and counts[-1] == expected
    final = chunks[-1]
    assert final["choices"] == []
    assert final["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2 * expected}


async def test_stream_without_usage_options_has_no_usage(codec, scripts) -> None:
    async with gateway(codec) as client:
        raw = (await client.post("/v1/chat/completions", json=chat(
            scripts, f"{THINK}a{END_THINK}b", stream=True))).content
    assert not any('"usage"' in p for p in sse_payloads(raw))


async def test_stream_count_drops_steps_without_text_like_vllm(codec, scripts) -> None:
    """Characters split over several tokens: each step but the last has no text, and vLLM's
    streaming parser engine counts only tokens whose step had text, so the streamed count
    is below the non-streamed one (tests/parsers/test_reasoning_tokens.py shows vLLM does)."""
    text = f"{THINK}ꙮ𝒳🫠 ok{END_THINK}done"
    assert len(scripts.ids("ꙮ𝒳🫠")) > 3  # really split
    async with gateway(codec) as client:
        batch = (await client.post("/v1/chat/completions", json=chat(scripts, text))).json()
        raw = (await client.post("/v1/chat/completions", json=chat(
            scripts, text, stream=True, stream_options={"include_usage": True}))).content
    streamed = orjson.loads(sse_payloads(raw)[-2])["usage"]["completion_tokens_details"]
    batch_count = batch["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert batch_count == between_markers(scripts, text)
    assert 0 < streamed["reasoning_tokens"] < batch_count


async def test_hermes_tool_call_delta_has_null_content(codec, scripts) -> None:
    """vLLM 0.33's Hermes2ProToolParser sets content=None on its tool-call deltas."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    async with gateway(codec) as client:
        raw = (await client.post("/v1/chat/completions", json=chat(
            scripts, call, thinking=False, stream=True, tools=[tool]))).content
    deltas = [orjson.loads(p)["choices"][0]["delta"] for p in sse_payloads(raw)[:-1]]
    with_calls = [d for d in deltas if "tool_calls" in d]
    assert with_calls and all(list(d)[:2] == ["content", "tool_calls"] and d["content"] is None
                              for d in with_calls)


def test_scripted_engine_ends_with_the_model_eos(scripts) -> None:
    assert scripts.tokenizer.id_to_token(EOS_ID) == "<|im_end|>"
