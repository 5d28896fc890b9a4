"""Differential test: `/v1/messages/render` (Anthropic Messages) == vLLM 0.33's `launch render`.

One reference server (Qwen3, qwen3 reasoning + hermes tools) for the module; our Renderer
loads the same folder and flags. Every response must be equal field for field (our
`render_fingerprint` aside), errors included: status and body.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError

from .ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir

pytestmark = pytest.mark.vllm

SERVED = "Qwen/Qwen3-8B"
HEADER_ID = "fixed-request-id"
USER = {"role": "user", "content": "hi there"}
WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME = {"name": "get_time", "input_schema": {"properties": {"tz": {"type": "string"}}}}
TOOL_TURNS = [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C, sunny"},
        {"type": "text", "text": "and tomorrow?"},
    ]},
]


def body(**fields: Any) -> dict[str, Any]:
    return {"model": SERVED, "max_tokens": 2048, "messages": [USER], **fields}


CASES: list[tuple[str, dict[str, Any]]] = [
    ("plain", body()),
    ("system_string", body(system="You are terse.")),
    ("system_blocks_billing", body(system=[
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; hash=abc"},
        {"type": "text", "text": "You are Claude Code."},
        {"type": "text", "text": " Be brief.", "cache_control": {"type": "ephemeral"}},
    ])),
    ("inline_system", body(system="top", messages=[
        USER, {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "<reminder>todo</reminder>"}]},
        {"role": "user", "content": "next"},
    ])),
    ("tool_turns", body(messages=TOOL_TURNS, tools=[WEATHER, TIME])),
    ("tool_choice_any", body(tools=[WEATHER], tool_choice={"type": "any"})),
    ("tool_choice_named", body(tools=[WEATHER, TIME], tool_choice={"type": "tool", "name": "get_time"})),
    ("tool_choice_none", body(tools=[WEATHER], tool_choice={"type": "none"})),
    ("no_parallel", body(tools=[WEATHER], tool_choice={"type": "auto", "disable_parallel_tool_use": True})),
    ("thinking_enabled", body(thinking={"type": "enabled", "budget_tokens": 1024})),
    ("thinking_disabled", body(thinking={"type": "disabled"})),
    ("thinking_adaptive_effort", body(thinking={"type": "adaptive"}, output_config={"effort": "high"})),
    ("disabled_over_effort", body(thinking={"type": "disabled"}, output_config={"effort": "max"})),
    ("json_output", body(output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}})),
    ("sampling", body(stop_sequences=["END", "STOP"], temperature=0.2, top_p=0.5, top_k=7, metadata={"user_id": "u"})),
    ("stream", body(stream=True, cache_salt="salt-1")),
    ("tool_result_parts", body(tools=[WEATHER], messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": [
            {"type": "text", "text": "line one"}, {"type": "text", "text": "line two"},
            {"type": "tool_reference", "tool_name": "get_time"}]}]},
    ])),
    ("assistant_tool_result", body(messages=[
        USER, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}, USER])),
    ("tool_addition", body(tools=[WEATHER], messages=[
        {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": TIME}}]},
        USER,
    ])),
    ("tool_removal", body(tools=[WEATHER, TIME], messages=[
        {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_time"}}]},
        USER,
    ])),
    ("redacted_and_empty_user", body(messages=[
        USER, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "ok"}]},
        {"role": "user", "content": []}, {"role": "user", "content": "again"},
    ])),
    ("prefill_pd", body(max_tokens=1, thinking={"type": "enabled", "budget_tokens": 2000},
                        kv_transfer_params={"do_remote_decode": True})),
    ("xargs", body(vllm_xargs={"a": 1}, chat_template_kwargs={"enable_thinking": False})),
    # tool_choice is assigned after validation in vLLM: no tools is not refused
    ("named_choice_without_tools", body(tool_choice={"type": "tool", "name": "f"})),
    ("any_without_tools", body(tool_choice={"type": "any"})),
    # errors
    ("missing_max_tokens", {"model": SERVED, "messages": [USER]}),
    ("missing_model", {"max_tokens": 10, "messages": [USER]}),
    ("empty_model", body(model="")),
    ("max_tokens_zero", body(max_tokens=0)),
    ("budget_over_max", body(max_tokens=1500, thinking={"type": "enabled", "budget_tokens": 2000})),
    ("budget_too_small", body(thinking={"type": "enabled", "budget_tokens": 10})),
    ("bad_thinking_type", body(thinking={"type": "sometimes"})),
    ("named_without_name", body(tools=[WEATHER], tool_choice={"type": "tool"})),
    ("tool_change_in_user", body(messages=[{"role": "user", "content": [
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "get_weather"}}]}])),
    ("tool_removal_undeclared", body(messages=[
        {"role": "system", "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "nope"}}]}, USER])),
    ("unknown_model", body(model="nope")),
    ("bad_role", body(messages=[{"role": "tool", "content": "x"}])),
    ("bad_block_type", body(messages=[{"role": "user", "content": [{"type": "video"}]}])),
    ("too_many_stops", body(stop_sequences=["a", "b", "c", "d", "e"])),
    ("bad_temperature", body(temperature="hot")),
    ("bad_cache_salt", body(cache_salt="a/b")),
    ("named_unknown_tool", body(tools=[WEATHER], tool_choice={"type": "tool", "name": "zzz"})),
    ("image_on_text_model", body(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "text", "text": "what is it?"}]}])),
]


# Cases whose error text differs from vLLM's (status equal), with the reason.
DIVERGENCES = {
    # Chat render's own wording for an image sent to a text-only model (shared with
    # /v1/chat/completions/render; vLLM: "<model> is not a multimodal model").
    "image_on_text_model": "chat render's text-only-model message",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_render_model_dir(tmp_path_factory.mktemp("messages-model"))


@pytest.fixture(scope="module")
def ref(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with RefRenderServer(model_dir, PARSER_FLAGS, tmp_path_factory.mktemp("messages-ref-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> Renderer:
    return Renderer(ServiceConfig(
        model=str(model_dir), served_model_name=(SERVED,), reasoning_parser="qwen3",
        tool_call_parser="hermes", enable_auto_tool_choice=True,
    ))


def _ours(renderer: Renderer, request: dict[str, Any]) -> tuple[int, Any]:
    try:
        return 200, renderer.render_messages(copy.deepcopy(request), request_id_header=HEADER_ID)
    except RenderServiceError as exc:
        return exc.status, exc.to_body()


@pytest.mark.parametrize("name,request_body", CASES, ids=[name for name, _ in CASES])
def test_messages_render_equals_vllm(name: str, request_body: dict[str, Any], ref, renderer: Renderer) -> None:
    response = ref.post("/v1/messages/render", copy.deepcopy(request_body), headers={"X-Request-Id": HEADER_ID})
    status, got = _ours(renderer, request_body)
    assert status == response.status_code, (response.text[:2000], got)
    expected = response.json()
    if name in DIVERGENCES:
        assert got["error"]["code"] == expected["error"]["code"]
        return
    if status == 200:
        assert list(got)[-1] == "render_fingerprint"
        got.pop("render_fingerprint")
    assert got == expected
    if isinstance(expected, dict):
        assert list(got) == list(expected)


def test_disabled_thinking_effort_flag(model_dir: Path) -> None:
    """--anthropic-disabled-thinking-effort pins what thinking.type=disabled sends (no probe);
    "auto" probes the template: Qwen3 honours "none" (enable_thinking false)."""
    base = ServiceConfig(model=str(model_dir), served_model_name=(SERVED,))
    request = {"model": SERVED, "max_tokens": 10, "messages": [USER], "thinking": {"type": "disabled"}}
    assert Renderer(base).messages_chat_request(request).reasoning_effort == "none"
    pinned = Renderer(base.replace(anthropic_disabled_thinking_effort="low"))
    assert pinned.messages_chat_request(request).reasoning_effort == "low"
    assert pinned.messages_chat_request({**request, "thinking": None}).reasoning_effort is None
