"""Differential test: `prompt_embeds` under `--enable-prompt-embeds` == vLLM 0.33's render server.

One `vllm launch render --enable-prompt-embeds` on the weightless Qwen3 folder; our Renderer
on the same folder with `enable_prompt_embeds=True`. The tensors are made at test time by the
reference venv's torch (`_PAYLOAD_SCRIPT`), so no binary fixture is committed. Each case
compares the status and the whole body (token ids included where vLLM answers 200); the
cases are batched into one test per endpoint to keep the added time small.
"""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError

from .ref_server import RefRenderServer, build_render_model_dir, ref_venv

pytestmark = pytest.mark.vllm

SERVED = "Qwen/Qwen3-8B"
HEADER_ID = "fixed-request-id"

# name -> torch expression; run by the reference venv's python, printed as base64 torch.save bytes.
_PAYLOADS = {
    "f32": "torch.randn(3, 64)",
    "bf16": "torch.randn(2, 64, dtype=torch.bfloat16)",
    "f16": "torch.randn(4, 64, dtype=torch.float16)",
    "batch1": "torch.randn(1, 3, 64)",
    "batch2": "torch.randn(2, 3, 64)",
    "ndim1": "torch.randn(64)",
    "ndim4": "torch.randn(1, 1, 3, 64)",
    "hidden32": "torch.randn(3, 32)",
    "int64": "torch.zeros(3, 64, dtype=torch.int64)",
    "bool": "torch.zeros(3, 64, dtype=torch.bool)",
    "view": "torch.randn(10, 64)[2:5]",
    "transposed": "torch.randn(64, 3).t()",
    "param": "torch.nn.Parameter(torch.randn(3, 64))",
    "legacy": "LEGACY(torch.randn(3, 64))",
    "dict": "{'embeds': torch.randn(3, 64)}",
    "deque": "collections.deque([1, 2])",
    "too_long": "torch.zeros(41000, 64, dtype=torch.bfloat16)",
    "zero_rows": "torch.zeros(0, 64)",
    "expanded": "torch.randn(1, 64).expand(5, 64)",
    "over_2gib": "torch.zeros(1, 64, dtype=torch.bfloat16).expand(20_000_000, 64)",
    "million_rows": "torch.zeros(1, 64, dtype=torch.bfloat16).expand(1_000_000, 64)",
    "sparse": "torch.randn(4, 64).relu().to_sparse()",
}
_PAYLOAD_SCRIPT = """
import base64, collections, io, json, sys
import torch
torch.manual_seed(0)
def save(obj, legacy=False):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return base64.b64encode(buf.getvalue()).decode()
LEGACY = lambda obj: ("legacy", obj)
out = {}
for name, expr in json.loads(sys.argv[1]).items():
    value = eval(expr)
    out[name] = save(value[1], legacy=True) if isinstance(value, tuple) and value[0] == "legacy" else save(value)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def payloads() -> dict[str, str]:
    python = ref_venv() / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", _PAYLOAD_SCRIPT, json.dumps(_PAYLOADS)], capture_output=True, text=True, timeout=300, check=True
    )
    loaded: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.fixture(scope="module")
def embeds_ref(tmp_path_factory: pytest.TempPathFactory):
    """The one reference server of this module; our renderer loads its model folder."""
    model_dir = build_render_model_dir(tmp_path_factory.mktemp("embeds-model"))
    with RefRenderServer(model_dir, ("--enable-prompt-embeds",), tmp_path_factory.mktemp("embeds-ref-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def embeds_renderer(embeds_ref: RefRenderServer) -> Renderer:
    config = ServiceConfig(model=str(embeds_ref.model_dir), served_model_name=(SERVED,), enable_prompt_embeds=True)
    return Renderer(config)


def _completion_cases(p: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        # valid embeddings: validated, then vLLM's "No token_ids rendered"
        ("valid_f32", {"prompt_embeds": p["f32"]}),
        ("valid_bf16", {"prompt_embeds": p["bf16"]}),
        ("valid_f16", {"prompt_embeds": p["f16"]}),
        ("squeezed_batch1", {"prompt_embeds": p["batch1"]}),
        ("view", {"prompt_embeds": p["view"]}),
        ("transposed", {"prompt_embeds": p["transposed"]}),
        ("parameter", {"prompt_embeds": p["param"]}),
        ("legacy_format", {"prompt_embeds": p["legacy"]}),
        ("sparse_coo", {"prompt_embeds": p["sparse"]}),
        ("list", {"prompt_embeds": [p["f32"], p["bf16"]]}),
        ("embeds_win_over_prompt", {"prompt": "Hi", "prompt_embeds": p["f32"]}),
        # invalid payloads
        ("bad_base64", {"prompt_embeds": "not base64!"}),
        ("bad_padding", {"prompt_embeds": "AAA"}),
        ("empty", {"prompt_embeds": ""}),
        ("random_bytes", {"prompt_embeds": "aGVsbG8gd29ybGQsIG5vdCBhIHRlbnNvcg=="}),
        ("not_a_tensor", {"prompt_embeds": p["dict"]}),
        ("unsafe_global", {"prompt_embeds": p["deque"]}),
        ("ndim1", {"prompt_embeds": p["ndim1"]}),
        ("ndim3_batch2", {"prompt_embeds": p["batch2"]}),
        ("ndim4", {"prompt_embeds": p["ndim4"]}),
        ("hidden_size", {"prompt_embeds": p["hidden32"]}),
        ("int_dtype", {"prompt_embeds": p["int64"]}),
        ("bool_dtype", {"prompt_embeds": p["bool"]}),
        ("second_of_list_bad", {"prompt_embeds": [p["f32"], p["hidden32"]]}),
        ("too_long", {"prompt_embeds": p["too_long"]}),
        ("too_long_truncated", {"prompt_embeds": p["too_long"], "truncate_prompt_tokens": 10}),
        ("zero_rows", {"prompt_embeds": p["zero_rows"]}),
        ("expanded_stride0", {"prompt_embeds": p["expanded"]}),
        ("over_2gib_dense", {"prompt_embeds": p["over_2gib"]}),
        ("million_rows_truncated", {"prompt_embeds": p["million_rows"], "truncate_prompt_tokens": -1}),
        # refusals with embeddings
        ("suffix", {"prompt": "Hi", "suffix": "x", "prompt_embeds": p["f32"]}),
        ("suffix_echo", {"prompt": "Hi", "suffix": "x", "echo": True, "prompt_embeds": p["f32"]}),
        ("echo", {"echo": True, "prompt_embeds": p["f32"]}),
        ("prompt_logprobs", {"prompt_logprobs": 1, "prompt_embeds": p["f32"]}),
        # the placeholder token is a special token of the tokenizer under the flag
        ("placeholder_in_text", {"prompt": "a <prompt_embeds> b"}),
        ("placeholder_token_id", {"prompt": [151669, 9707]}),
    ]


def _user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def _part(data: str) -> dict[str, Any]:
    return {"type": "prompt_embeds", "data": data}


def _chat_cases(p: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    text = {"type": "text", "text": "hi"}
    return [
        ("one_part", {"messages": [_user(text, _part(p["f32"]))]}),
        ("two_parts", {"messages": [_user(_part(p["bf16"]), {"type": "text", "text": "and"}, _part(p["batch1"]))]}),
        ("parts_in_two_turns", {"messages": [
            _user(_part(p["f16"])), {"role": "assistant", "content": "ok"}, _user(text, _part(p["f32"]))]}),
        ("sparse_coo", {"messages": [_user(text, _part(p["sparse"]))]}),
        ("kept_reasoning", {"messages": [
            _user(text), {"role": "assistant", "content": "a", "reasoning": _part(p["bf16"])}]}),
        ("dropped_reasoning", {"messages": [
            _user(text), {"role": "assistant", "content": "a", "reasoning": _part(p["bf16"])}, _user(text)]}),
        ("plain_text", {"messages": [{"role": "user", "content": "hi"}], "return_token_offsets": True}),
        ("add_special_tokens", {"messages": [_user(text, _part(p["f32"]))], "add_special_tokens": True}),
        ("truncated", {"messages": [_user(text, _part(p["f32"]))], "truncate_prompt_tokens": 5}),
        ("bad_hidden", {"messages": [_user(_part(p["hidden32"]))]}),
        ("bad_base64", {"messages": [_user(_part("@@@@"))]}),
        ("not_a_tensor", {"messages": [_user(_part(p["dict"]))]}),
        ("empty_data", {"messages": [_user(_part(""))]}),
        ("reserved_text", {"messages": [{"role": "user", "content": "x <prompt_embeds> y"}]}),
        ("reserved_text_part", {"messages": [_user({"type": "text", "text": "<prompt_embeds>"}, _part(p["f32"]))]}),
        ("too_long", {"messages": [_user(_part(p["too_long"]))]}),
        ("zero_rows", {"messages": [_user(text, _part(p["zero_rows"]))]}),
        ("expanded_stride0", {"messages": [_user(_part(p["expanded"]))]}),
        ("over_2gib_dense", {"messages": [_user(_part(p["over_2gib"]))]}),
        ("million_rows", {"messages": [_user(text, _part(p["million_rows"]))]}),
        ("million_rows_truncated", {"messages": [_user(text, _part(p["million_rows"]))], "truncate_prompt_tokens": 8}),
        ("truncated_right", {"messages": [_user(_part(p["f32"]), text)], "truncate_prompt_tokens": 6,
                             "truncation_side": "right"}),
    ]


def _tokenize_cases(p: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("chat_part", {"messages": [_user(_part(p["f32"]))], "return_token_strs": True}),
        ("chat_bad_part", {"messages": [_user(_part(p["int64"]))]}),
        ("text_with_token", {"prompt": "x<prompt_embeds>y", "return_token_strs": True}),
    ]


def _ours(call: Any) -> tuple[int, Any]:
    try:
        return 200, call()
    except RenderServiceError as exc:
        return exc.status, exc.to_body()


def _mismatches(ref: RefRenderServer, path: str, cases: list[tuple[str, dict[str, Any]]], call: Any) -> list[str]:
    problems = []
    for name, body in cases:
        body = {"model": SERVED, **body}
        response = ref.post(path, copy.deepcopy(body), headers={"X-Request-Id": HEADER_ID})
        status, got = _ours(lambda body=body: call(copy.deepcopy(body)))
        if isinstance(got, dict):
            got.pop("render_fingerprint", None)  # our one addition (see test_vllm_differential)
        if status != response.status_code or got != response.json():
            problems.append(f"{name}: vLLM {response.status_code} {response.text[:600]}\n   ours {status} {json.dumps(got)[:600]}")
    return problems


@pytest.mark.parametrize("endpoint", ["completions", "chat", "tokenize"])
def test_prompt_embeds_equal_vllm(endpoint: str, embeds_ref, embeds_renderer: Renderer, payloads) -> None:
    """Every case of the endpoint in one batch: status and whole body equal to vLLM's."""
    if endpoint == "tokenize":
        problems = _mismatches(embeds_ref, "/tokenize", _tokenize_cases(payloads), embeds_renderer.tokenize)
    else:
        path, cases, render = {
            "completions": ("/v1/completions/render", _completion_cases(payloads), embeds_renderer.render_completion),
            "chat": ("/v1/chat/completions/render", _chat_cases(payloads), embeds_renderer.render_chat),
        }[endpoint]
        problems = _mismatches(embeds_ref, path, cases, lambda body: render(body, request_id_header=HEADER_ID))
    assert not problems, "\n".join(problems)
