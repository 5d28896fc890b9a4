"""K2 Horizon's markers and vLLM's per-call rules (`K2HorizonToolParser`'s `_validate_tool_name`,
`_parse_json_call`, `_coerce_xml_value`, `json.dumps(allow_nan=False)`), shared by the stream
machine in `k2_horizon` and its decisions: what a name, a JSON call body or an xml value is."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import regex

from parsers.tools._base import is_json, json_loads
from parsers.tools._coerce import (
    coerce_to_schema_type,
    normalize_types,
    schema_types,
    tool_properties,
)
from parsers.tools._engine import WS

__all__ = ["ARG_MARKERS", "FORMATS", "GAP", "Malformed", "call_name", "call_properties", "dumps",
           "json_call", "may_be_name", "value_streams", "xml_value"]  # fmt: skip

GROUP_START, GROUP_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
CALL_START, CALL_END = "<ifm|tool_call>", "</ifm|tool_call>"
KEY_START, KEY_END = "<ifm|arg_key>", "</ifm|arg_key>"
TYPE_START, TYPE_END = "<ifm|arg_type>", "</ifm|arg_type>"
VALUE_START, VALUE_END = "<ifm|arg_value>", "</ifm|arg_value>"
ARG_MARKERS = (KEY_START, KEY_END, TYPE_START, TYPE_END, VALUE_START, VALUE_END)
FORMATS = ("json", "xml", "xml_typed")

GAP = regex.compile(WS)  # what `\s*` between the pair's tags takes


class Malformed(ValueError):
    """The group is not a valid call list: the whole output is content."""


def call_name(name: Any, tools: Sequence[Mapping[str, Any]]) -> str:
    """vLLM's `_validate_tool_name`: a non-empty name without whitespace, declared if tools."""
    if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
        raise Malformed("invalid function name")
    if tools and name not in _tool_names(tools):
        raise Malformed(f"unknown tool {name}")
    return name


def call_properties(tools: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    found = tool_properties(tools, name) if tools else {}
    return found if isinstance(found, Mapping) else {}


def json_call(body: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    call = json_loads(body.strip())
    if not is_json(call) or not isinstance(call, dict):
        raise Malformed("a JSON call must be an object")
    name = call_name(call.get("name"), tools)
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise Malformed("JSON arguments must be an object")
    properties = call_properties(tools, name)
    out = {}
    for key, value in arguments.items():
        schema = properties.get(key)
        if isinstance(schema, dict):
            raw = value if isinstance(value, str) else dumps(value)
            value = coerce_to_schema_type(raw, schema_types(schema))
        out[key] = value
    return name, out


def xml_value(value: str, schema: Any, explicit: str | None) -> Any:
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


def dumps(value: Any) -> str:
    """`json.dumps(..., allow_nan=False)`: NaN or infinity is Malformed (vLLM's ValueError)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise Malformed("non-finite number") from exc


def value_streams(schema: Any, explicit: str | None) -> bool:
    """Whether `_xml_value` writes the raw value verbatim as a string, so it can stream."""
    base = explicit.split("[", 1)[0].strip().lower() if explicit else None
    if not isinstance(schema, dict) and base == "any":
        return True
    targets = schema_types(schema)
    if isinstance(schema, dict):
        if base in targets and len(set(targets)) > 1:
            targets = [base]
    elif base:
        targets = [base]
    return normalize_types(targets) == {"string"}


def may_be_name(text: str, tools: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a call's name text so far may still strip to a valid name (`_name`)."""
    core = text.strip()
    if any(ch.isspace() for ch in core):
        return False
    return not tools or any(declared.startswith(core) for declared in _tool_names(tools))


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    names = []
    for tool in tools:
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names
