"""End to end against a REAL `vllm serve --tokens-only` engine (tests/harness fixtures):
our render -> engine generate (scripted output) -> our derender, batch and streaming.

The engine cannot take stop strings (tokens-only), so, as a gateway does, the test removes
`stop` from the sampling params it forwards and derender applies the stop strings.
"""

from __future__ import annotations

import pytest
from ..harness.engine_api import generate, generate_stream
from ..harness.fixtures import tiny_model_dir, tokens_engine  # noqa: F401
from ..harness.script_protocol import script_extra_args
from .helpers import batch_view, concat_chat, roundtrip, same_message
from .test_parser_stream import CALL_T, CALL_W, TOOLS

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.derender_api import Derenderer

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def services(tiny_model_dir):  # noqa: ANN001, ANN201, F811
    config = ServiceConfig(model=str(tiny_model_dir), reasoning_parser="qwen3",
                           tool_call_parser="hermes", enable_auto_tool_choice=True,
                           stream_state_secret="e2e")  # fmt: skip
    renderer = Renderer(config)
    return renderer, Derenderer(config, renderer)


SCENARIOS = {
    "reasoning-content-cjk-emoji": ("<think>\n想一想 😀 carefully.\n</think>\n\n答案是 42 👍🏽.", {}),
    "several-tool-calls": (f"<think>\nUse tools.\n</think>\n\n{CALL_W}\n{CALL_T}", {"tools": TOOLS}),
    "stop-string": ("<think>\nok\n</think>\n\nfirst part STOP second part", {"stop": ["STOP"]}),
    "logprobs": ("<think>\nx\n</think>\n\nwith logprobs 中文", {"logprobs": True, "top_logprobs": 2}),
    "n2": ("<think>\nboth\n</think>\n\nsame script twice", {"n": 2}),
}


def _generate_body(renderer, request, script):  # noqa: ANN001, ANN202
    rendered = renderer.render_chat(request)
    params = dict(rendered["sampling_params"])
    params.pop("stop", None)  # tokens-only engines refuse stop strings; derender applies them
    params["max_tokens"] = len(script) + 4
    params["extra_args"] = {**(params.get("extra_args") or {}), **script_extra_args(script)}
    body = {"request_id": rendered["request_id"], "token_ids": rendered["token_ids"],
            "sampling_params": params}  # fmt: skip
    return rendered, body


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_render_generate_derender(services, tokens_engine, name):  # noqa: ANN001, F811
    renderer, derenderer = services
    text, extra = SCENARIOS[name]
    request = {"messages": [{"role": "user", "content": "go"}], **extra}
    script = renderer.bundle.hf_tokenizer.encode(text, add_special_tokens=False)
    rendered, body = _generate_body(renderer, request, script)
    prompt = rendered["token_ids"]

    gen = generate(tokens_engine, body)
    assert [c["token_ids"][: len(script)] for c in gen["choices"]] == [script] * len(gen["choices"])
    batch = derenderer.derender_chat({"generate_response": gen, "chat_request": request,
                                      "prompt_token_ids": prompt, "prompt_tokens": len(prompt)})  # fmt: skip
    assert len(batch["choices"]) == extra.get("n", 1)
    view = batch_view(batch)
    if name == "stop-string":
        engine_choice = {k: gen["choices"][0][k] for k in ("finish_reason", "stop_reason")}
        assert view["content"] == "\n\nfirst part " and view["stop_reason"] == "STOP", engine_choice
    if name == "several-tool-calls":
        assert [c["name"] for c in view["tool_calls"]] == ["get_weather", "get_time"]
        assert view["finish_reason"] == "tool_calls"
    if name == "reasoning-content-cjk-emoji":
        assert view["reasoning"] == "\n想一想 😀 carefully.\n" and view["content"] == "\n\n答案是 42 👍🏽."
    if name == "logprobs":
        tokens = [e["token"] for e in batch["choices"][0]["logprobs"]["content"]]
        assert "".join(tokens).startswith(text[:10]) and len(tokens) == len(gen["choices"][0]["token_ids"])

    events = generate_stream(tokens_engine, body).events
    states: dict[int, object] = {}
    per_index: dict[int, list[dict]] = {}
    for k, event in enumerate(events):
        index = event["choices"][0]["index"] if event["choices"] else 0
        first = index not in states
        call = {"stream": True, "generate_chunk": event, "stream_state": states.get(index)}
        if first:
            call.update(chat_request=request, prompt_token_ids=prompt)
        response = roundtrip(derenderer.derender_chat(roundtrip(call)))
        states[index] = response["stream_state"]
        per_index.setdefault(index, []).append(response)
        if response.get("abort_engine_request"):
            break  # a gateway aborts the engine request here
    for index, responses in per_index.items():
        assert same_message(concat_chat(responses), batch_view(batch, index)), index
