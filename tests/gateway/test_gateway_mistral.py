"""The gateway on a `--tokenizer-mode mistral` folder: mistral-common renders the prompt the
engine gets, and a `[TOOL_CALLS]` output comes back as tool calls (batch and SSE)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import mistral_common
import orjson

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings
from render_service.gateway.testing import ScriptedEngine

from .conftest import FAST_TIMEOUTS

V3 = Path(mistral_common.__file__).resolve().parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def _folder(tmp_path: Path) -> Path:
    shutil.copyfile(V3, tmp_path / "tokenizer.model.v3")
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "max_position_embeddings": 32768}))  # fmt: skip
    return tmp_path


def _output_ids() -> list[int]:
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

    spm = SentencePieceTokenizer(str(V3))
    return [5, *spm.encode(' [{"name": "get_weather", "arguments": {"city": "Paris"}}]', bos=False, eos=False)]


async def test_gateway_renders_with_mistral_common_and_parses_tool_calls(tmp_path: Path) -> None:
    config = ServiceConfig(model=str(_folder(tmp_path)), tokenizer_mode="mistral",
                           tool_call_parser="mistral", enable_auto_tool_choice=True)  # fmt: skip
    engines = {"http://e0": ScriptedEngine("http://e0", tokens=_output_ids(), eos_id=2)}
    gateway_config = GatewayConfig(engines=("http://e0",), timeouts=FAST_TIMEOUTS, health=HealthSettings(interval_s=60))
    app = create_gateway_app(config, gateway_config, codec=InProcessCodec(config), client_factory=engines.__getitem__)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            body = {"messages": MESSAGES, "tools": [WEATHER]}
            batch = await client.post("/v1/chat/completions", json=body)
            stream = await client.post("/v1/chat/completions", json={**body, "stream": True})
    assert batch.status_code == 200, batch.text
    message = batch.json()["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert batch.json()["choices"][0]["finish_reason"] == "tool_calls"
    prompt = engines["http://e0"].calls[0].body["token_ids"]
    assert prompt[:2] == [1, 6] and prompt[-1] == 4  # <s>[AVAILABLE_TOOLS] ... [/INST]
    events = [orjson.loads(line[6:]) for line in stream.text.splitlines() if line.startswith("data: {")]
    args = "".join(tc["function"].get("arguments") or "" for e in events for ch in e["choices"]
                   for tc in ch["delta"].get("tool_calls") or [])  # fmt: skip
    assert json.loads(args) == {"city": "Paris"}
