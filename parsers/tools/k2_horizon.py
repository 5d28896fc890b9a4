"""K2 Horizon IFM tool calls (vLLM 0.33 `k2_horizon`: `K2HorizonToolParser`).

    <ifm|tool_calls><ifm|tool_call>get_weather<ifm|arg_key>city</ifm|arg_key>
    <ifm|arg_value>Tokyo</ifm|arg_value></ifm|tool_call></ifm|tool_calls>

The call format follows the chat template kwarg `tool_call_format`: "xml" (default), "xml_typed"
(each argument also carries `<ifm|arg_type>T</ifm|arg_type>`) or "json" (each call body is
`{"name": ..., "arguments": {...}}`); any other value is refused, as upstream.

Batch (`extract_tool_calls`): the first `<ifm|tool_calls>` group decides, all or nothing: it
must be closed by `</ifm|tool_calls>`, hold only `<ifm|tool_call>` blocks (and whitespace),
and every call must parse: a name without whitespace (declared, when the request has tools),
well-formed arguments (no repeats, types present exactly in "xml_typed"), values coerced as
vLLM's `_coerce_xml_value` / `_coerce_json_value` do and serialisable without NaN. Then the
content is the text before the group plus the text after it; otherwise the whole output is
content. Content that is only whitespace is None. tool_choice="none": all content.

Streaming: content streams (a whitespace-only start is held); the group is held whole until
`</ifm|tool_calls>` decides it, as vLLM's own stream does (all-or-nothing needs its end),
bounded by the tool-call limit; after it everything is content.

Gap: a named tool_choice (vLLM also requires the name to be the named tool) is not checked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._base import Vocab
from parsers._errors import ParserConfigError
from parsers._state import JsonState
from parsers.tools._base import is_json, json_loads
from parsers.tools._coerce import coerce_to_schema_type, schema_types, tool_properties
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
)

__all__ = ["K2HorizonToolParser", "k2_horizon_calls"]

GROUP_START, GROUP_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
CALL_START, CALL_END = "<ifm|tool_call>", "</ifm|tool_call>"
KEY_START, KEY_END = "<ifm|arg_key>", "</ifm|arg_key>"
TYPE_START, TYPE_END = "<ifm|arg_type>", "</ifm|arg_type>"
VALUE_START, VALUE_END = "<ifm|arg_value>", "</ifm|arg_value>"
ARG_MARKERS = (KEY_START, KEY_END, TYPE_START, TYPE_END, VALUE_START, VALUE_END)
FORMATS = ("json", "xml", "xml_typed")

_CALL = regex.compile(regex.escape(CALL_START) + r"(.*?)" + regex.escape(CALL_END), regex.DOTALL)
_ARG = regex.compile(
    regex.escape(KEY_START) + r"(.*?)" + regex.escape(KEY_END) + r"\s*(?:" + regex.escape(TYPE_START)
    + r"(.*?)" + regex.escape(TYPE_END) + r"\s*)?" + regex.escape(VALUE_START) + r"(.*?)"
    + regex.escape(VALUE_END),
    regex.DOTALL,
)  # fmt: skip


class Malformed(ValueError):
    """The group is not a valid call list: the whole output is content."""


def _name(name: Any, tools: Sequence[Mapping[str, Any]]) -> str:
    if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
        raise Malformed("invalid function name")
    if tools and not _declared(tools, name):
        raise Malformed(f"unknown tool {name}")
    return name


def _declared(tools: Sequence[Mapping[str, Any]], name: str) -> bool:
    for tool in tools:
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name") == name:
            return True
    return False


def _properties(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    found = tool_properties(tools, name) if tools else {}
    return found if isinstance(found, Mapping) else {}


def _json_call(body: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    call = json_loads(body.strip())
    if not is_json(call) or not isinstance(call, dict):
        raise Malformed("a JSON call must be an object")
    name = _name(call.get("name"), tools)
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise Malformed("JSON arguments must be an object")
    properties = _properties(tools, name)
    out = {}
    for key, value in arguments.items():
        schema = properties.get(key)
        if isinstance(schema, dict):
            raw = value if isinstance(value, str) else _dumps(value)
            value = coerce_to_schema_type(raw, schema_types(schema))
        out[key] = value
    return name, out


def _xml_value(value: str, schema: Any, explicit: str | None) -> Any:
    base = explicit.split("[", 1)[0].strip().lower() if explicit else None
    targets = schema_types(schema)
    if isinstance(schema, dict):
        if base in targets and len(set(targets)) > 1:
            targets = [base]
    elif base == "any":
        return value
    elif base:
        targets = [base]
    return coerce_to_schema_type(value if "string" in targets else value.strip(), targets)


def _xml_call(body: str, tools: Sequence[Mapping[str, Any]], fmt: str) -> tuple[str, dict[str, Any]]:
    first = body.find(KEY_START)
    if first == -1:
        if any(marker in body for marker in ARG_MARKERS):
            raise Malformed("malformed argument tags")
        return _name(body.strip(), tools), {}
    name = _name(body[:first].strip(), tools)
    properties = _properties(tools, name)
    arguments: dict[str, Any] = {}
    position = first
    for found in _ARG.finditer(body, first):
        key = found.group(1).strip()
        if body[position : found.start()].strip() or not key or key in arguments:
            raise Malformed("malformed, unnamed or repeated argument")
        explicit = found.group(2).strip() if found.group(2) is not None else None
        if (fmt == "xml" and explicit is not None) or (fmt == "xml_typed" and not explicit):
            raise Malformed("argument type tag where the format has none, or missing")
        arguments[key] = _xml_value(found.group(3), properties.get(key), explicit)
        position = found.end()
    if position == first or body[position:].strip():
        raise Malformed("malformed argument tags")
    return name, arguments


def _dumps(value: Any) -> str:
    """`json.dumps(..., allow_nan=False)`: NaN or infinity is Malformed (vLLM's ValueError)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise Malformed("non-finite number") from exc


def k2_horizon_calls(body: str, tools: Sequence[Mapping[str, Any]], fmt: str) -> list[tuple[str, str]] | None:
    """(name, arguments) of every call in a group's body, or None when it is malformed."""
    matches = list(_CALL.finditer(body))
    if not matches or _CALL.sub("", body).strip():
        return None
    try:
        calls = [_json_call(m.group(1), tools) if fmt == "json" else _xml_call(m.group(1), tools, fmt)
                 for m in matches]  # fmt: skip
        return [(name, _dumps(arguments)) for name, arguments in calls]
    except Malformed:
        return None


# -- the machine ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class K2Ext(JsonState):
    """seen: non-whitespace content was sent. ws: whitespace content held before that."""

    seen: bool = False
    ws: str = ""


@dataclass(frozen=True, slots=True)
class K2State(ToolStreamState):
    ext: K2Ext = K2Ext()


def _content(run: Run[Any], text: str) -> None:
    ext: K2Ext = run.ext
    if ext.seen:
        run.content(text)
    elif (ext.ws + text).strip():
        run.content(ext.ws + text)
        run.ext = K2Ext(seen=True)
    else:
        run.ext = ext.replace(ws=ext.ws + text)


def _open_group(run: Run[K2HorizonToolParser], marker: str) -> None:
    if run.suppress:
        _content(run, marker)
        return
    run.phase = "group"
    run.pending = marker


def _group_text(run: Run[Any], text: str) -> None:
    run.pending += text


def _close_group(run: Run[K2HorizonToolParser], marker: str) -> None:
    raw, run.pending, run.phase = run.pending + marker, "", "after"
    calls = k2_horizon_calls(raw[len(GROUP_START) : -len(GROUP_END)], run.parser.tools, run.parser.tool_format)
    if calls is None:
        _content(run, raw)
        return
    for name, arguments in calls:
        run.emit_call(name, arguments)


def _unclosed(run: Run[Any], text: str) -> None:
    raw, run.pending = run.pending, ""
    _content(run, raw)


def _any_content(run: Run[Any], text: str) -> None:
    _content(run, text)


def _nothing(run: Run[Any], text: str) -> None:
    """End of the output: held whitespace-only content is None (dropped)."""


TABLE = Table(
    ("content", "group", "after"),
    (GROUP_START, GROUP_END),
    {
        ("content", TEXT): Step(_any_content),
        ("content", GROUP_START): Step(_open_group),
        ("content", GROUP_END): Step(_any_content),
        ("content", EOS): Step(_nothing),
        ("group", TEXT): Step(_group_text),
        ("group", GROUP_START): Step(_group_text),
        ("group", GROUP_END): Step(_close_group),
        ("group", EOS): Step(_unclosed),
        ("after", TEXT): Step(_any_content),
        ("after", ANY_MARKER): Step(_any_content),
        ("after", EOS): Step(_nothing),
    },
)


class K2HorizonToolParser(TableToolParser):
    name: ClassVar[str] = "k2_horizon"
    table = TABLE
    initial_phase = "content"
    state_class = K2State

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        fmt = (chat_template_kwargs or {}).get("tool_call_format", "xml")
        if not isinstance(fmt, str) or fmt not in FORMATS:
            raise ParserConfigError(
                f"Unsupported tool_call_format {fmt!r}. Supported values: {', '.join(sorted(FORMATS))}."
            )
        self.tool_format = fmt

    @property
    def state_tag(self) -> str:
        return f"k2_horizon/{self.tool_format}"

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        return len(ext.ws) if isinstance(ext, K2Ext) else 0

    def tool_choice_none_content(self, text: str, request_id: str) -> str | None:
        return text if text.strip() else None

