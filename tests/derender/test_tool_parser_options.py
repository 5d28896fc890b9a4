"""Derender with the engine-based tool parsers and their serving-layer options, against vLLM.

vLLM 0.33 builds `--tool-call-parser mistral` / `qwen3_coder` with more than the tools: the
parser engine drops the tokenizer's special tokens from text, and with no reasoning parser
`Parser.__init__` sets the tool parser's `skip_reasoning_parsing`, so `[THINK]...[/THINK]`
or a stray `</think>` stays in the content. render_service/derender/parsing.py passes the
same options; these tests run the in-process Derenderer (batch, and a per-token stream that
must concatenate to it) against vLLM's batch result (`DelegatingParser.parse` +
`assemble_chat_message_fields`, in the reference venv through tests/parsers/vllm_ref.py).
"""

from __future__ import annotations

import json
import shutil

import pytest

from render_service.config import ServiceConfig
from render_service.derender_api import Derenderer
from render_service.model import ModelBundle

from ..parsers.family_tokenizers import family_tokenizer
from ..parsers.tokenizers_util import mistral_like, qwen3
from ..parsers.vllm_ref import VllmRef
from .conftest import SECRET, _BundleRenderer
from .helpers import (
    batch_chat,
    batch_view,
    chat_request,
    concat_chat,
    same_message,
    splits_of,
    stream,
)

pytestmark = pytest.mark.vllm

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
W = '{"city": "Paris"}'
MISTRAL_OUTPUTS = [
    "A[THINK]r[/THINK]B  ",
    "[THINK]plan[/THINK]Answer <|im_end|> done<|endoftext|>",
    f"Hi  \n[TOOL_CALLS]get_weather[ARGS]{W}  ",
    f"[THINK]r[/THINK]\n\n[TOOL_CALLS]get_weather[ARGS]{W}<|im_end|>",
    "  just text  ",
]
CODER_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
CODER_OUTPUTS = [
    " a</think>b ",
    f"R</think>\n\nHi {CODER_CALL}  ",
    f"  Hi  \n{CODER_CALL}  \n",
    "x<|im_end|>y",
]
_K3_CALL = ('<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
            'type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>')
K3_OUTPUTS = [  # kimi_k3: the reasoning parser keeps the tools channel raw only with tools
    f"<|open|>think<|sep|>plan<|close|>think<|sep|><|open|>response<|sep|>Hi<|close|>response<|sep|>{_K3_CALL}"
    "<|close|>message<|sep|>",
    "<|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>Just text<|close|>response<|sep|>",
    f"Checking.<|close|>response<|sep|>{_K3_CALL}",
]
# (tool parser, reasoning parser or None, tokenizer bundle, outputs)
SETUPS = [
    ("mistral", None, mistral_like, MISTRAL_OUTPUTS),
    ("mistral", "mistral", mistral_like, MISTRAL_OUTPUTS),
    ("qwen3_coder", None, qwen3, CODER_OUTPUTS),
    ("qwen3_coder", "qwen3", qwen3, CODER_OUTPUTS),
    ("kimi_k3", "kimi_k3", lambda: family_tokenizer("tool", "kimi_k3"), K3_OUTPUTS),
]
TOOL_CHOICES = ["auto", "none"]
PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def ref(vllm_ref: VllmRef) -> VllmRef:
    return vllm_ref


def _model_dir(tmp_path_factory, bundle):  # noqa: ANN001, ANN202
    """A weightless model folder around the test tokenizer (config.json is all derender reads)."""
    out = tmp_path_factory.mktemp(bundle.name)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bundle.directory / name, out / name)
    (out / "config.json").write_text(json.dumps(
        {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
         "max_position_embeddings": 4096}), encoding="utf-8")  # fmt: skip
    return out


@pytest.mark.parametrize("tool_choice", TOOL_CHOICES)
@pytest.mark.parametrize(("tool", "reasoning", "make_bundle", "outputs"), SETUPS,
                         ids=[f"{t}-{r}" for t, r, _, _ in SETUPS])
def test_derender_matches_vllm_batch(ref, tmp_path_factory, tool, reasoning, make_bundle,
                                     outputs, tool_choice) -> None:  # noqa: ANN001
    bundle = make_bundle()
    config = ServiceConfig(model=str(_model_dir(tmp_path_factory, bundle)),
                           stream_state_secret=SECRET, tool_call_parser=tool,
                           reasoning_parser=reasoning, enable_auto_tool_choice=True)  # fmt: skip
    derenderer = Derenderer(config, _BundleRenderer(ModelBundle.load(config)))
    req = chat_request(tools=TOOLS, tool_choice=tool_choice)
    prompt = bundle.encode(PROMPT)
    errors = []
    for text in outputs:
        ids = bundle.encode(text)
        theirs = ref.call("parse", tokenizer_dir=str(bundle.directory), tool_parser=tool,
                          reasoning_parser=reasoning, enable_auto_tools=True, text=text,
                          prompt_token_ids=prompt,
                          request={"tools": TOOLS, "tool_choice": tool_choice})  # fmt: skip
        batch = batch_view(batch_chat(derenderer, ids, chat_request=req, prompt_token_ids=prompt))
        mine = (batch["reasoning"], batch["content"],
                [(c["name"], json.loads(c["arguments"])) for c in batch["tool_calls"]])
        expected = (theirs["reasoning"], theirs["content"],
                    [(c["name"], json.loads(c["arguments"])) for c in theirs["tool_calls"]])
        if mine != expected and not _leading_ws_divergence(mine, expected):
            errors.append(f"{text!r}: derender {mine} != vLLM {expected}")
        chunks = stream(derenderer.derender_chat, ids, splits_of(len(ids), "one"),
                        first_body={"chat_request": req, "prompt_token_ids": prompt})  # fmt: skip
        if not same_message(concat_chat(chunks), batch):
            errors.append(f"{text!r}: stream {concat_chat(chunks)} != batch {batch}")
    assert not errors, "\n".join(errors)


def _leading_ws_divergence(mine, expected) -> bool:  # noqa: ANN001
    """The engine families' named divergence (parsers/tools/_engine.py): with a call returned
    vLLM strips the content; whitespace at its very start streamed before the call was known."""
    (reasoning, content, calls), (v_reasoning, v_content, v_calls) = mine, expected
    return (bool(calls) and calls == v_calls and reasoning == v_reasoning and bool(content)
            and content[:1].isspace() and content.lstrip() == v_content)
