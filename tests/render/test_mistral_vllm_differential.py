"""Differential test: `--tokenizer-mode mistral` render == vLLM 0.33's `launch render`.

Weightless Mistral folders (config.json and a mistral-common tokenizer file, no
tokenizer.json) are served by vLLM's own render app (one reference-venv subprocess,
structural_tag_ref_helper.py) and by ours, bare and with `--tool-call-parser mistral
--enable-auto-tool-choice`:

* v3: the SentencePiece `tokenizer.model.v3` from the installed PyPI mistral-common;
* tekken_v7, tekken_v11, tekken_v13: `tekken.json` files made from the Tekken vocabulary
  mistral-common ships (`data/tekken_240911.json`, a v3 file), cut to its first 5,000 ranks
  and declared v7 (the built-in special tokens), v11 (+ `[ARGS]`, `[CALL_ID]`) or v13
  (+ `[THINK]`, `[/THINK]`) with an explicit special-token table, as Mistral's own v7+ files
  are laid out. mistral-common ships no v7+ Tekken file.

Chat render (tools, multi-turn tool calls and results, long tool-call ids, thinking chunks,
generation-prompt errors, sampling params), `/tokenize`, `/detokenize`,
`/v1/completions/render`, and batch derender of `[TOOL_CALLS]` / `[THINK]` outputs must be
equal as JSON, errors with their status and body; our derender streams fold to our batch.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mistral_common
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

from .ref_server import ref_venv

pytestmark = pytest.mark.vllm

HELPER = Path(__file__).resolve().parent / "structural_tag_ref_helper.py"
HEADER_ID = "fixed-request-id"
REF_TIMEOUT_S = 1200
MISTRAL_DATA = Path(mistral_common.__file__).resolve().parent / "data"
V3_MODEL = MISTRAL_DATA / "mistral_instruct_tokenizer_240323.model.v3"
TEKKEN_RANKS = 5000  # of the shipped vocabulary's 150,000: a small, fast folder
TEKKEN_SPECIALS = 1000  # Mistral's default_num_special_tokens
MISTRAL_CONFIG: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32768,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": None, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
LAUNCHES: dict[str, list[str]] = {
    "bare": ["--tokenizer-mode", "mistral"],
    "tools": ["--tokenizer-mode", "mistral", "--tool-call-parser", "mistral", "--enable-auto-tool-choice"],
}
FOLDERS = ("v3", "tekken_v7", "tekken_v11", "tekken_v13")
# One served setup per folder and launch: "v3-bare", "tekken_v13-tools", ...
SETUPS = [f"{folder}-{launch}" for folder in FOLDERS for launch in LAUNCHES]
# The special tokens a Tekken file of each version declares after the 20 built-in ones
# (ranks 20-31 are fillers, as in Mistral's files).
TEKKEN_EXTRA = {"tekken_v7": None, "tekken_v11": ["[ARGS]", "[CALL_ID]"],
                "tekken_v13": ["[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"]}  # fmt: skip

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}  # fmt: skip
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}  # fmt: skip
U = {"role": "user", "content": "What is the weather in Paris?"}
CALL = {"id": "call_0123456789abc", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
CALL9 = {"id": "abcdefghi", "type": "function", "function": {"name": "search", "arguments": '{"query": "Paris"}'}}


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"messages": messages, **extra}


CHAT_CASES: dict[str, dict[str, Any]] = {
    "user_only": _chat([U]),
    "system": _chat([{"role": "system", "content": "You are terse."}, U]),
    "system_parts": _chat([{"role": "system", "content": [{"type": "text", "text": "Be kind."}]}, U]),
    "user_parts": _chat([{"role": "user", "content": [{"type": "text", "text": "One. "}, {"type": "text", "text": "Two."}]}]),
    "multi_turn": _chat([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                         {"role": "user", "content": "Tell me a joke."}]),
    "tools": _chat([U], tools=[WEATHER, SEARCH]),
    "tools_auto": _chat([U], tools=[WEATHER], tool_choice="auto"),
    "tools_none": _chat([U], tools=[WEATHER], tool_choice="none"),
    "tools_required": _chat([U], tools=[WEATHER], tool_choice="required"),
    "tools_named": _chat([U], tools=[WEATHER, SEARCH], tool_choice={"type": "function", "function": {"name": "search"}}),
    "tool_round_trip": _chat([U, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                              {"role": "tool", "tool_call_id": CALL["id"], "content": '{"temp": 21}'}], tools=[WEATHER]),
    "two_calls": _chat([U, {"role": "assistant", "tool_calls": [CALL, CALL9]},
                        {"role": "tool", "tool_call_id": CALL["id"], "content": "21C"},
                        {"role": "tool", "tool_call_id": CALL9["id"], "content": "results"}], tools=[WEATHER, SEARCH]),
    "round_trip_then_user": _chat([U, {"role": "assistant", "tool_calls": [CALL9]},
                                   {"role": "tool", "tool_call_id": CALL9["id"], "content": "ok"},
                                   {"role": "assistant", "content": "It is sunny."},
                                   {"role": "user", "content": "And tomorrow?"}], tools=[SEARCH]),
    "short_call_id": _chat([U, {"role": "assistant", "tool_calls": [{**CALL, "id": "x1"}]},
                            {"role": "tool", "tool_call_id": "x1", "content": "21C"}], tools=[WEATHER]),
    "unicode": _chat([{"role": "system", "content": "Réponds en 日本語 🙂"}, {"role": "user", "content": "Ça va? 東京"}]),
    "continue_final": _chat([U, {"role": "assistant", "content": "It is"}], continue_final_message=True,
                            add_generation_prompt=False),
    "assistant_last": _chat([U, {"role": "assistant", "content": "Sunny."}]),
    "continue_not_assistant": _chat([U], continue_final_message=True, add_generation_prompt=False),
    "both_prompt_flags": _chat([U, {"role": "assistant", "content": "x"}], continue_final_message=True),
    "chat_template": _chat([U], chat_template="{{ 'x' }}"),
    "chat_template_kwargs": _chat([U], chat_template_kwargs={"enable_thinking": True}),
    "reasoning_effort_high": _chat([U], reasoning_effort="high"),
    "reasoning_effort_none": _chat([U], reasoning_effort="none"),
    "reasoning_effort_max": _chat([U], reasoning_effort="max"),
    "two_users": _chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
    "starts_with_assistant": _chat([{"role": "assistant", "content": "Hi"}, U]),
    "tool_without_call": _chat([U, {"role": "tool", "tool_call_id": "abcdefghi", "content": "x"}]),
    "sampling": _chat([U], temperature=0.3, top_p=0.9, max_tokens=64, seed=7, stop=["\n\n"],
                      presence_penalty=0.5, frequency_penalty=0.25, top_k=40, min_p=0.05),
    "max_completion_tokens": _chat([U], max_completion_tokens=33, logprobs=True, top_logprobs=3),
    "stream": _chat([U], stream=True, stream_options={"include_usage": True}),
    "stop_token_ids": _chat([U], stop_token_ids=[5], skip_special_tokens=False),
    "response_format": _chat([U], response_format={"type": "json_object"}),
    "truncated": _chat([U], truncate_prompt_tokens=5),
    "truncated_right": _chat([U], truncate_prompt_tokens=4, truncation_side="right"),
    "too_long": _chat([{"role": "user", "content": "Paris and Rome " * 12000}]),
    "long_output": _chat([U], max_tokens=32760),
    # The pre-v11 guided call schema: replaces a JSON response_format, yields to the user's own
    # structured_outputs, is skipped for an undeclared named tool; v11+: the grammar branch.
    "required_json_object": _chat([U], tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}),
    "required_own_schema": _chat([U], tools=[WEATHER], tool_choice="required",
                                 structured_outputs={"json": {"type": "object"}}),
    "required_no_params": _chat([U], tools=[{"type": "function", "function": {"name": "ping"}}], tool_choice="required"),
    "required_single_call": _chat([U], tools=[WEATHER, SEARCH], tool_choice="required", parallel_tool_calls=False),
    "auto_regex": _chat([U], tools=[WEATHER], structured_outputs={"regex": "[a-z]+"}),
    "none_json_schema": _chat([U], tools=[WEATHER], tool_choice="none", response_format={
        "type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}),
    "auto_whitespace_only": _chat([U], tools=[WEATHER], structured_outputs={"disable_any_whitespace": True}),
    # Thinking: a v13 tokenizer renders [THINK] chunks, older ones refuse them.
    "thinking_chunk": _chat([U, {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up."},
                                                                 {"type": "text", "text": "Sunny."}]},
                             {"role": "user", "content": "Thanks!"}]),
    "reasoning_field": _chat([U, {"role": "assistant", "content": "Sunny.", "reasoning": "Look it up."},
                              {"role": "user", "content": "Thanks!"}]),
    "reasoning_then_call": _chat([U, {"role": "assistant", "reasoning_content": "Use the tool.", "tool_calls": [CALL9]},
                                  {"role": "tool", "tool_call_id": CALL9["id"], "content": "ok"}], tools=[SEARCH]),
}  # fmt: skip
OTHER_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "tokenize_chat": ({"messages": [U], "return_token_strs": True}, "/tokenize"),
    "tokenize_chat_tools": ({"messages": [U], "tools": [WEATHER]}, "/tokenize"),
    "tokenize_chat_template": ({"messages": [U], "chat_template": "x"}, "/tokenize"),
    "tokenize_prompt": ({"prompt": "Hello world", "return_token_strs": True}, "/tokenize"),
    "tokenize_unicode": ({"prompt": "東京 🗼 ok", "return_token_strs": True}, "/tokenize"),
    "tokenize_control_text": ({"prompt": "[INST] hi [/INST][TOOL_CALLS]"}, "/tokenize"),
    "tokenize_leading_space": ({"prompt": "  two  spaces", "add_special_tokens": False}, "/tokenize"),
    "detokenize": ({"tokens": [1, 3, 1183, 4, 5, 2]}, "/detokenize"),
    "completion": ({"prompt": " The weather in Paris is", "max_tokens": 5}, "/v1/completions/render"),
    "completion_truncated": ({"prompt": "One two three four five six", "max_tokens": 5, "truncate_prompt_tokens": 3},
                             "/v1/completions/render"),
    # The mistral tool parser adjusts a Responses request on its legacy branch, without the
    # pre-v11 call schema.
    "responses_required": ({"input": "What is the weather in Paris?", "request_id": "resp_fixed", "tool_choice": "required",
                            "tools": [{"type": "function", **WEATHER["function"]}]}, "/v1/responses/render"),
    "completion_truncated_right": ({"prompt": "One two three four", "max_tokens": 5, "truncate_prompt_tokens": 2,
                                    "truncation_side": "right"}, "/v1/completions/render"),
}  # fmt: skip
# Ids only one vocabulary has: (SentencePiece v3, Tekken).
VOCAB_CASES: dict[str, tuple[tuple[dict[str, Any], dict[str, Any]], str]] = {
    "detokenize_text": (({"tokens": [23325, 2294, 29473, 29910]}, {"tokens": [1072, 5525, 4304, 1032, 3514, 1177]}),
                        "/detokenize"),
    "detokenize_controls": (({"tokens": [1, 5, 23325, 6, 2]}, {"tokens": [1, 9, 1072, 32, 34, 35, 20, 2]}), "/detokenize"),
    "completion_ids": (({"prompt": [1, 23325], "max_tokens": 5}, {"prompt": [1, 1072, 5525], "max_tokens": 5}),
                       "/v1/completions/render"),
}  # fmt: skip

DERENDER = "/v1/chat/completions/derender"
TC, ARGS, THINK, END_THINK = "[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"
COMMON_OUTPUTS: dict[str, tuple[str, str]] = {
    "plain": ("The weather in Paris is sunny.", "stop"),
    "unicode": ("東京 🗼 is fine, merci.", "stop"),
    "cut": ("The answer is", "length"),
}
# Pre-v11 tokenizers (v3, v7) call tools as a JSON array after [TOOL_CALLS].
PRE_V11_OUTPUTS: dict[str, tuple[str, str]] = {
    "call": (f'{TC} [{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}]', "stop"),
    "two_calls": (f'{TC} [{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}, '
                  f'{{"name": "search", "arguments": {{"query": "東京 🗼"}}}}]', "stop"),
    "prose_then_call": (f'Let me check. {TC} [{{"name": "search", "arguments": {{"query": "x"}}}}]', "stop"),
    "cut_call": (f'{TC} [{{"name": "get_weather", "arguments": {{"city": "Par', "length"),
    "bad_json": (f"{TC} [not json]", "stop"),
}  # fmt: skip
# v11+ call one tool per [TOOL_CALLS]: name [ARGS] arguments.
V11_OUTPUTS: dict[str, tuple[str, str]] = {
    "call": (f'{TC}get_weather{ARGS}{{"city": "Paris"}}', "stop"),
    "two_calls": (f'{TC}get_weather{ARGS}{{"city": "Paris"}}{TC}search{ARGS}{{"query": "東京 🗼"}}', "stop"),
    "prose_then_call": (f'Let me check.{TC}search{ARGS}{{"query": "x"}}', "stop"),
    "cut_call": (f'{TC}get_weather{ARGS}{{"city": "Par', "length"),
    "bad_json": (f"{TC}get_weather{ARGS}{{not json", "stop"),
}  # fmt: skip
V13_OUTPUTS: dict[str, tuple[str, str]] = {
    "think": (f"{THINK}The user wants 東京.{END_THINK}It is sunny.", "stop"),
    "think_then_call": (f'{THINK}Use the tool.{END_THINK}{TC}search{ARGS}{{"query": "x"}}', "stop"),
    "cut_think": (f"{THINK}Still thinking about", "length"),
}
OUTPUTS: dict[str, dict[str, tuple[str, str]]] = {
    "v3": {**COMMON_OUTPUTS, **PRE_V11_OUTPUTS}, "tekken_v7": {**COMMON_OUTPUTS, **PRE_V11_OUTPUTS},
    "tekken_v11": {**COMMON_OUTPUTS, **V11_OUTPUTS}, "tekken_v13": {**COMMON_OUTPUTS, **V11_OUTPUTS, **V13_OUTPUTS},
}  # fmt: skip
# A call cut by max_tokens under --tool-call-parser mistral: vLLM's MistralParser on a mistral
# tokenizer returns the unparsed text after [TOOL_CALLS] as content; ours (the same parser as in
# HF mode) returns no content, and with tools the partial call. Named here; a stale entry fails.
DERENDER_DIVERGENCES = {"v3-tools|cut_call", "tekken_v7-tools|cut_call"}
DERENDER_REQUESTS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [U]},
    "tools": {"messages": [U], "tools": [WEATHER, SEARCH], "tool_choice": "auto"},
}


@functools.cache
def _raw_tokenizer(folder_dir: Path) -> Any:
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tekken = folder_dir / "tekken.json"
    return Tekkenizer.from_file(tekken) if tekken.is_file() else SentencePieceTokenizer(str(folder_dir / "tokenizer.model.v3"))


def _encode_output(folder_dir: Path, text: str) -> list[int]:
    """Control-token text as its id, the rest encoded as plain text."""
    raw = _raw_tokenizer(folder_dir)
    ids: list[int] = []
    for part in re.split(r"(\[TOOL_CALLS\]|\[ARGS\]|\[THINK\]|\[/THINK\])", text):
        if part in (TC, ARGS, THINK, END_THINK):
            ids.append(raw.get_special_token(part))
        elif part:
            ids.extend(raw.encode(part, bos=False, eos=False))
    return ids


def _derender_body(folder_dir: Path, output: tuple[str, str], request: dict[str, Any]) -> dict[str, Any]:
    text, finish = output
    ids = _encode_output(folder_dir, text)
    prompt = [1, 3, *_raw_tokenizer(folder_dir).encode("What is the weather in Paris?", bos=False, eos=False), 4]
    return {"chat_request": request, "prompt_token_ids": prompt,
            "generate_response": {"request_id": "generate-tokens-m", "prompt_token_ids": prompt,
                                  "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}]}}  # fmt: skip


def _cases(folder: str, folder_dir: Path) -> Iterator[tuple[str, dict[str, Any], str]]:
    for name, body in CHAT_CASES.items():
        yield name, body, "/v1/chat/completions/render"
    for name, (body, path) in OTHER_CASES.items():
        yield name, body, path
    for name, (bodies, path) in VOCAB_CASES.items():
        yield name, bodies[folder != "v3"], path
    for output_name, output in OUTPUTS[folder].items():
        for req_name, request in DERENDER_REQUESTS.items():
            yield f"derender|{output_name}|{req_name}", _derender_body(folder_dir, output, request), DERENDER


def _write_tekken_folder(folder: Path, version: str, extra: list[str] | None) -> None:
    """A tekken.json of `version` over the shipped vocabulary's first TEKKEN_RANKS ranks."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    shipped = json.loads((MISTRAL_DATA / "tekken_240911.json").read_text())
    config = {**shipped["config"], "version": version, "default_vocab_size": TEKKEN_SPECIALS + TEKKEN_RANKS}
    tekken: dict[str, Any] = {"config": config, "vocab": shipped["vocab"][:TEKKEN_RANKS]}
    if extra is not None:  # v7 files may leave the table out (mistral-common's built-in one)
        names = [str(t["token_str"]) for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
        names += [Tekkenizer.SPECIAL_TOKEN_TEMPLATE.format(id=i) for i in range(len(names), 32)] + extra
        tekken["special_tokens"] = [{"rank": i, "token_str": name, "is_control": True} for i, name in enumerate(names)]
    (folder / "tekken.json").write_text(json.dumps(tekken))
    (folder / "config.json").write_text(json.dumps({**MISTRAL_CONFIG, "vocab_size": TEKKEN_SPECIALS + TEKKEN_RANKS}))


@pytest.fixture(scope="module")
def folder_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dirs = {folder: tmp_path_factory.mktemp(f"mistral-{folder}") for folder in FOLDERS}
    shutil.copyfile(V3_MODEL, dirs["v3"] / "tokenizer.model.v3")
    (dirs["v3"] / "config.json").write_text(json.dumps(MISTRAL_CONFIG, indent=2))
    for folder, extra in TEKKEN_EXTRA.items():
        _write_tekken_folder(dirs[folder], folder.removeprefix("tekken_"), extra)
    return dirs


# Mistral-format folders (params.json, no config.json): max_model_len from max_seq_len, else
# max_position_embeddings, else 128000, as vLLM's adapt_config_dict (vLLM needs
# --config-format mistral to read them; ours reads params.json in mistral mode).
PARAMS = {"dim": 64, "n_layers": 2, "head_dim": 16, "hidden_dim": 128, "n_heads": 4, "n_kv_heads": 2,
          "norm_eps": 1e-5, "vocab_size": 32768, "rope_theta": 1e6}  # fmt: skip
PARAMS_FOLDERS = {"params_seq": {**PARAMS, "max_seq_len": 8192},
                  "params_pos": {**PARAMS, "max_position_embeddings": 16384}, "params_none": PARAMS}  # fmt: skip


@pytest.fixture(scope="module")
def params_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folders = {}
    for name, params in PARAMS_FOLDERS.items():
        folder = folders[name] = tmp_path_factory.mktemp(name)
        shutil.copyfile(V3_MODEL, folder / "tokenizer.model.v3")
        (folder / "params.json").write_text(json.dumps(params))
    return folders


def _split(setup: str) -> tuple[str, str]:
    folder, launch = setup.rsplit("-", 1)
    return folder, launch


@pytest.fixture(scope="module")
def vllm_results(folder_dirs: dict[str, Path], params_dirs: dict[str, Path]) -> dict[str, Any]:
    python = ref_venv() / "bin" / "python"
    runs = []
    for setup in SETUPS:
        folder = _split(setup)[0]
        cases = [[f"{setup}|{n}", b, p] for n, b, p in _cases(folder, folder_dirs[folder])]
        runs.append({"model": setup, "tool_parser": None, "reasoning_parser": None, "strict_level": None,
                     "launch_parsers": True, "cases": cases})  # fmt: skip
    runs += [{"model": name, "tool_parser": None, "reasoning_parser": None, "strict_level": None,
              "launch_parsers": True, "cases": [[name, {"prompt": "hi"}, "/tokenize"]]} for name in params_dirs]  # fmt: skip
    flags = {**{setup: LAUNCHES[_split(setup)[1]] for setup in SETUPS},
             **{name: ["--tokenizer-mode", "mistral", "--config-format", "mistral"] for name in params_dirs}}  # fmt: skip
    models = {**{setup: str(folder_dirs[_split(setup)[0]]) for setup in SETUPS}, **{n: str(d) for n, d in params_dirs.items()}}
    payload = {"models": models, "flags": flags, "runs": runs}
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONPATH": ""}  # fmt: skip
    proc = subprocess.run([str(python), str(HELPER)], input=json.dumps(payload), capture_output=True,
                          text=True, env=env, timeout=REF_TIMEOUT_S, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _config(folder_dir: Path, launch: str) -> ServiceConfig:
    if launch == "tools":
        return ServiceConfig(model=str(folder_dir), tokenizer_mode="mistral", tool_call_parser="mistral",
                             enable_auto_tool_choice=True)  # fmt: skip
    return ServiceConfig(model=str(folder_dir), tokenizer_mode="mistral")


@pytest.fixture(scope="module")
def renderers(folder_dirs: dict[str, Path]) -> dict[str, Renderer]:
    out = {}
    for folder, folder_dir in folder_dirs.items():
        bundle = ModelBundle.load(_config(folder_dir, "bare"))
        out.update({f"{folder}-{launch}": Renderer(_config(folder_dir, launch), bundle=bundle) for launch in LAUNCHES})
    return out


@pytest.fixture(scope="module")
def derenderers(folder_dirs: dict[str, Path], renderers: dict[str, Renderer]) -> dict[str, Derenderer]:
    return {setup: Derenderer(_config(folder_dirs[_split(setup)[0]], _split(setup)[1]), renderers[setup])
            for setup in SETUPS}  # fmt: skip


def _ours(renderer: Renderer, body: dict[str, Any], path: str) -> tuple[int, Any]:
    body = copy.deepcopy(body)
    try:
        if path == "/tokenize":
            return 200, renderer.tokenize(body)
        if path == "/detokenize":
            return 200, renderer.detokenize(body)
        if path == "/v1/responses/render":
            got: Any = renderer.render_responses(body)
            got.pop("render_fingerprint", None)
            return 200, got
        if path == "/v1/completions/render":
            got = renderer.render_completion(body, request_id_header=HEADER_ID)
            for item in got:
                item.pop("render_fingerprint", None)
            return 200, got
        got = renderer.render_chat(body, request_id_header=HEADER_ID)
    except RenderServiceError as exc:
        return exc.status, exc.to_body()
    got.pop("render_fingerprint")
    return 200, got


@pytest.mark.parametrize("setup", SETUPS)
def test_render_equals_vllm(
    setup: str, vllm_results: dict[str, Any], renderers: dict[str, Renderer], folder_dirs: dict[str, Path]
) -> None:
    problems = []
    folder = _split(setup)[0]
    for name, body, path in _cases(folder, folder_dirs[folder]):
        if path == DERENDER:
            continue
        expected = vllm_results[f"{setup}|{name}"]
        got = _ours(renderers[setup], body, path)
        if [got[0], got[1]] != expected:
            problems.append(f"{name}: ours {json.dumps(got)[:1500]}\n   vllm {json.dumps(expected)[:1500]}")
    assert not problems, f"{len(problems)} differ:\n" + "\n".join(problems)


@pytest.mark.parametrize("setup", SETUPS)
def test_derender_equals_vllm_batch_and_streams_equal_batch(
    setup: str, vllm_results: dict[str, Any], derenderers: dict[str, Derenderer], folder_dirs: dict[str, Path]
) -> None:
    derenderer = derenderers[setup]
    folder = _split(setup)[0]
    problems = []
    for name, body, path in _cases(folder, folder_dirs[folder]):
        if path != DERENDER:
            continue
        status, expected = vllm_results[f"{setup}|{name}"]
        try:
            ours: Any = derenderer.derender_chat(copy.deepcopy(body))
        except RenderServiceError as exc:
            if [exc.status, exc.to_body()] != [status, expected]:
                problems.append(f"{name}: ours {exc.status} {exc.to_body()}, vllm {status} {expected}")
            continue
        if f"{setup}|{name.split('|')[1]}" in DERENDER_DIVERGENCES:
            theirs_content = expected["choices"][0]["message"]["content"]
            assert status == 200 and theirs_content.startswith('[{"name"'), (name, expected)
            assert normalise(ours) != normalise(expected), f"stale divergence: {name}"
            continue
        if status != 200 or normalise(ours) != normalise(expected):
            problems.append(f"{name}:\n  ours {json.dumps(normalise(ours))[:1200]}\n  vllm {status} {json.dumps(expected)[:1200]}")
            continue
        view = stream_view_of_batch(chat_batch_views(ours)[0], body["chat_request"])
        ids = body["generate_response"]["choices"][0]["token_ids"]
        finish = {0: body["generate_response"]["choices"][0]["finish_reason"]}
        every = {"chat_request": body["chat_request"], "prompt_token_ids": body["prompt_token_ids"]}
        for kind, seed in (("one", 0), ("whole", 0), ("random", 1), ("random", 2)):
            sizes = {"one": lambda i, n: [1] * n, "whole": lambda i, n: [n]}.get(kind) or _random_sizes(seed)
            folded = fold_chat(run_stream(derenderer.derender_chat, chunk_bodies({0: ids}, sizes, finish=finish), every, {}))[0]
            folded.pop("roles")
            if folded != view:
                problems.append(f"{name} stream {kind} {seed}: {folded} != {view}")
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


def test_params_json_folder_max_model_len_equals_vllm(
    vllm_results: dict[str, Any], params_dirs: dict[str, Path]
) -> None:
    for name, folder in params_dirs.items():
        ours = Renderer(ServiceConfig(model=str(folder), tokenizer_mode="mistral")).tokenize({"prompt": "hi"})
        assert [200, ours] == vllm_results[name], name


def test_cases_cover_the_outcomes(vllm_results: dict[str, Any]) -> None:
    statuses = {v[0] for v in vllm_results.values()}
    assert {200, 400} <= statuses, statuses
    assert len(CHAT_CASES) >= 20


@pytest.mark.parametrize("folder", ["v3", "tekken_v13"])
def test_detokenize_out_of_vocabulary_is_a_typed_400(folder: str, renderers: dict[str, Renderer]) -> None:
    """vLLM's SentencePiece raises OUT_OF_RANGE there (a 500 from `launch render`); ours is a 400."""
    status, body = _ours(renderers[f"{folder}-bare"], {"tokens": [40000]}, "/detokenize")
    assert status == 400 and body["error"]["type"] == "BadRequestError", body
