"""The gateway on a gpt-oss (Harmony) folder, in-process codec over the engine stand-in.

The engine must get the prompt ids and stop tokens of our own Harmony render (which
tests/render/test_harmony_vllm_differential.py proves equal to vLLM 0.33's), and realistic
Harmony outputs (analysis then final; a commentary call to functions.get_weather; an output
cut by max_tokens) must come back as reasoning, content and tool calls, the stream adding up
to the batch. /v1/messages is served on the same path; /v1/responses is a typed 501.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import ScriptedEngine
from tests.harness.engine_api import generate
from tests.harness.engines import EngineFleet, tokens_only_spec
from tests.harness.tiny_gpt_oss_model import tiny_gpt_oss_dir
from tests.parsers.tokenizers_util import gpt_oss
from tests.render.test_harmony_vllm_differential import START_DATE, WEATHER, write_gpt_oss_folder

from .conftest import FAST_TIMEOUTS

RETURN, CALL = 200002, 200012  # <|return|>, <|call|>: the engine's stop token ends the output
A, S = "<|channel|>analysis<|message|>", "<|start|>assistant"
REASON_FINAL = f"{A}The user asks about Paris. Answer briefly.<|end|>{S}<|channel|>final<|message|>It is sunny in Paris."
TOOL_CALL = (f"{A}Need the weather tool.<|end|>{S}<|channel|>commentary to=functions.get_weather "
             '<|constrain|>json<|message|>{"city": "Paris", "unit": "celsius"}')  # fmt: skip
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gpt_oss_folder(tmp_path_factory.mktemp("gpt-oss-gateway"))


@pytest.fixture(autouse=True)
def _start_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", START_DATE)  # the same system message for both renders


@asynccontextmanager
async def _gateway(model_dir: Path, output: str, stop_id: int
                   ) -> AsyncIterator[tuple[httpx.AsyncClient, ScriptedEngine, InProcessCodec]]:
    config = ServiceConfig(model=str(model_dir), tool_call_parser="openai", enable_auto_tool_choice=True)
    codec = InProcessCodec(config)
    engine = ScriptedEngine("http://e0", tokens=gpt_oss().encode(output), eos_id=stop_id)
    gateway_config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS, health=HealthSettings(interval_s=60))
    app = create_gateway_app(config, gateway_config, codec=codec, client_factory={"http://e0": engine}.__getitem__)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            yield client, engine, codec


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]


def _folded(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat stream's deltas joined into one message (tool-call arguments by index)."""
    folded: dict[str, Any] = {"reasoning": "", "content": "", "calls": {}, "finish_reason": None}
    for event in events:
        for choice in event["choices"]:
            delta = choice["delta"]
            folded["reasoning"] += delta.get("reasoning") or ""
            folded["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = folded["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                slot["name"] += call["function"].get("name") or ""
                slot["arguments"] += call["function"].get("arguments") or ""
            folded["finish_reason"] = choice.get("finish_reason") or folded["finish_reason"]
    return folded


def _batch_view(body: dict[str, Any]) -> dict[str, Any]:
    choice = body["choices"][0]
    message = choice["message"]
    calls = {i: {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for i, c in enumerate(message.get("tool_calls") or [])}  # fmt: skip
    return {"reasoning": message.get("reasoning") or "", "content": message.get("content") or "",
            "calls": calls, "finish_reason": choice["finish_reason"]}


def _assert_engine_got_our_render(engine: ScriptedEngine, codec: InProcessCodec, body: dict[str, Any]) -> None:
    rendered = codec.render_chat(dict(body), request_id_header=None)
    for call in engine.calls:
        assert call.body["token_ids"] == rendered["token_ids"]
        assert call.body["token_ids"][-2:] == [200006, 173781]  # <|start|>assistant
        # vLLM 0.33's Harmony render adds no stop ids ([] here too): the engine stops on
        # generation_config.json's eos ids, <|return|>, <|endoftext|> and <|call|>.
        stops = call.body["sampling_params"]["stop_token_ids"]
        assert stops == rendered["sampling_params"]["stop_token_ids"] == []


async def test_reasoning_then_final_batch_stream_responses_messages(model_dir: Path) -> None:
    body = {"messages": MESSAGES, "reasoning_effort": "low"}
    async with _gateway(model_dir, REASON_FINAL, RETURN) as (client, engine, codec):
        batch = await client.post("/v1/chat/completions", json=body)
        stream = await client.post("/v1/chat/completions", json={**body, "stream": True})
        _assert_engine_got_our_render(engine, codec, body)
        responses = await client.post("/v1/responses", json={"input": MESSAGES[0]["content"]})
        messages = await client.post("/v1/messages", json={"model": str(model_dir), "messages": MESSAGES, "max_tokens": 64})
    assert batch.status_code == 200, batch.text
    view = _batch_view(batch.json())
    assert view == {"reasoning": "The user asks about Paris. Answer briefly.", "content": "It is sunny in Paris.",
                    "calls": {}, "finish_reason": "stop"}  # fmt: skip
    assert _folded(_events(stream)) == view
    # Not built yet (vLLM renders Responses items straight to Harmony messages and parses the
    # output into Responses items): a typed 501, before any engine call.
    assert responses.status_code == 501, responses.text
    assert responses.json()["error"]["message"] == "/v1/responses for Harmony models is not supported yet"
    assert messages.status_code == 200, messages.text
    blocks = messages.json()["content"]
    assert len(engine.calls) == 3  # chat batch, chat stream, messages
    assert [b["type"] for b in blocks] == ["thinking", "text"] and blocks[1]["text"] == "It is sunny in Paris."


async def test_tool_call_and_cut_output(model_dir: Path) -> None:
    body = {"messages": MESSAGES, "tools": [WEATHER]}
    async with _gateway(model_dir, TOOL_CALL, CALL) as (client, engine, codec):
        batch = await client.post("/v1/chat/completions", json=body)
        stream = await client.post("/v1/chat/completions", json={**body, "stream": True})
        _assert_engine_got_our_render(engine, codec, body)
        cut_body = {**body, "max_tokens": 12}
        cut = await client.post("/v1/chat/completions", json=cut_body)
        cut_stream = await client.post("/v1/chat/completions", json={**cut_body, "stream": True})
    assert batch.status_code == 200, batch.text
    view = _batch_view(batch.json())
    assert view["reasoning"] == "Need the weather tool." and view["finish_reason"] == "tool_calls"
    assert [c["name"] for c in view["calls"].values()] == ["get_weather"]
    assert json.loads(view["calls"][0]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert batch.json()["choices"][0]["message"]["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    streamed = _folded(_events(stream))
    assert streamed["calls"] == view["calls"] and streamed["reasoning"] == view["reasoning"]
    assert streamed["finish_reason"] == "tool_calls"
    assert cut.status_code == 200, cut.text
    cut_view = _batch_view(cut.json())
    assert cut_view["finish_reason"] == "length" and cut_view["calls"] == {}
    assert "Need the weather tool.".startswith(cut_view["reasoning"]) and cut_view["reasoning"]
    assert _folded(_events(cut_stream)) == cut_view


@pytest.mark.engine
def test_real_engine_serves_our_harmony_render_and_stops_on_harmony_ends(engine_fleet: EngineFleet) -> None:
    """vLLM 0.32 CPU `--tokens-only` on a tiny random gpt-oss: it takes our Harmony render and
    stops on <|call|> and <|return|> although the render sends no stop ids (the engine's stop
    set is generation_config.json's eos ids). `allowed_token_ids` forces the token."""
    model_dir = tiny_gpt_oss_dir()
    rendered = InProcessCodec(ServiceConfig(model=str(model_dir))).render_chat(
        {"messages": MESSAGES, "tools": [WEATHER]}, request_id_header=None)
    engine = engine_fleet.launch(tokens_only_spec(model_dir, name="gpt-oss", scripted=False))
    try:
        engine.wait_healthy()
        for stop_id in (CALL, RETURN):
            body = {**rendered, "sampling_params": {**rendered["sampling_params"], "max_tokens": 4,
                                                    "allowed_token_ids": [stop_id]}}  # fmt: skip
            choice = generate(engine.url, body, timeout=120)["choices"][0]
            assert (choice["token_ids"], choice["finish_reason"]) == ([stop_id], "stop"), engine.log_tail()
    finally:
        engine.stop()
