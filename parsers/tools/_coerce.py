"""vLLM 0.33's schema-driven argument coercion, as plain functions.

These reproduce, value for value, what vLLM's declarative parser engine does to a tool call's
arguments before returning them (`ParserEngine._coerce_value` / `_coerce_dict` /
`_fix_arg_types` in vllm/parser/engine/parser_engine.py) and the helpers it calls
(`coerce_to_schema_type`, `extract_types_from_schema`, `find_tool_properties` in
vllm/tool_parsers/utils.py):

* a string value is converted to the first JSON-schema type it converts to, in the order
  null > integer > number > boolean > object > array > string; failing all, to any finite
  JSON it decodes to; failing that it stays the same string object;
* any other scalar is serialised with `json.dumps` and put through the same conversion; it
  changed when the result differs in type or value;
* objects recurse into `properties`, arrays into `items` (only when those are dicts);
* the arguments string is re-serialised (`json.dumps(..., ensure_ascii=False)`) only when
  some value changed, otherwise it is returned verbatim.

Identity matters: "changed" for a string is `coerced is not value`, exactly as vLLM tests it
(a string that decodes to another string, such as '"x"', is a change).

The only deliberate difference from vLLM: malformed or too deeply nested JSON, and a tool whose
`properties` is not a mapping, leave the arguments unchanged here, where vLLM would raise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "coerce_members",
    "coerce_scalar",
    "coerce_to_schema_type",
    "coerce_value",
    "fix_arg_types",
    "fix_args_with_properties",
    "normalize_types",
    "schema_types",
    "tool_properties",
]

_TYPE_ALIASES = {
    **dict.fromkeys(("str", "text", "varchar", "char", "enum"), "string"),
    **dict.fromkeys(
        ("int", "int32", "int64", "uint", "uint32", "uint64", "long", "short", "unsigned"),
        "integer",
    ),
    **dict.fromkeys(("float", "float32", "float64", "double"), "number"),
    "bool": "boolean",
    "dict": "object",
    **dict.fromkeys(("arr", "list", "sequence"), "array"),
}
PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_NO_VALUE = object()


def _json_loads(text: str) -> Any:
    """`json.loads`, or _NO_VALUE where Python's json rejects the text."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NO_VALUE


def _finite_json(value: Any) -> bool:
    """Whether `value` serialises to valid JSON (no NaN / Infinity anywhere)."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def schema_types(schema: Any) -> list[str]:
    """Every type a JSON schema allows (`type`, `enum` values, any/one/allOf); ["string"]
    when it says nothing (vLLM's `extract_types_from_schema`)."""
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        types.update(_json_type(v) for v in enum)
    for choice in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(choice), list):
            for sub in schema[choice]:
                types.update(schema_types(sub))
    return list(types) if types else ["string"]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def normalize_types(types: str | Iterable[str]) -> frozenset[str]:
    """Schema type names as `coerce_to_schema_type` reads them: trimmed, lower-cased,
    aliases ("int", "str", ...) resolved."""
    if isinstance(types, str):
        types = [types]
    return frozenset(_TYPE_ALIASES.get(k, k) for t in types for k in [t.strip().lower()])


def _as_type(value: str, kind: str) -> Any:
    """`value` as JSON-schema type `kind`, or _NO_VALUE when it does not convert."""
    if kind == "null":
        return None if value.lower() == "null" else _NO_VALUE
    if kind == "string":
        return value
    if kind in ("integer", "number"):
        try:
            return int(value)
        except ValueError:
            if kind == "integer":
                return _NO_VALUE
        try:
            number = float(value)
        except ValueError:
            return _NO_VALUE
        if not math.isfinite(number):
            return _NO_VALUE
        return number if number != int(number) else int(number)
    if kind == "boolean":
        word = value.lower().strip()
        return True if word in ("true", "1") else False if word in ("false", "0") else _NO_VALUE
    parsed = _json_loads(value)  # object / array: any finite JSON value is taken
    return parsed if parsed is not _NO_VALUE and _finite_json(parsed) else _NO_VALUE


def coerce_to_schema_type(value: str, types: str | Sequence[str]) -> Any:
    """A raw string as the first schema type (null > integer > number > boolean > object >
    array > string) it converts to; else any finite JSON it decodes to; else `value` itself
    (the same object)."""
    wanted = normalize_types(types)
    for kind in PRIORITY:
        if kind in wanted:
            converted = _as_type(value, kind)
            if converted is not _NO_VALUE:
                return converted
    parsed = _json_loads(value)
    return parsed if parsed is not _NO_VALUE and _finite_json(parsed) else value


def coerce_scalar(value: Any, types: Sequence[str]) -> tuple[Any, bool]:
    """vLLM's rule for a non-string scalar: (coerced, changed), coercing its `json.dumps`."""
    coerced = coerce_to_schema_type(json.dumps(value, ensure_ascii=False), types)
    if type(coerced) is not type(value) or coerced != value:
        return coerced, True
    return value, False


def coerce_value(value: Any, schema: dict[str, Any]) -> tuple[Any, bool]:
    """(value coerced to `schema`, whether it changed). Dicts and lists change in place."""
    if isinstance(value, str):
        coerced = coerce_to_schema_type(value, schema_types(schema))
        return coerced, coerced is not value
    if isinstance(value, dict):
        nested = schema.get("properties")
        return value, isinstance(nested, dict) and coerce_members(value, nested)
    if isinstance(value, list):
        items = schema.get("items")
        changed = False
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i], item_changed = coerce_value(item, items)
                changed |= item_changed
        return value, changed
    return coerce_scalar(value, schema_types(schema))


def coerce_members(args: dict[str, Any], properties: Mapping[str, Any]) -> bool:
    """Coerce every member of `args` that has a dict schema in `properties` (in place);
    whether any changed."""
    changed = False
    for key, value in args.items():
        prop = properties.get(key)
        if isinstance(prop, dict):
            args[key], member_changed = coerce_value(value, prop)
            changed |= member_changed
    return changed


def tool_properties(tools: Sequence[Mapping[str, Any]], name: str) -> Any:
    """The `parameters.properties` of the function tool called `name`, or {}."""
    for tool in tools:
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name") == name:
            parameters = function.get("parameters") or {}
            return parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
    return {}


def fix_args_with_properties(args_json: str, properties: Any) -> str:
    """`args_json` with its object's values coerced to `properties`; verbatim when it is not
    a JSON object, there are no properties, or nothing changed."""
    if not properties or not isinstance(properties, Mapping):
        return args_json
    args = _json_loads(args_json)
    if not isinstance(args, dict):
        return args_json
    return json.dumps(args, ensure_ascii=False) if coerce_members(args, properties) else args_json


def fix_arg_types(args_json: str, name: str, tools: Sequence[Mapping[str, Any]]) -> str:
    """vLLM's `_fix_arg_types`: the call's arguments coerced to tool `name`'s schema."""
    if not tools or not name:
        return args_json
    return fix_args_with_properties(args_json, tool_properties(tools, name))
