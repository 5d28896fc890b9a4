"""Batch rules vLLM 0.33's declarative parser engine (vllm/parser/engine) applies to every
tool-call family it runs (here: qwen3_coder/qwen3_xml and granite), shared by those families.

Content
-------
The engine classifies text by lexer state and builds the batch content from it:

* content before the first tool event (a call slot opening) is content; content after it is
  *deferred*: dropped when any call slot was *announced*, kept (appended) when none was. A
  slot is announced when the engine sends its name, which it does for any non-empty name
  (its own or a `"name": "..."` in its body), also one that is only whitespace and so is
  dropped afterwards;
* with a call returned, the content is `.strip()`ped; with a call slot but none returned, a
  whitespace-only content is None; without any call slot the content is verbatim.
* tool_choice="none" (with tools) makes the engine ignore every tool event: the content is all
  text outside call markup, verbatim (`Run.suppress`; no hold, no deferral, no strip).

Streaming keeps this exact except for one case (see `ContentHold`): whitespace at the very
start of the content, followed by other text and then a returned call, is streamed (vLLM's
batch strips it; its stream keeps it too). Trailing whitespace before a call is held back, so
the common "Let me check.\\n\\n<tool_call>" case streams exactly the batch content.

State use (documented here for the families using it): `pending` is the whitespace run held
back at the end of the content before the first tool event (bounded by MAX_HELD_CHARS: a
longer run is streamed, a divergence only when a call or an empty call slot follows it);
`deferred` is the content after the first tool event (bounded by MAX_TOOL_CALL_CHARS with the
in-flight call); `announced` is "a call slot was announced"; `flag` is "non-whitespace content
emitted".

Argument types
--------------
`fix_arg_types` reproduces the engine's `_fix_arg_types`: string values (and other scalars)
of a call's JSON object arguments are coerced to the tool's JSON schema types, recursing into
`properties` / `items`; the arguments string is re-serialised only when a value changed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from parsers._base import MAX_HELD_CHARS
from parsers.tools._base import Run, is_json, json_dumps, json_loads

__all__ = [
    "WS",
    "ContentHold",
    "coerce_to_schema_type",
    "fix_arg_types",
    "name_and_args_from_json",
    "name_in_args",
    "schema_types",
]


class ContentHold:
    """The engine's content rules over a `Run` (see the module docstring)."""

    @staticmethod
    def before_event(run: Run, text: str) -> None:
        """Content before the first tool event: stream it, holding back trailing whitespace."""
        if not text:
            return
        if run.suppress:  # no call can follow, so no whitespace rule applies
            run.content(text)
            return
        body = text.rstrip()
        if not body:
            run.pending += text
        else:
            run.content(run.pending + body)
            run.pending = text[len(body) :]
            run.flag = True
        if len(run.pending) > MAX_HELD_CHARS:  # documented bound: stream an overlong run
            run.content(run.pending)
            run.pending = ""

    @staticmethod
    def after_event(run: Run, text: str) -> None:
        """Content after the first tool event: deferred until a call slot is announced
        (dropped) or the output ends without one (kept)."""
        if run.suppress:  # calls are ignored: nothing is deferred or dropped
            run.content(text)
        elif run.n_calls == 0 and not run.announced:
            run.deferred += text

    @staticmethod
    def announce(run: Run) -> None:
        """A call slot was announced but is not returned: deferred content is dropped."""
        run.announced = True
        run.deferred = ""

    @staticmethod
    def end_before_event(run: Run) -> None:
        """End of an output that never opened a call slot: held whitespace is content."""
        run.content(run.pending)
        run.pending = ""

    @staticmethod
    def end_after_event(run: Run) -> None:
        """End of an output with call slots and no call returned: the content is kept unless
        it is only whitespace (deferred content only when no slot was announced)."""
        if run.n_calls == 0:
            kept = run.pending + run.deferred
            if run.flag or kept.strip():
                run.content(kept)
        run.pending = run.deferred = ""


# -- names ---------------------------------------------------------------------------------

# Unicode White_Space run: what `\s*` means in the `regex` module vLLM's patterns use
# (Python's `re` would also match U+001C..U+001F).
WS = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*"
_NAME_IN_ARGS = re.compile(rf'"name"{WS}:{WS}"([^"]*)"')


def name_in_args(raw: str) -> str:
    """The engine's fallback name: the first `"name": "..."` in the raw call body, or ""."""
    found = _NAME_IN_ARGS.search(raw)
    return found.group(1) if found else ""


def name_and_args_from_json(raw: str) -> tuple[Any, str]:
    """(name, arguments) of a raw body that should be a `{"name", "arguments"}` object.

    Not JSON, or not an object: no name, the stripped body as arguments. The arguments are
    `arguments` (else `parameters`): a string verbatim, anything else `json.dumps`; with
    neither, the object without `name`. The name may be any JSON value (callers check)."""
    body = raw.strip()
    obj = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict):
        return "", body
    name = obj.get("name", "")
    for key in ("arguments", "parameters"):
        if key in obj:
            value = obj[key]
            return name, value if isinstance(value, str) else json_dumps(value)
    return name, json_dumps({k: v for k, v in obj.items() if k != "name"})


# -- schema-driven argument types ------------------------------------------------------------

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
_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_NO_VALUE = object()


def _finite_json(value: Any) -> bool:
    """Whether `value` serialises to valid JSON (no NaN / Infinity anywhere)."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def schema_types(schema: Any) -> list[str]:
    """Every type a JSON schema allows (`type`, `enum` values, any/one/allOf); ["string"]
    when it says nothing."""
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
    parsed = json_loads(value)  # object / array: any finite JSON value is taken
    return parsed if is_json(parsed) and _finite_json(parsed) else _NO_VALUE


def coerce_to_schema_type(value: str, types: Sequence[str]) -> Any:
    """A raw string as the first schema type (null > integer > number > boolean > object >
    array > string) it converts to; else any finite JSON it decodes to; else itself."""
    wanted = {_TYPE_ALIASES.get(k, k) for t in types for k in [t.strip().lower()]}
    for kind in _PRIORITY:
        if kind in wanted:
            converted = _as_type(value, kind)
            if converted is not _NO_VALUE:
                return converted
    parsed = json_loads(value)
    return parsed if is_json(parsed) and _finite_json(parsed) else value


def _coerce(value: Any, schema: dict) -> tuple[Any, bool]:
    """(value coerced to `schema`, whether it changed). Dicts and lists change in place."""
    if isinstance(value, str):
        coerced = coerce_to_schema_type(value, schema_types(schema))
        return coerced, coerced is not value
    if isinstance(value, dict):
        nested = schema.get("properties")
        return value, isinstance(nested, dict) and _coerce_members(value, nested)
    if isinstance(value, list):
        items = schema.get("items")
        changed = False
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i], item_changed = _coerce(item, items)
                changed |= item_changed
        return value, changed
    coerced = coerce_to_schema_type(json_dumps(value), schema_types(schema))
    if type(coerced) is not type(value) or coerced != value:
        return coerced, True
    return value, False


def _coerce_members(args: dict, properties: Mapping[str, Any]) -> bool:
    changed = False
    for key, value in args.items():
        prop = properties.get(key)
        if isinstance(prop, dict):
            args[key], member_changed = _coerce(value, prop)
            changed |= member_changed
    return changed


def _tool_properties(tools: Sequence[Mapping[str, Any]], name: str) -> Any:
    for tool in tools:
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function")
        if isinstance(function, Mapping) and function.get("name") == name:
            parameters = function.get("parameters") or {}
            return parameters.get("properties", {}) if isinstance(parameters, Mapping) else {}
    return {}


def fix_arg_types(args_json: str, name: str, tools: Sequence[Mapping[str, Any]]) -> str:
    """The call's arguments with values coerced to the tool's schema (see module docstring)."""
    if not tools or not name:
        return args_json
    args = json_loads(args_json)
    if not is_json(args) or not isinstance(args, dict):
        return args_json
    properties = _tool_properties(tools, name)
    if not properties or not isinstance(properties, Mapping):
        return args_json
    return json_dumps(args) if _coerce_members(args, properties) else args_json
