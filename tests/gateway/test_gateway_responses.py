"""Gateway /v1/responses over the real codec and a scripted engine: output items (reasoning,
message, function_call), usage and status, and streaming events that assemble to the batch."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from render_service.gateway.codec import InProcessCodec

from .test_gateway_messages import CONFIG, THINK_TEXT, TOOL_TEXT, _events, _ids, _post

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object",
           "properties": {"city": {"type": "string"}}}}


@pytest.fixture(scope="module")
def codec() -> InProcessCodec:
    return InProcessCodec(CONFIG)


def _request(**fields: Any) -> dict[str, Any]:
    return {"model": "Qwen/Qwen3-8B", "input": "hi", "instructions": "be brief", **fields}


def test_batch_reasoning_and_message(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, _ids(codec, THINK_TEXT), "/v1/responses", _request(max_output_tokens=100)))
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["object"] == "response" and out["status"] == "completed" and out["id"].startswith("resp_")
    assert [item["type"] for item in out["output"]] == ["reasoning", "message"]
    assert out["output"][0]["content"][0]["text"].strip() == "Plan it."
    assert out["output"][1]["content"][0]["text"].strip() == "Hello there."
    assert out["instructions"] == "be brief" and out["max_output_tokens"] == 100
    usage = out["usage"]
    assert usage["output_tokens"] == len(_ids(codec, THINK_TEXT)) + 1
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_batch_function_call(codec: InProcessCodec) -> None:
    out = asyncio.run(_post(codec, _ids(codec, TOOL_TEXT), "/v1/responses", _request(tools=[WEATHER]))).json()
    call = out["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert json.loads(call["arguments"]) == {"city": "Paris"} and call["call_id"]


def test_incomplete_at_max_output_tokens(codec: InProcessCodec) -> None:
    out = asyncio.run(_post(codec, _ids(codec, THINK_TEXT), "/v1/responses", _request(max_output_tokens=3))).json()
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize("text,tools", [(THINK_TEXT, None), (TOOL_TEXT, [WEATHER])], ids=["text", "tool"])
def test_stream_assembles_to_batch(codec: InProcessCodec, text: str, tools: Any) -> None:
    extra = {"tools": tools} if tools else {}
    batch = asyncio.run(_post(codec, _ids(codec, text), "/v1/responses", _request(**extra))).json()
    response = asyncio.run(_post(codec, _ids(codec, text), "/v1/responses", _request(stream=True, **extra)))
    assert response.status_code == 200, response.text
    events = _events(response.text)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    deltas: dict[str, str] = {}
    for name, data in events:
        if name.endswith(".delta"):
            deltas[data["item_id"]] = deltas.get(data["item_id"], "") + data["delta"]
    final = events[-1][1]["response"]
    done = [data["item"] for name, data in events if name == "response.output_item.done"]
    assert final["output"] == done
    assert [item["type"] for item in done] == [item["type"] for item in batch["output"]]
    for got, want in zip(done, batch["output"], strict=True):
        if want["type"] == "function_call":
            assert deltas[got["id"]] == got["arguments"]
            assert json.loads(got["arguments"]) == json.loads(want["arguments"]) and got["name"] == want["name"]
        else:
            assert deltas[got["id"]] == got["content"][0]["text"] == want["content"][0]["text"]
    assert final["usage"]["output_tokens"] == batch["usage"]["output_tokens"]


def test_previous_response_id_refused(codec: InProcessCodec) -> None:
    response = asyncio.run(_post(codec, [1], "/v1/responses", _request(previous_response_id="resp_x")))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "previous_response_id"


async def _with_sdk(codec: InProcessCodec, tokens: list[int], call: Any) -> Any:
    import httpx
    import openai

    from render_service.gateway.app import create_gateway_app
    from render_service.gateway.config import GatewayConfig, HealthSettings
    from render_service.gateway.testing import ScriptedEngine

    engine = ScriptedEngine("http://e0", tokens=tokens)
    app = create_gateway_app(CONFIG, GatewayConfig(engines=("http://e0",), health=HealthSettings(interval_s=60)),
                             codec=codec, client_factory={"http://e0": engine}.__getitem__)
    async with app.router.lifespan_context(app):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw/v1")
        async with openai.AsyncOpenAI(api_key="x", base_url="http://gw/v1", http_client=http) as client:
            return await call(client)


def test_official_openai_sdk_reads_responses(codec: InProcessCodec) -> None:
    """openai's `responses.create` parses our response and our stream (typed events)."""
    async def batch(client: Any) -> Any:
        return await client.responses.create(model="Qwen/Qwen3-8B", input="hi", tools=[WEATHER])

    async def stream(client: Any) -> Any:
        events = []
        async with client.responses.stream(model="Qwen/Qwen3-8B", input="hi", tools=[WEATHER]) as s:
            async for event in s:
                events.append(event.type)
            return events, await s.get_final_response()

    response = asyncio.run(_with_sdk(codec, _ids(codec, TOOL_TEXT), batch))
    assert [item.type for item in response.output] == ["reasoning", "function_call"]
    assert json.loads(response.output[1].arguments) == {"city": "Paris"}
    events, final = asyncio.run(_with_sdk(codec, _ids(codec, TOOL_TEXT), stream))
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert final.output[1].name == "get_weather" and json.loads(final.output[1].arguments) == {"city": "Paris"}
