"""Gateway /v1/messages and /v1/messages/count_tokens over the real codec and a scripted engine.

The engine stand-in answers with the token ids of a known Qwen3 output; the Messages response
(batch) and event stream must carry its thinking, text and tool_use blocks, vLLM's stop
reasons and usage, and the streamed events must assemble to the batch message.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import ScriptedEngine

CONFIG = ServiceConfig.embedded_default()
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
THINK_TEXT = "<think>\nPlan it.\n</think>\n\nHello there."
TOOL_TEXT = '<think>\nNeed weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def codec() -> InProcessCodec:
    return InProcessCodec(CONFIG)


def _ids(codec: InProcessCodec, text: str) -> list[int]:
    return list(codec.renderer.bundle.hf_tokenizer.encode(text, add_special_tokens=False))


async def _post(codec: InProcessCodec, tokens: list[int], path: str, body: dict[str, Any]) -> httpx.Response:
    engine = ScriptedEngine("http://e0", tokens=tokens)
    app = create_gateway_app(CONFIG, GatewayConfig(engines=("http://e0",), health=HealthSettings(interval_s=60)),
                             codec=codec, client_factory={"http://e0": engine}.__getitem__)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            return await client.post(path, json=body, timeout=60)


def _request(**fields: Any) -> dict[str, Any]:
    return {"model": "Qwen/Qwen3-8B", "max_tokens": 256,
            "messages": [{"role": "user", "content": "hi"}], **fields}


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def _assemble(events: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    for name, data in events:
        assert data["type"] == name
        if name == "content_block_start":
            assert data["index"] == len(blocks)
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            key = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "json",
                   "signature_delta": "signature"}[delta["type"]]
            value = delta.get("partial_json") if key == "json" else delta[key]
            block[key] = block.get(key, "") + value
        elif name == "message_delta":
            final = data
    for block in blocks:
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("json"))
    return blocks, final


def test_batch_thinking_and_text(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, _ids(codec, THINK_TEXT), "/v1/messages", _request()))
    assert response.status_code == 200, response.text
    message = response.json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert message["content"][0]["thinking"].strip() == "Plan it."
    assert message["content"][1]["text"].strip() == "Hello there."
    assert message["stop_reason"] == "end_turn" and "stop_sequence" not in message  # exclude_none
    assert message["usage"]["output_tokens"] == len(_ids(codec, THINK_TEXT)) + 1
    assert message["usage"]["input_tokens"] > 0


def test_batch_tool_use(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, _ids(codec, TOOL_TEXT), "/v1/messages", _request(tools=[WEATHER])))
    message = response.json()
    assert [b["type"] for b in message["content"]] == ["thinking", "tool_use"]
    call = message["content"][1]
    assert call["name"] == "get_weather" and call["input"] == {"city": "Paris"} and call["id"]
    assert message["stop_reason"] == "tool_use"


@pytest.mark.parametrize("text,tools", [(THINK_TEXT, None), (TOOL_TEXT, [WEATHER])], ids=["text", "tool"])
def test_stream_events_assemble_to_batch(codec: InProcessCodec, text: str, tools: Any) -> None:
    extra = {"tools": tools} if tools else {}
    batch = asyncio.run(_post(codec, _ids(codec, text), "/v1/messages", _request(**extra))).json()
    response = asyncio.run(_post(codec, _ids(codec, text), "/v1/messages", _request(stream=True, **extra)))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == batch["usage"]["input_tokens"]
    blocks, final = _assemble(events)
    for got, want in zip(blocks, batch["content"], strict=True):
        assert got["type"] == want["type"]
        for key in ("text", "thinking", "name", "input"):
            if key in want:
                assert got[key] == want[key]
    assert final["delta"]["stop_reason"] == batch["stop_reason"]
    assert final["usage"]["output_tokens"] == batch["usage"]["output_tokens"]


def test_max_tokens_stop_reason(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, _ids(codec, THINK_TEXT), "/v1/messages", _request(max_tokens=3)))
    assert response.json()["stop_reason"] == "max_tokens"


def test_errors_in_anthropic_shape(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, [1], "/v1/messages", {"messages": [], "max_tokens": 1}))
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    response = asyncio.run(_post(codec, [1], "/v1/messages", _request(model="nope")))
    assert response.status_code == 404 and response.json()["error"]["type"] == "not_found_error"


def test_count_tokens_is_the_rendered_prompt(codec: InProcessCodec) -> None:
    body = _request(system="be brief", tools=[WEATHER])
    response = asyncio.run(_post(codec, [1], "/v1/messages/count_tokens", {k: v for k, v in body.items() if k != "max_tokens"}))
    assert response.status_code == 200, response.text
    rendered = codec.renderer.render_messages(body)
    assert response.json() == {"input_tokens": len(rendered["token_ids"]),
                               "context_management": {"original_input_tokens": len(rendered["token_ids"])}}


def test_official_anthropic_sdk_reads_messages(codec: InProcessCodec) -> None:
    """anthropic's `messages.create` and `messages.stream` parse our message and events."""
    import anthropic
    import httpx2

    from render_service.gateway.app import create_gateway_app
    from render_service.gateway.config import GatewayConfig, HealthSettings

    async def run(stream: bool) -> Any:
        engine = ScriptedEngine("http://e0", tokens=_ids(codec, TOOL_TEXT))
        app = create_gateway_app(CONFIG, GatewayConfig(engines=("http://e0",), health=HealthSettings(interval_s=60)),
                                 codec=codec, client_factory={"http://e0": engine}.__getitem__)
        async with app.router.lifespan_context(app):
            # This SDK release speaks httpx2 (same API as httpx).
            http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gw")
            async with anthropic.AsyncAnthropic(api_key="x", base_url="http://gw", http_client=http) as client:
                args: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "max_tokens": 256, "tools": [WEATHER],
                                        "messages": [{"role": "user", "content": "weather in Paris?"}]}
                if not stream:
                    return await client.messages.create(**args)
                async with client.messages.stream(**args) as s:
                    types = [event.type async for event in s]
                    return types, await s.get_final_message()

    message = asyncio.run(run(False))
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[1].input == {"city": "Paris"} and message.stop_reason == "tool_use"
    types, final = asyncio.run(run(True))
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[1].input == {"city": "Paris"} and final.stop_reason == "tool_use"
    assert final.usage.output_tokens == message.usage.output_tokens
