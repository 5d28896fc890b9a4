"""Tool definitions reduced to what parsing reads: names and the type skeleton of parameters.

A streaming derender state carries the request's tools so that later chunks need not resend
the request; it must stay small even when a request declares dozens of tools with long
descriptions. Parsers read only a tool's type and function name, and of its parameter schema
what vLLM's schema coercion reads (`extract_types_from_schema`, `_coerce_value`): `type`,
the *types* of `enum` values, `anyOf`/`oneOf`/`allOf`, `properties`, `items` and
`additionalProperties` (MiniMax-M3 converts nested elements by them). Everything
else (descriptions, titles, defaults, examples, `required`, formats, `$defs`...) is dropped;
an enum keeps one value per type (the type is all coercion looks at). Parsing the reduced
tools gives the same result as parsing the originals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["prune_tools", "prune_schema", "encode_tools", "decode_tools", "TOOL_VIEWS"]

_COMBINERS = ("anyOf", "oneOf", "allOf")


def prune_tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        pruned: dict[str, Any] = {"type": tool.get("type", "function")}
        function = tool.get("function")
        if isinstance(function, Mapping):
            kept: dict[str, Any] = {}
            if "name" in function:
                kept["name"] = function["name"]
            if "parameters" in function:
                kept["parameters"] = prune_schema(function["parameters"])
            pruned["function"] = kept
        out.append(pruned)
    return out


def prune_schema(schema: Any) -> Any:
    """The parts of a JSON schema that schema coercion reads (module docstring)."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    if "type" in schema:
        out["type"] = schema["type"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        out["enum"] = _one_per_type(enum)
    for key in _COMBINERS:
        choices = schema.get(key)
        if isinstance(choices, list):
            out[key] = [prune_schema(choice) for choice in choices]
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        out["properties"] = {key: prune_schema(value) for key, value in properties.items()}
    elif "properties" in schema:
        out["properties"] = properties  # odd, but kept as vLLM would see it
    items = schema.get("items")
    if isinstance(items, Mapping):
        out["items"] = prune_schema(items)
    elif "items" in schema:
        out["items"] = items  # its presence marks an array (MiniMax-M3's element conversion)
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = prune_schema(additional)
    elif "additionalProperties" in schema:
        out["additionalProperties"] = additional
    return out


_REPRESENTATIVE = {bool: True, int: 0, float: 0.0, str: "", list: [], dict: {}, type(None): None}


def _one_per_type(values: list[Any]) -> list[Any]:
    seen: dict[type, Any] = {}
    for value in values:
        kind = type(value)
        if kind in _REPRESENTATIVE and kind not in seen:
            seen[kind] = _REPRESENTATIVE[kind]
    return list(seen.values())


# -- the compact form a stream state carries ------------------------------------------------
#
# Tools as {name: properties} where a property is its type set ("integer|null") or, when it
# has children, [types, {child properties} | None, items | None]. Only what coercion reads
# (the union of a node's `type`, enum value types and combiner types; its `properties`; its
# `items`), so decoding gives schemas that parse identically. `view` picks how much a family
# needs: "types" (families that coerce arguments to schema types), "names" (families that
# check call names), "presence" (the rest: only whether the request has tools).

TOOL_VIEWS = ("presence", "names", "types", "required")


def encode_tools(tools: Sequence[Any], view: str) -> Any:
    """The compact form of (pruned or full) OpenAI tools for a family needing `view`."""
    from parsers.tools._coerce import schema_types

    def node(schema: Any) -> Any:
        types = "|".join(sorted(set(schema_types(schema))))
        if not isinstance(schema, Mapping):
            return types
        props = schema.get("properties")
        items = schema.get("items")
        props_out = {k: node(v) for k, v in props.items()} if isinstance(props, Mapping) else None
        items_out = node(items) if isinstance(items, Mapping) else None
        if props_out is None and items_out is None:
            return types
        return [types, props_out, items_out]

    functions = [t for t in prune_tools(tools) if t.get("type") == "function" and "function" in t]
    if view == "presence":
        return len(tools)
    names = [f["function"].get("name") for f in functions]
    if view == "names":
        return [n for n in names if isinstance(n, str)]
    if view == "required":
        return [_required_entry(t["function"]) for t in tools if isinstance(t, Mapping)
                and isinstance(t.get("function"), Mapping) and isinstance(t["function"].get("name"), str)
                and t["function"]["name"]]  # fmt: skip
    out: dict[str, Any] = {}
    for tool in functions:
        name = tool["function"].get("name")
        params = tool["function"].get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(name, str) and name not in out:  # vLLM looks tools up by first match
            out[name] = {k: node(v) for k, v in props.items()} if isinstance(props, Mapping) else {}
    return out


def _required_entry(function: Mapping[str, Any]) -> list[Any]:
    """MiniCPM5's view of a tool (`minicpm5xml_tool_parser._build_tool_maps`): its name, its
    string-typed and other property keys, and `set(required)` (empty when that fails)."""
    params = function.get("parameters") or {}
    props = params.get("properties") if isinstance(params, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    strings = [k for k, v in props.items() if isinstance(v, Mapping) and v.get("type") == "string"]
    try:
        required = sorted(set(params.get("required", []) if isinstance(params, Mapping) else []), key=repr)
    except TypeError:
        required = []
    return [function["name"], strings, [k for k in props if k not in strings], required]


def _decode_required(entry: Any) -> dict[str, Any]:
    if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)
            and all(isinstance(x, list) for x in entry[1:])):  # fmt: skip
        raise ValueError("bad encoded required-view tool")
    name, strings, others, required = entry
    props = {**{k: {"type": "string"} for k in strings}, **{k: {} for k in others}}
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": required}}}  # fmt: skip


def decode_tools(data: Any) -> list[dict[str, Any]]:
    """OpenAI-shaped tools equivalent, for parsing, to the ones `encode_tools` was given.
    Raises ValueError on data no encoder writes."""
    if isinstance(data, int) and not isinstance(data, bool) and data >= 0:
        return [{"type": "function", "function": {"name": ""}}] * min(data, 1)
    if isinstance(data, list) and all(isinstance(n, str) for n in data):
        return [{"type": "function", "function": {"name": n}} for n in data]
    if isinstance(data, list):
        return [_decode_required(entry) for entry in data]
    if isinstance(data, dict):
        return [
            {"type": "function", "function": {"name": name, "parameters": {
                "type": "object", "properties": _decode_props(props)}}}
            for name, props in data.items()
        ]  # fmt: skip
    raise ValueError("not an encoded tool list")


def _decode_props(props: Any) -> dict[str, Any]:
    if not isinstance(props, dict):
        raise ValueError("encoded properties must be an object")
    return {key: _decode_node(value) for key, value in props.items()}


def _decode_node(node: Any) -> dict[str, Any]:
    if isinstance(node, str):
        return {"type": node.split("|")}
    if isinstance(node, list) and len(node) == 3 and isinstance(node[0], str):
        out: dict[str, Any] = {"type": node[0].split("|")}
        if node[1] is not None:
            out["properties"] = _decode_props(node[1])
        if node[2] is not None:
            out["items"] = _decode_node(node[2])
        return out
    raise ValueError("bad encoded schema node")
