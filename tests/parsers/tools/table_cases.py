"""Per family: a parser on its test tokenizer and a few outputs that visit its phases (for the
table-totality property test). A family ported to the table machine adds its entry here."""

from __future__ import annotations

from collections.abc import Callable

from parsers.registry import get_tool_parser
from parsers.tools._machine import TableToolParser

from .tool_parser_support import (
    WEATHER_TOOLS,
    deepseek,
    llama3,
    llama4,
    mistral_v3,
    mistral_v11,
    qwen3,
)

_DS_BLOCK = "<｜tool▁calls▁begin｜>{calls}<｜tool▁calls▁end｜>"
_DS = "<｜tool▁call▁begin｜>"
_SEP = "<｜tool▁sep｜>"
_QWEN = (
    "Hi <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call> tail"
)

CASES: dict[str, Callable[[], tuple[dict, list[str]]]] = {
    "qwen3_coder": lambda: (qwen3().vocab, [_QWEN, "<function=>{\"name\": \"x\"}</function>"]),
    "deepseek_v3": lambda: (deepseek().vocab, [
        "a" + _DS_BLOCK.format(calls=f"{_DS}function{_SEP}f\n```json\n{{}}\n```<｜tool▁call▁end｜>"),
        _DS_BLOCK.format(calls=f"{_DS}tool{_SEP}f\n```json\n{{}}\n```<｜tool▁call▁end｜>") + "b",
    ]),
    "deepseek_v31": lambda: (deepseek().vocab, [
        "a" + _DS_BLOCK.format(calls=f"{_DS}f{_SEP}{{}}<｜tool▁call▁end｜>{_DS}g\n"),
    ]),
}
_HERMES = (
    'Hi <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa\\u00e9", "d": 1}}\n'
    '</tool_call> x <tool_call>{"arguments": {}, "name": "f"}</tool_call><tool_call>[1]'
)
CASES["hermes"] = lambda: (qwen3().vocab, [_HERMES, '<tool_call>{"name": "f", "arguments": {"a": 1 2}}'])
CASES["qwen3_json"] = CASES["hermes"]
CASES["qwen3_xml"] = CASES["qwen3_coder"]
_LLAMA = '<|python_tag|>{"name": "f", "parameters": {"a": [1, "x"]}}; {"name": "g", "arguments": {}}{"x": 1}'
CASES["llama3_json"] = lambda: (llama3().vocab, [_LLAMA, '[ {"parameters": {}, "name": "f"} ]', "prose {"])
CASES["llama4_json"] = CASES["llama3_json"]
_PRE = '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, 3, {"arguments": "x", "name": "g"}] tail'
CASES["mistral"] = lambda: (mistral_v3().vocab, [_PRE, "hi [TOOL_CALLS] not json [TOOL_CALLS] x", "[TOOL_CALLS]{"])
# The same name on a v11 vocabulary (the factory picks the format): a key of its own.
CASES["mistral/v11"] = lambda: (mistral_v11().vocab, [
    'ok [TOOL_CALLS]get_weather[ARGS]{"city": "x", "days": "3"} t[TOOL_CALLS]f{"a": [1]}',
    "[TOOL_CALLS] [ARGS]not json [TOOL_CALLS][TOOL_CALLS]",
])
CASES["pythonic"] = lambda: (llama3().vocab, ["[f(a=1), g(b='x')]\nok", "Hi", "[f(a=1"])
CASES["llama4_pythonic"] = lambda: (llama4().vocab, [
    "<|python_start|>[f(a=1), g(b='x<|python_end|>')]<|python_end|> ok", "x", "[f(a=1",
])
CASES["olmo3"] = lambda: (llama3().vocab, [
    "Hi\n<function_calls>\nf(a=1)\ng(b='x')\n</function_calls> tail", "f(a=1) x",
    "<function_calls>\n</function_calls>",
])

_GRANITE = '{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}'
CASES["granite"] = lambda: (qwen3().vocab, [
    "Hi <tool_call>[" + _GRANITE + ', {"name": "f"}] tail <tool_call>[' + _GRANITE,
    '<|tool_call|>[{"arguments": {}, "name": "f"}]', "<tool_call> not json", "<tool_call>[] x",
])

_ERNIE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
CASES["ernie45"] = lambda: (qwen3().vocab, [
    "Hi\n\n<tool_call>\n" + _ERNIE + "\n</tool_call>\nx<tool_call> no </tool_call><tool_call>{",
    "<tool_call> junk <tool_call>{bad}</tool_call> tail", '<tool_call>{"arguments": {}, "name": "f"}',
])

CASES["hunyuan_a13b"] = lambda: (qwen3().vocab, [
    'Hi <tool_calls>[{"name": "get_weather", "arguments": {"city": "x"}}, {"a": 1}]</tool_calls> x',
    '<tool_calls> nope </tool_calls><tool_calls>[{"arguments": "s", "name": "f"}, 3', "<tool_calls>[]</tool_calls>",
])

_HY = "<tool_call>f<tool_sep><arg_key>a</arg_key> <arg_value>1</arg_value></tool_call>"
CASES["hy_v3"] = lambda: (_hy4_vocab(), [
    "Hi <tool_calls>" + _HY + " x " + _HY.replace("</tool_call>", ""), "<tool_calls><tool_call>g</tool_calls>",
])
_HY4 = "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"
CASES["hy_v4"] = lambda: (_hy4_vocab(), [
    "Hi <tool_calls>" + _HY4 + " x " + _HY4.replace("</tool_call>", ""), "</tool_calls> <tool_calls><tool_call> </tool_call>",
    "<tool_calls>" + _HY4 + "</tool_calls> after <tool_call>g</tool_call>", "a<tool_calls></tool_calls>b",
])


def _hy4_vocab():  # a Hy vocabulary whose markers carry no suffix
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "hy_v4").tokenizer

CASES["gigachat3"] = lambda: (qwen3().vocab, [
    'Hi<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "f", "arguments": {"a": 1}} x',
    "<|message_sep|> other", '<|function_call|>{"arguments": {}, "name": "f"}', "<|message_sep|>function call<|role_sep|>x",
])

CASES["lfm2"] = lambda: (_lfm2_vocab(), [
    " Hi <|tool_call_start|>[f(a=1), g(b='x')] <|tool_call_end|> ok <|tool_call_end|>x",
    "<|tool_call_start|> nope", "<|tool_call_start|>[f(a=1)] x<|tool_call_end|>", "<|tool_call_start|>[f(a=",
])


def _lfm2_vocab():
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "lfm2").tokenizer


def _plamo3() -> tuple[object, list[str]]:
    from parsers.tools import plamo3 as p

    from ..family_tokenizers import family_tokenizer

    call = p.BEGIN_TOOL_REQUEST + p.BEGIN_TOOL_NAME + "get_weather" + p.END_TOOL_NAME
    args = p.BEGIN_TOOL_ARGUMENTS + '{"city": "x", "days": "3"}' + p.END_TOOL_ARGUMENTS
    return family_tokenizer("tool", "plamo3").tokenizer, [
        "Hi " + p.BEGIN_TOOL_REQUESTS + call + args + p.END_TOOL_REQUEST + p.END_TOOL_REQUESTS
        + p.EOT + " tail",
        p.BEGIN_THINK + "r" + p.END_THINK + p.BEGIN_TOOL_REQUESTS + call + p.EOT + "x",
        p.BEGIN_TOOL_REQUESTS + p.BEGIN_TOOL_NAME + p.END_TOOL_NAME + args + p.END_TOOL_REQUESTS,
    ]


CASES["plamo3"] = _plamo3

CASES["apertus"] = lambda: (_apertus_vocab(), [
    ' Hi <|tools_prefix|>[{"f": {"a": 1}}, {}] x <|tools_suffix|> y <|tools_suffix|>',
    '<|tools_prefix|> nope', '<|tools_prefix|>{"f": "s"}', '<|tools_prefix|>[{"f": {"a": ',
])


def _apertus_vocab():
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "apertus").tokenizer


def _inkling() -> tuple[object, list[str]]:
    from parsers.tools import inkling as k

    from ..family_tokenizers import family_tokenizer

    call = k.MESSAGE_MODEL + k.CONTENT_INVOKE_TOOL_JSON + '{"name": "get_weather", "args": {"days": "3"}}'
    return family_tokenizer("tool", "inkling").tokenizer, [
        k.CONTENT_THINKING + "r" + k.END_MESSAGE + call + k.END_MESSAGE + k.MESSAGE_MODEL
        + k.CONTENT_TEXT + "t" + k.CONTENT_MODEL_END_SAMPLING,
        "a" + k.MESSAGE_MODEL + "h" + k.END_MESSAGE + call + k.MESSAGE_MODEL + "x",
        k.CONTENT_INVOKE_TOOL_JSON + '{"args": {}}' + k.END_MESSAGE + k.MESSAGE_MODEL,
    ]


CASES["inkling"] = _inkling


def family_cases(name: str) -> tuple[TableToolParser, list[str]]:
    vocab, texts = CASES[name]()
    parser = get_tool_parser(name.split("/")[0])(vocab, WEATHER_TOOLS)
    assert isinstance(parser, TableToolParser)
    return parser, texts

_GLM = "Hi <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call> t"
CASES["glm45"] = lambda: (qwen3().vocab, [
    _GLM, "<think>x</think><tool_call><arg_key>a</arg_key>x<arg_value>1", "<tool_call>f</tool_call>",
])
CASES["glm47"] = CASES["glm45"]
_XW = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
CASES["xlam"] = lambda: (qwen3().vocab, [
    " [" + _XW + ', 7, {"name": "f"}] tail', "Hi ```json\n[" + _XW + "]``` [TOOL_CALLS][1]\nx",
    "<think>a</think> <tool_call>[" + _XW + "]</tool_call> ``` open", "[" + _XW + ",",
    '[{"name": "f", "arguments": 3} ] ', "<think></think>[TOOL_CALLS]", "[1 2]",
])
CASES["phi4_mini_json"] = lambda: (qwen3().vocab, [
    "Hi functools[" + _XW + ', {"name": "f", "parameters": {}}] tail functools[', "functools[3]",
    "functools[" + _XW + ",", "functools[] x", 'functools[{"name": "f"}', "functools",
])

_MINIMAX = ('Hi <minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
            "<parameter name=days>3</parameter>\n</invoke>\n</minimax:tool_call> t")
CASES["minimax_m2"] = lambda: (qwen3().vocab, [
    _MINIMAX, "<invoke name='f'><parameter name=\"a\">1<parameter name=''>x</invoke></think>",
])

_G4 = '<|"|>'
CASES["gemma4"] = lambda: (qwen3().vocab, [
    "Hi <|channel>thought\nR<channel|><|tool_call>call:get_weather{city:" + _G4 + "Oslo" + _G4
    + ",days:3,f:{a:[1]}}<tool_call|> x <|tool_call>:f(a:b)<tool_call|>",
    "<|tool_call>call:f<tool_call|><|tool_call>g{<tool_call|>", "<channel|><|tool_call>call:f{a:" + _G4,
])
CASES["jamba"] = lambda: (qwen3().vocab, [
    "Hi <tool_calls>[" + _XW + ', {"name": "f", "arguments": 1}] </tool_calls> tail',
    "<tool_calls> x", "<tool_calls></tool_calls>", "<tool_calls>[" + _XW + "</tool_calls>",
    "<tool_calls>[" + _XW + "] y", "<tool_calls>[3", "<tool_calls>[] <tool_calls>",
])

_FG = "<escape>"
CASES["functiongemma"] = lambda: (qwen3().vocab, [
    "Hi <start_function_call>call:f{a:" + _FG + "x}" + _FG + ",b:" + _FG + "1" + _FG
    + "}<end_function_call> t <start_function_call>nope<escape><end_function_call>",
    "<start_function_call>call:<start_function_call>call:g{x:" + _FG + "y<start_function_call>",
    "<end_function_call><escape> only",
])
_KIMI = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
CASES["kimi_k2"] = lambda: (_kimi_vocab(), [
    f'Hi {_KIMI}{{"city": "x", "days": "3"}} t<|tool_call_end|><|tool_call_begin|>f<|tool_call_end|> x',
    '<|tool_calls_section_begin|><|tool_call_begin|>g<|tool_call_argument_begin|>{"name": "f"}'
    "<|tool_calls_section_end|></think><|tool_calls_section_end|>",
])


def _kimi_vocab():
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "kimi_k2").tokenizer
_IA, _IE = "<|action_start|><|plugin|>", "<|action_end|>"
CASES["internlm"] = lambda: (qwen3().vocab, [
    "Hi " + _IA + "x\n" + _XW + _IE + " t " + _IA + '{"name": 3}' + _IE,
    _IA + _IA + _IE, _IA + " " + _IE, _IA + '{"parameters": {}, "name": "f"}', _IA + "{",
])
CASES["longcat"] = lambda: (qwen3().vocab, [
    _HERMES.replace("tool_call>", "longcat_tool_call>"),
    '<longcat_tool_call>{"name": "f", "arguments": {"a": 1 2}}',
])

_M3 = "]<]minimax[>["
CASES["minimax_m3"] = lambda: (qwen3().vocab, [
    f'Hi {_M3}<tool_call>\n{_M3}<invoke name="get_weather">{_M3}<city>P{_M3}</city>{_M3}</invoke>\n{_M3}</tool_call> t',
    f"{_M3}<tool_call>{_M3}<invoke name=f>{_M3}<a>{_M3}<b>1{_M3}</b>{_M3}</a>",
])
CASES["granite4"] = lambda: (qwen3().vocab, [
    "Hi <tool_call>" + _XW + "</tool_call> t </tool_call><tool_call>[1]</tool_call>",
    '<tool_call><tool_call>{"name": "f", "arguments": 1}', "</tool_call> x <tool_call>",
    '<tool_call>{"name": "f", "arguments": {"a": 1}}<tool_call>',
])

CASES["seed_oss"] = lambda: (qwen3().vocab, [
    _QWEN.replace("tool_call>", "seed:tool_call>"), "<seed:think>x</seed:think><function=f>\n<parameter=a>1",
])

# Step 3.5 / Step 5: the Qwen3-Coder table (step5 with the content's whitespace kept).
CASES["step3p5"] = CASES["qwen3_coder"]
CASES["step5"] = lambda: (qwen3().vocab, [_QWEN, "  \n<tool_call>\n</tool_call>\n  ", "x</think>y"])
CASES["granite-20b-fc"] = lambda: (qwen3().vocab, [
    "Hi <function_call> " + _XW + " t <function_call><function_call>", "<function_call>[1] x",
    '<function_call>{"name": "f", "arguments": {"a": "<function_call>{"name": "g"',
    "<function_call>" + _XW + " <function_call>",
])
_DSML_CALL = '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">x</｜DSML｜parameter>'
CASES["deepseek_v32"] = lambda: (_deepseek_vocab(), [
    f"Hi <｜DSML｜function_calls>\n{_DSML_CALL}</｜DSML｜invoke>\n</｜DSML｜function_calls> t",
    '<｜DSML｜invoke name="">{"name": "f"}</｜DSML｜function_calls><｜DSML｜function_calls><｜DSML｜invoke name="g',
])
CASES["deepseek_v4"] = lambda: (_deepseek_vocab(), [
    f"<think>r</think>Hi <｜DSML｜tool_calls>\n{_DSML_CALL}</｜DSML｜tool_calls> t <｜DSML｜tool>",
    '</think><｜DSML｜toolcalls><｜DSML｜invoke name="f">">\n</｜DSML｜invoke><｜DSML｜invoke name="g',
])
CASES["deepseek_v41"] = lambda: (_deepseek_vocab(), [
    '<think>r</think>Hi <｜DSML｜ calls>\n<｜DSML｜ invoke name="f">\n<｜DSML｜ parameter name="a">1'
    "</｜DSML｜ invoke></｜DSML｜ calls> t",
])


def _deepseek_vocab():
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "deepseek_v4").tokenizer
CASES["ling3"] = CASES["glm45"]
CASES["mimo"] = CASES["qwen3_coder"]

_S3 = ("<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"f\">"
       "<steptml:parameter name=\"a\">1</steptml:parameter></steptml:invoke><｜tool_call_end｜>")
CASES["step3"] = lambda: (qwen3().vocab, [
    "Hi " + _S3 + "<｜tool_calls_end｜> t", "<｜tool_calls_begin｜>x<｜tool_calls_end｜>y", _S3,
])

CASES["poolside_v1"] = lambda: (qwen3().vocab, [
    "Hi <tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> t <tool_call>g",
    "<tool_call>f\n<arg_key>a</arg_key><arg_value>{1}</arg_value></tool_call> x", "a </tool_call>",
])

_K2H = "<ifm|tool_call>get_weather<ifm|arg_key>city</ifm|arg_key><ifm|arg_value>x</ifm|arg_value></ifm|tool_call>"
CASES["k2_horizon"] = lambda: (_k2h_vocab(), [
    f"Hi <ifm|tool_calls>{_K2H}</ifm|tool_calls> t </ifm|tool_calls><ifm|tool_calls>",
    "</ifm|tool_calls><ifm|tool_calls><ifm|tool_calls>x</ifm|tool_calls>", "<ifm|tool_calls>open",
])


def _k2h_vocab():
    from ..family_tokenizers import family_tokenizer

    return family_tokenizer("tool", "k2_horizon").tokenizer

_DOTS = '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>'
CASES["dots"] = lambda: (qwen3().vocab, [
    f"Hi <dots_function_call>\n{_DOTS}\n{_DOTS}\n</dots_function_call> t",
    '<dots_function_call>{"name": "get_weather", "arguments": {"city": "x"}}</dots_function_call>',
    "<dots_function_call><invoke name=\"f\"></dots_function_call><dots_function_call>open",
])
