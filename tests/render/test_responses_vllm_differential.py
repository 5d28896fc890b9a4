"""Differential test: `/v1/responses/render` == vLLM 0.33's `launch render`.

One reference server (Qwen3, qwen3 reasoning + hermes tools) for the module; our Renderer
loads the same folder and flags. Responses must be equal field for field; `request_id` is
compared by its `resp_` shape when the body sets none (vLLM draws a random one). Errors: status
and body, except schema errors of `input` items (DIVERGENCES: vLLM lists the OpenAI SDK
union's member errors, we do not).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError

from .ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir

pytestmark = pytest.mark.vllm

SERVED = "Qwen/Qwen3-8B"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
TOOL_ITEMS = [
    {"role": "user", "content": "weather in Paris?"},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "call the tool"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 18C.", "annotations": []}]},
    {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
]

NAMESPACE = {"type": "namespace", "name": "crm", "description": "CRM tools", "tools": [WEATHER, TIME]}
SHELL = {"type": "custom", "name": "shell", "description": "Run a command", "format": {"type": "text"}}
CUSTOM_ITEMS = [
    {"role": "user", "content": "list files, then the weather"},
    {"type": "custom_tool_call", "call_id": "call_2", "name": "shell", "input": "ls -l \u00e9"},
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": "a.txt"},
    {"type": "function_call", "call_id": "call_3", "namespace": "crm", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_3", "output": "18C"},
]

CASES: list[tuple[str, dict[str, Any]]] = [
    ("string_input", {"input": "hi"}),
    ("instructions", {"input": "hi", "instructions": "be brief", "max_output_tokens": 50}),
    ("developer_item", {"input": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]}),
    ("tool_items", {"input": TOOL_ITEMS, "tools": [WEATHER, TIME]}),
    ("required", {"input": "hi", "tools": [WEATHER], "tool_choice": "required"}),
    ("named", {"input": "hi", "tools": [WEATHER, TIME], "tool_choice": {"type": "function", "name": "get_time"}}),
    ("choice_none", {"input": "hi", "tools": [WEATHER], "tool_choice": "none"}),
    ("no_parallel", {"input": "hi", "tools": [WEATHER], "parallel_tool_calls": False}),
    ("non_function_tool_ignored", {"input": "hi", "tools": [{"type": "web_search"}]}),
    ("effort_low", {"input": "hi", "reasoning": {"effort": "low"}}),
    ("effort_none", {"input": "hi", "reasoning": {"effort": "none"}}),
    ("json_schema", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}}),
    ("json_object", {"input": "x", "text": {"format": {"type": "json_object"}}}),
    ("text_format_text", {"input": "x", "text": {"format": {"type": "text"}}}),
    ("partial_continue", {"input": [
        {"role": "user", "content": "count"},
        {"type": "message", "role": "assistant", "status": "incomplete",
         "content": [{"type": "output_text", "text": "1, 2,", "annotations": []}]}]}),
    ("logprobs", {"input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 2, "vllm_xargs": {"a": 1}}),
    ("sampling", {"input": "hi", "temperature": 0.3, "top_p": 0.5, "top_k": 5, "min_p": 0.1, "seed": 3,
                  "stop": ["END"], "presence_penalty": 0.5, "frequency_penalty": 0.2, "repetition_penalty": 1.1,
                  "max_output_tokens": 77, "stream": True, "cache_salt": "s1", "priority": 0}),
    ("kv_hoist", {"input": "x", "kv_transfer_params": {"do_remote_decode": True}, "request_id": "myid",
                  "model": SERVED, "truncation": "auto"}),
    ("template_kwargs", {"input": "hi", "chat_template_kwargs": {"enable_thinking": False}, "metadata": {"k": "v"}}),
    ("namespace_and_custom_items", {"input": CUSTOM_ITEMS, "tools": [NAMESPACE, SHELL, WEATHER]}),
    ("required_custom_only", {"input": "hi", "tools": [SHELL], "tool_choice": "required"}),
    ("choice_custom", {"input": "hi", "tools": [SHELL, WEATHER], "tool_choice": {"type": "custom", "name": "shell"}}),
    ("choice_namespace_local_name", {"input": "hi", "tools": [NAMESPACE], "tool_choice": {"type": "function", "name": "get_time"}}),
    ("choice_namespace_flat_name", {"input": "hi", "tools": [NAMESPACE], "tool_choice": {"type": "function", "name": "crm__get_time"}}),
    ("choice_allowed_tools", {"input": "hi", "tools": [WEATHER, TIME], "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}}),
    ("choice_mcp", {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "mcp", "server_label": "x"}}),
    ("choice_builtin", {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "web_search_preview"}}),
    ("choice_shell_no_parallel", {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "shell"}, "parallel_tool_calls": False}),
    # errors
    ("choice_ambiguous", {"input": "hi", "tools": [NAMESPACE, {**NAMESPACE, "name": "erp"}],
                          "tool_choice": {"type": "function", "name": "get_time"}}),
    ("custom_grammar", {"input": "hi", "tools": [{"type": "custom", "name": "g", "format": {
        "type": "grammar", "syntax": "lark", "definition": "start: /a/"}}]}),
    ("choice_unknown_type", {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "nope"}}),
    ("previous_response_id", {"input": "hi", "previous_response_id": "resp_1"}),
    ("unknown_model", {"input": "hi", "model": "nope"}),
    ("missing_input", {"instructions": "x"}),
    ("prompt_template", {"input": "hi", "prompt": {"id": "p"}}),
    ("background_no_store", {"input": "hi", "background": True, "store": False}),
    ("bad_penalty", {"input": "hi", "presence_penalty": 3}),
    ("encrypted_reasoning", {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "abc"}]}),
    ("both_constraints", {"input": "x", "text": {"format": {"type": "json_object"}}, "structured_outputs": {"regex": "a"}}),
    ("too_long_output", {"input": "hi", "max_output_tokens": 50000}),
    ("bad_item", {"input": [{"type": "foo"}]}),
    ("bad_salt", {"input": "hi", "cache_salt": "a/b"}),
    ("required_without_tools", {"input": "hi", "tool_choice": "required"}),
    ("named_without_tools", {"input": "hi", "tool_choice": {"type": "function", "name": "f"}}),
    ("named_unknown", {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "zzz"}}),
    ("assistant_without_text", {"input": [{"role": "user", "content": "a"}, {"role": "assistant", "content": []},
                                          {"role": "user", "content": "b"}]}),
]
DIVERGENCES = {
    "bad_item": "vLLM lists the OpenAI SDK item union's member errors (237 of them)",
    "choice_unknown_type": "vLLM lists the OpenAI SDK ToolChoice union's member errors",
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_render_model_dir(tmp_path_factory.mktemp("responses-model"))


@pytest.fixture(scope="module")
def ref(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with RefRenderServer(model_dir, PARSER_FLAGS, tmp_path_factory.mktemp("responses-ref-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> Renderer:
    return Renderer(ServiceConfig(
        model=str(model_dir), served_model_name=(SERVED,), reasoning_parser="qwen3",
        tool_call_parser="hermes", enable_auto_tool_choice=True,
    ))


def _ours(renderer: Renderer, request: dict[str, Any]) -> tuple[int, Any]:
    try:
        return 200, renderer.render_responses(copy.deepcopy(request))
    except RenderServiceError as exc:
        return exc.status, exc.to_body()


@pytest.mark.parametrize("name,request_body", CASES, ids=[name for name, _ in CASES])
def test_responses_render_equals_vllm(name: str, request_body: dict[str, Any], ref, renderer: Renderer) -> None:
    response = ref.post("/v1/responses/render", copy.deepcopy(request_body), headers={"X-Request-Id": "ignored"})
    status, got = _ours(renderer, request_body)
    assert status == response.status_code, (response.text[:2000], got)
    expected = response.json()
    if name in DIVERGENCES:
        assert got["error"]["code"] == expected["error"]["code"]
        return
    if status == 200 and "request_id" not in request_body:
        for result in (got, expected):
            assert re.fullmatch(r"resp_[0-9a-f]{16}", result["request_id"])
            result["request_id"] = "resp_"
    assert got == expected
    assert list(got) == list(expected)
