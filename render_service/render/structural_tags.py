"""xgrammar structural tags for tool calls, built the way vLLM 0.33 builds them at render time.

vLLM constrains tool calls with an xgrammar `StructuralTag` and sends it to the engine as
`structured_outputs.structural_tag = json.dumps(tag.model_dump())`. The engine compares
nothing, but the render output is compared byte for byte, so this module builds the same
JSON from plain dicts (xgrammar pulls torch; it cannot be a runtime dependency):

- every format dict lists pydantic's fields in declaration order, defaults included
  (`JSONSchemaFormat` always carries `style`, `any_order`, `max_whitespace_cnt`, `excludes`);
- `json.dumps` with its defaults (ASCII escapes, ", " and ": " separators), like vLLM;
- a tool's argument schema is its `parameters` only when the tool is strict (else `true`,
  any JSON), exactly xgrammar's `_get_function_parameters`.

Theory of operation (vLLM's `DelegatingParser._apply_structural_tag` +
`structural_tag_registry`): `resolve_strictness` decides whether a tag applies at all and pins
each tool's `strict` from the request and `--tool-strict-level`; `tool_call_format` then builds
the model family's format for the simplified choice ("auto", "required" or "forced" = a named
tool). `parallel_tool_calls=false` sets `stop_after_first` on every tool-call list format;
vLLM does that after building (`limit_to_single_tool_call`), here the builders take it as an
argument so no walk can ever reach into a user's JSON schema.

vLLM always passes `reasoning=False` from `DelegatingParser` (the composition every parser
here uses), so the tags never carry xgrammar's reasoning prefix, whatever the reasoning parser.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "STRUCTURAL_TAG_MODELS",
    "harmony_output_format",
    "json_schema_format",
    "TagTool",
    "dump_structural_tag",
    "resolve_strictness",
    "tool_call_format",
]

_THINK_EXCLUDES = ("<think>", "</think>")
_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"


@dataclass(frozen=True, slots=True)
class TagTool:
    """One function tool as the tag builders see it, `strict` already pinned."""

    name: str
    parameters: dict[str, Any] | None
    strict: bool

    @property
    def argument_schema(self) -> dict[str, Any] | bool:
        if not self.strict or self.parameters is None:
            return True
        return self.parameters


def resolve_strictness(
    tools: Sequence[tuple[str, dict[str, Any] | None, bool | None]], choice: str, level: str
) -> list[TagTool] | None:
    """vLLM's `resolve_tool_strictness`: None means no tag; else the tools, `strict` pinned.

    `choice` is "auto", "required" or "forced". Auto without a strict tool needs the server
    level above "auto"; a tool is strict if it says `strict: true` or the level is "parameter".
    """
    if choice == "auto" and level == "auto" and not any(strict is True for _, _, strict in tools):
        return None
    every_tool_strict = level == "parameter"
    return [TagTool(name, params, every_tool_strict or strict is True) for name, params, strict in tools]


def dump_structural_tag(tag_format: dict[str, Any]) -> str:
    """`json.dumps(StructuralTag(format=...).model_dump())`."""
    return json.dumps({"type": "structural_tag", "format": tag_format})


def tool_call_format(
    model: str, tools: Sequence[TagTool], choice: str, single_call: bool, token_suffix: str = ""
) -> dict[str, Any]:
    """The tool-call format of `model` ("forced": `tools` is the one named tool); `token_suffix`
    is the checkpoint's marker suffix, which only hy_v4's builder takes (as in vLLM)."""
    if model == "hy_v4":
        return _hy_v4(list(tools), choice, single_call, token_suffix)
    return _BUILDERS[model](list(tools), choice, single_call)


# -- xgrammar format dicts (pydantic field order, defaults included) --------------------------


def _json_schema(schema: dict[str, Any] | bool, style: str = "json") -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": schema,
        "style": style,
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def json_schema_format(schema: dict[str, Any] | bool) -> dict[str, Any]:
    """xgrammar's `JSONSchemaFormat(json_schema=schema)` as a dict."""
    return _json_schema(schema)


def _tag(begin: str, content: dict[str, Any], end: str) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _triggered(
    triggers: list[str],
    tags: list[dict[str, Any]],
    single_call: bool,
    *,
    at_least_one: bool = False,
    excludes: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "type": "triggered_tags",
        "triggers": triggers,
        "tags": tags,
        "at_least_one": at_least_one,
        "stop_after_first": single_call,
        "excludes": list(excludes),
    }


def _separated(tags: list[dict[str, Any]], separator: str, stop_after_first: bool) -> dict[str, Any]:
    return {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": separator,
        "at_least_one": True,
        "stop_after_first": stop_after_first,
    }


# -- one builder per model family ---------------------------------------------------------------


def _hermes_style(start: str, end: str) -> Callable[[list[TagTool], str, bool], dict[str, Any]]:
    """vLLM's "hermes" builder over a family's call markers: each tool with and without
    newlines around the JSON."""

    def build(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
        tags = [
            _tag(
                f'{start}{newline}{{"name": "{tool.name}", "arguments": ',
                _json_schema(tool.argument_schema),
                f"}}{newline}{end}",
            )
            for tool in tools
            for newline in ("\n", "")
        ]
        if choice == "auto":
            return _triggered([start], tags, single_call)
        return _separated(tags, "", choice == "forced" or single_call)

    return build


_hermes = _hermes_style("<tool_call>", "</tool_call>")


def _llama(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """xgrammar "llama": bare `{"name": ..., "parameters": ...}` objects."""
    tags = [
        _tag(f'{{"name": "{tool.name}", "parameters": ', _json_schema(tool.argument_schema), "}")
        for tool in tools
    ]
    if choice == "forced":
        return tags[0]
    return _triggered(
        ['{"name": '], tags, single_call, at_least_one=choice == "required", excludes=_THINK_EXCLUDES
    )


def _qwen3_coder(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """xgrammar "qwen_3_coder": `<tool_call><function=NAME>` with XML parameters."""
    tags = [
        _tag(
            f"<tool_call>\n<function={tool.name}>\n",
            _json_schema(tool.argument_schema, style="qwen_xml"),
            "\n</function>\n</tool_call>",
        )
        for tool in tools
    ]
    if choice == "forced":
        return tags[0]
    return _triggered(
        ["<tool_call>\n<function="],
        tags,
        single_call,
        at_least_one=choice == "required",
        excludes=_THINK_EXCLUDES,
    )


def _deepseek(call_begin: Callable[[str], str], call_end: str, separator: str) -> Callable[..., dict[str, Any]]:
    """xgrammar "deepseek_r1" / "deepseek_v3_1": calls inside one tool-calls block."""

    def build(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
        if choice == "forced":
            tool = tools[0]
            return _tag(
                _DS_CALLS_BEGIN + call_begin(tool.name),
                _json_schema(tool.argument_schema),
                call_end + _DS_CALLS_END,
            )
        calls = [_tag(call_begin(tool.name), _json_schema(tool.argument_schema), call_end) for tool in tools]
        block = _tag(_DS_CALLS_BEGIN, _separated(calls, separator, single_call), _DS_CALLS_END)
        if choice == "required":
            return block
        return _triggered([_DS_CALLS_BEGIN], [block], single_call, excludes=_THINK_EXCLUDES)

    return build


_KIMI_SECTION_BEGIN = "<|tool_calls_section_begin|>"
_KIMI_SECTION_END = "<|tool_calls_section_end|>"
_KIMI_CALL_BEGIN = "<|tool_call_begin|>"


def _kimi(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """xgrammar "kimi": `functions.NAME:IDX` calls inside one tool-calls section."""
    calls = [
        _tag(
            f"{_KIMI_CALL_BEGIN}functions.{tool.name}:",
            {"type": "sequence", "elements": [
                {"type": "regex", "pattern": r"\d+"},
                {"type": "const_string", "value": "<|tool_call_argument_begin|>"},
                _json_schema(tool.argument_schema),
            ]},
            "<|tool_call_end|>",
        )
        for tool in tools
    ]  # fmt: skip
    begin = {"type": "const_string", "value": _KIMI_SECTION_BEGIN}
    end = {"type": "const_string", "value": _KIMI_SECTION_END}
    if choice == "forced":
        return {"type": "sequence", "elements": [begin, calls[0], end]}
    if choice == "required":
        return {"type": "sequence", "elements": [begin, _separated(calls, "", single_call), end]}
    if not calls:
        return {"type": "any_text", "excludes": list(_THINK_EXCLUDES), "max_tokens": None, "max_chars": None}
    section = _tag(_KIMI_SECTION_BEGIN, _separated(calls, "", single_call), _KIMI_SECTION_END)
    return _triggered(
        [_KIMI_SECTION_BEGIN], [section], single_call, excludes=(*_THINK_EXCLUDES, _KIMI_CALL_BEGIN)
    )


# Harmony (vLLM's own "harmony" builder, vllm/parser/harmony.py): a call may be headed either
# way gpt-oss writes it, on any channel, with either json content type; the end is <|end|> or
# "" (Harmony's stop tokens, which xgrammar may not see under a constraint).
_HARMONY_END = ["<|end|>", ""]
_HARMONY_CONSTRAINS = (" json", " <|constrain|>json")
_HARMONY_CHANNELS = ("<|channel|>commentary", "<|channel|>analysis", "<|channel|>final")
_HARMONY_CALL_BEGINS = (
    " to=functions.{name}{channel}{constrain}<|message|>",
    "{channel} to=functions.{name}{constrain}<|message|>",
)
_HARMONY_FINAL = "<|channel|>final{constrain}<|message|>"


def _any_text(*excludes: str) -> dict[str, Any]:
    return {"type": "any_text", "excludes": list(excludes), "max_tokens": None, "max_chars": None}


def _harmony_prefix(content: dict[str, Any], *, commentary: bool) -> dict[str, Any]:
    """An optional analysis message (and commentary preamble), then `content`."""
    elements = []
    for channel in ("analysis", "commentary") if commentary else ("analysis",):
        message = _tag(f"<|channel|>{channel}<|message|>", _any_text(), "<|end|>")
        sequence = {"type": "sequence", "elements": [message, {"type": "const_string", "value": "<|start|>assistant"}]}
        elements.append({"type": "optional", "content": sequence})
    return {"type": "sequence", "elements": [*elements, content]}


def _harmony(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    del single_call  # no call list in this format: nothing to stop after the first
    tags: list[dict[str, Any]] = [
        {"type": "tag", "begin": pattern.format(name=tool.name, channel=channel, constrain=constrain),
         "content": _json_schema(tool.argument_schema), "end": list(_HARMONY_END)}
        for tool in tools
        for pattern in _HARMONY_CALL_BEGINS
        for constrain in _HARMONY_CONSTRAINS
        for channel in _HARMONY_CHANNELS
    ]  # fmt: skip
    if choice == "auto":
        tags.extend(
            {"type": "tag", "begin": _HARMONY_FINAL.format(constrain=constrain), "content": _any_text(),
             "end": list(_HARMONY_END)}
            for constrain in (*_HARMONY_CONSTRAINS, "")
        )  # fmt: skip
    return _harmony_prefix({"type": "or", "elements": tags}, commentary=True)


def harmony_output_format(user_format: dict[str, Any]) -> dict[str, Any]:
    """vLLM's Harmony `_adjust_output_format`: the request's own constraint applies to the
    final message, after an optional analysis message (a JSON schema under either json
    content type)."""
    if user_format.get("type") == "json_schema":
        content: dict[str, Any] = {"type": "or", "elements": [
            {"type": "tag", "begin": _HARMONY_FINAL.format(constrain=constrain), "content": user_format,
             "end": list(_HARMONY_END)}
            for constrain in _HARMONY_CONSTRAINS
        ]}  # fmt: skip
    else:
        content = {"type": "tag", "begin": _HARMONY_FINAL.format(constrain=""), "content": user_format,
                   "end": list(_HARMONY_END)}  # fmt: skip
    return _harmony_prefix(content, commentary=False)

def _plamo3(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """vLLM's own "plamo3" builder: requests inside one tool-requests block, which may end
    with or without the end-of-turn tag."""
    requests = [
        _tag(
            _PLAMO_REQUEST + _PLAMO_NAME + tool.name + _PLAMO_NAME_END + _PLAMO_ARGS,
            _json_schema(tool.argument_schema),
            _PLAMO_ARGS_END + _PLAMO_REQUEST_END,
        )
        for tool in tools
    ]
    body = _separated(requests, "", choice == "forced" or single_call)
    block = {"type": "tag", "begin": _PLAMO_REQUESTS, "content": body,
             "end": [_PLAMO_REQUESTS_END, _PLAMO_REQUESTS_END + "<|plamo:tag|>"]}  # fmt: skip
    if choice == "auto":
        return _triggered([_PLAMO_REQUESTS], [block], single_call)
    return block


_PLAMO_REQUESTS = "<|plamo:begin_tool_requests:plamo|>"
_PLAMO_REQUESTS_END = "<|plamo:end_tool_requests:plamo|>"
_PLAMO_REQUEST = "<|plamo:begin_tool_request:plamo|>"
_PLAMO_REQUEST_END = "<|plamo:end_tool_request:plamo|>"
_PLAMO_NAME = "<|plamo:begin_tool_name:plamo|>"
_PLAMO_NAME_END = "<|plamo:end_tool_name:plamo|>"
_PLAMO_ARGS = "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
_PLAMO_ARGS_END = "<|plamo:end_tool_arguments:plamo|>"

def _dsml(calls: str, invoke: str, style: str, *, closed_without_tools: bool = False) -> Callable[..., dict[str, Any]]:
    """xgrammar "deepseek_v3_2" / "deepseek_v4" / "deepseek_v4_1": DSML invokes in one block
    (`closed_without_tools`: V4.1 also forbids the block when no tool is available)."""
    begin, end = f"<｜DSML｜{calls}>", f"</｜DSML｜{calls}>"

    def build(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
        invokes = [
            _tag(f'<｜DSML｜{invoke} name="{tool.name}">\n', _json_schema(tool.argument_schema, style=style),
                 f"</｜DSML｜{invoke}>\n")
            for tool in tools
        ]  # fmt: skip
        head = {"type": "const_string", "value": "\n\n" + begin + "\n"}
        tail = {"type": "const_string", "value": end}
        if choice == "forced":
            return {"type": "sequence", "elements": [head, invokes[0], tail]}
        if choice == "required":
            return {"type": "sequence", "elements": [head, _separated(invokes, "", single_call), tail]}
        if not invokes:
            excludes = [*_THINK_EXCLUDES, *([begin] if closed_without_tools else [])]
            return {"type": "any_text", "excludes": excludes, "max_tokens": None, "max_chars": None}
        block = _tag(begin + "\n", _separated(invokes, "", single_call), end)
        return _triggered([begin], [block], single_call, excludes=_THINK_EXCLUDES)

    return build


def _const(value: str) -> dict[str, Any]:
    return {"type": "const_string", "value": value}


def _sequence(*elements: dict[str, Any]) -> dict[str, Any]:
    return {"type": "sequence", "elements": list(elements)}


def _one_or_any(formats: list[dict[str, Any]]) -> dict[str, Any]:
    return formats[0] if len(formats) == 1 else {"type": "or", "elements": formats}


# GLM-4.7's control tokens: never free text inside a value (vLLM's _GLM_4_7_VALUE_EXCLUDES).
_GLM_EXCLUDES = ("<think>", "</think>", "<tool_call>", "</tool_call>",
                 "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")  # fmt: skip
_GLM_TEXT_EXCLUDES = [e for e in _GLM_EXCLUDES if e != "<tool_call>"]  # the trigger stays


def _glm_value(prop: Any) -> dict[str, Any]:
    """vLLM's `_glm_4_7_value_format`: a raw value as the chat template writes it."""
    prop = prop if isinstance(prop, dict) else {}
    if "enum" in prop:
        return _one_or_any([_const(v if isinstance(v, str) else json.dumps(v)) for v in prop["enum"]])
    kind = prop.get("type")
    text = {"type": "any_text", "excludes": list(_GLM_EXCLUDES), "max_tokens": None, "max_chars": None}
    if isinstance(kind, list):
        formats = [_glm_value({"type": k}) for k in kind if k != "string"]
        return _one_or_any([*formats, text] if "string" in kind else formats)
    if kind in (None, "string"):
        return text
    return _json_schema({"type": kind})


def _glm_plain_properties(params: dict[str, Any]) -> dict[str, Any] | None:
    properties = params.get("properties")
    if (not isinstance(properties, dict) or not properties or params.get("additionalProperties") is True
            or any(key in params for key in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties"))):
        return None
    return properties


def _glm_tool_tag(tool: TagTool) -> dict[str, Any]:
    """A strict tool's schema-pinned tag, or vLLM's shallow tag (keys and value kinds)."""
    begin = f"<tool_call>{tool.name}"
    properties = None if tool.strict else _glm_plain_properties(tool.parameters or {})
    if properties is None:
        return _tag(begin, _json_schema(tool.argument_schema, style="glm_xml"), "</tool_call>")
    pairs = [
        _sequence(_const(f"<arg_key>{key}</arg_key><arg_value>"), _glm_value(prop), _const("</arg_value>"))
        for key, prop in properties.items()
    ]
    return _tag(begin, {"type": "star", "content": _one_or_any(pairs)}, "</tool_call>")


def _glm_4_7(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """vLLM's own "glm_4_7" builder; strict-only requests get xgrammar's builtin."""
    tags = [_glm_tool_tag(tool) for tool in tools]
    if all(tool.strict for tool in tools):
        if choice == "forced":
            return tags[0]
        return _triggered(["<tool_call>"], tags, single_call, at_least_one=choice == "required",
                          excludes=_GLM_TEXT_EXCLUDES)  # fmt: skip
    if choice == "auto":
        return _triggered(["<tool_call>"], tags, single_call, excludes=_GLM_TEXT_EXCLUDES)
    return _separated(tags, "", choice == "forced" or single_call)


def _minimax(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """vLLM's own "minimax" builder: invokes inside one `<minimax:tool_call>` block."""
    tags = [
        _tag(f'<invoke name="{tool.name}">\n', _json_schema(tool.argument_schema, style="minimax_xml"),
             "</invoke>\n")  # fmt: skip
        for tool in tools
    ]
    if choice == "auto":
        block = _tag("<minimax:tool_call>\n", _separated(tags, "", single_call), "</minimax:tool_call>")
        return _triggered(["<minimax:tool_call>"], [block], single_call, excludes=_THINK_EXCLUDES)
    return _sequence(_const("\n<minimax:tool_call>\n"), _separated(tags, "", choice == "forced" or single_call),
                     _const("</minimax:tool_call>"))  # fmt: skip


def _mimo(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """xgrammar "mimo": `<tool_call><function=NAME>` with Qwen XML parameters, no newlines."""
    tags = [
        _tag(f"<tool_call><function={tool.name}>", _json_schema(tool.argument_schema, style="qwen_xml"),
             "</function></tool_call>")  # fmt: skip
        for tool in tools
    ]
    if choice == "forced":
        return tags[0]
    return _triggered(["<tool_call>"], tags, single_call, at_least_one=choice == "required",
                      excludes=["<think>", "</think>", "</tool_call>", "<function="])  # fmt: skip


def _hy_v4(tools: list[TagTool], choice: str, single_call: bool, suffix: str = "") -> dict[str, Any]:
    """vLLM's own "hy_v4" builder: the skeleton only (names, keys, tag order), values free
    text; required keys in order, then any optional ones any number of times."""
    m = {t: (f"<{t}{suffix}>", f"</{t}{suffix}>") for t in ("tool_calls", "tool_call", "arg_key", "arg_value")}

    def pair(key: str) -> dict[str, Any]:
        return _sequence(_const(m["arg_key"][0]), _const(key), _const(m["arg_key"][1]),
                         _const(m["arg_value"][0]), _any_text(), _const(m["arg_value"][1]))  # fmt: skip

    def call(tool: TagTool) -> dict[str, Any]:
        params = tool.parameters if isinstance(tool.parameters, dict) else {}
        properties, required = params.get("properties") or {}, params.get("required") or []
        keys = [k for k in properties if k in set(required)] + [k for k in required if k not in properties]
        elements = [pair(k) for k in keys]
        optional = [pair(k) for k in properties if k not in set(required)]
        if optional:
            elements.append({"type": "star", "content": _one_or_any(optional)})
        content = _sequence(*elements) if elements else _any_text()
        return _tag(m["tool_call"][0] + tool.name, content, m["tool_call"][1])

    calls = _separated([call(t) for t in tools], "", single_call or choice == "forced")
    if choice == "auto":
        return _triggered([m["tool_calls"][0]], [_tag(m["tool_calls"][0], calls, m["tool_calls"][1])], single_call)
    return _sequence(_const(m["tool_calls"][0]), calls, _const(m["tool_calls"][1]))


# -- Kimi K3 (XTML channels; vLLM's own "kimi_k3" builder) --------------------------------------

_K3_OPEN, _K3_CLOSE, _K3_SEP = "<|open|>", "<|close|>", "<|sep|>"
_K3_ARG_END = f"{_K3_CLOSE}argument{_K3_SEP}"
# JSON-schema type -> the XTML `type=` attribute (integer writes as number).
_K3_TYPES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
             "null": "null", "object": "object", "array": "array"}  # fmt: skip


def _k3_attr(value: str) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _k3_loose_argument() -> dict[str, Any]:
    """Any attributes, a raw value (a property whose type the tag cannot pin)."""
    head = {"type": "regex", "pattern": r"[^<]*" + _K3_SEP.replace("|", r"\|")}
    return _tag(_K3_OPEN + "argument ", _sequence(head, _any_text(_K3_CLOSE)), _K3_ARG_END)


def _k3_string_value(prop: dict[str, Any]) -> dict[str, Any]:
    """A raw string value: an enum / const as alternatives, a length bound as a regex that
    keeps out the marker prefix "<|", else any text up to the close marker."""
    values = prop.get("enum")
    if values is None and isinstance(prop.get("const"), str):
        values = [prop["const"]]
    if (isinstance(values, list) and values and len(values) <= 256 and all(isinstance(v, str) for v in values)
            and not any("<|" in v for v in values)):  # fmt: skip
        return _one_or_any([_const(v) for v in values])
    max_len, min_len = prop.get("maxLength"), prop.get("minLength", 0)
    if isinstance(max_len, int) and 0 <= max_len <= 4096:
        if not isinstance(min_len, int) or min_len < 0 or min_len > max_len:
            min_len = 0
        return {"type": "regex", "pattern": "(?:[^<]|<[^|])" + f"{{{min_len},{max_len}}}"}
    return _any_text(_K3_CLOSE)


def _k3_argument(key: str, schema: Any, defs: dict[str, Any]) -> dict[str, Any]:
    prop = schema if isinstance(schema, dict) else {}
    kind = prop.get("type")
    xtml = _K3_TYPES.get(kind) if isinstance(kind, str) else None
    if xtml is None:
        return _k3_loose_argument()
    begin = f'{_K3_OPEN}argument key="{_k3_attr(key)}" type="{xtml}"{_K3_SEP}'
    if xtml == "string":
        return _tag(begin, _k3_string_value(prop), _K3_ARG_END)
    embedded = dict(prop)
    for name, value in defs.items():
        embedded.setdefault(name, value)
    return _tag(begin, _json_schema(embedded), _K3_ARG_END)


def _k3_arguments(parameters: dict[str, Any] | bool) -> dict[str, Any]:
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(parameters, dict) or not isinstance(props, dict) or not props:
        return {"type": "star", "content": _k3_loose_argument()}
    defs = {k: parameters[k] for k in ("$defs", "definitions") if isinstance(parameters.get(k), dict)}
    inner = _one_or_any([_k3_argument(key, prop, defs) for key, prop in props.items()])
    required = parameters.get("required")
    return {"type": "plus" if isinstance(required, list) and required else "star", "content": inner}


def _kimi_k3(tools: list[TagTool], choice: str, single_call: bool) -> dict[str, Any]:
    """The response channel (its open marker optional: the generation prefix may hold it),
    then the tools channel (optional for auto), then an optional `<|close|>message<|sep|>`."""
    prefix = [
        {"type": "optional", "content": _const(f"{_K3_OPEN}response{_K3_SEP}")},
        _tag("", _any_text(_K3_OPEN, _K3_CLOSE, "<|end_of_msg|>"), f"{_K3_CLOSE}response{_K3_SEP}"),
    ]
    calls = [
        _tag(f'{_K3_OPEN}call tool="{_k3_attr(tool.name)}" index="',
             _sequence({"type": "regex", "pattern": "[0-9]+"}, _const(f'"{_K3_SEP}'),
                       _k3_arguments(tool.argument_schema)),
             f"{_K3_CLOSE}call{_K3_SEP}")
        for tool in (tools[:1] if choice == "forced" else tools)
    ]  # fmt: skip
    channel = _tag(f"{_K3_OPEN}tools{_K3_SEP}", _separated(calls, "", single_call), f"{_K3_CLOSE}tools{_K3_SEP}")
    body = {"type": "optional", "content": channel} if choice == "auto" else channel
    return _sequence(*prefix, body, {"type": "optional", "content": _const(f"{_K3_CLOSE}message{_K3_SEP}")})


_BUILDERS: dict[str, Callable[[list[TagTool], str, bool], dict[str, Any]]] = {
    "kimi_k3": _kimi_k3,
    "glm_4_7": _glm_4_7,
    "minimax": _minimax,
    "mimo": _mimo,
    "deepseek_v3_2": _dsml("function_calls", "invoke", "deepseek_xml"),
    "deepseek_v4": _dsml("tool_calls", "invoke", "deepseek_xml"),
    "deepseek_v4_1": _dsml(" calls", " invoke", "deepseek_v4_1_xml", closed_without_tools=True),
    "kimi": _kimi,
    "harmony": _harmony,
    "hermes": _hermes,
    "longcat": _hermes_style("<longcat_tool_call>", "</longcat_tool_call>"),
    "llama": _llama,
    "qwen_3_coder": _qwen3_coder,
    "deepseek_r1": _deepseek(
        lambda name: f"{_DS_CALL_BEGIN}function{_DS_SEP}{name}\n```json\n", f"\n```{_DS_CALL_END}", "\n"
    ),
    "deepseek_v3_1": _deepseek(lambda name: f"{_DS_CALL_BEGIN}{name}{_DS_SEP}", _DS_CALL_END, ""),
    "plamo3": _plamo3,
    "hy_v4": _hy_v4,
}
STRUCTURAL_TAG_MODELS = frozenset(_BUILDERS)
