"""MiniMax-M3 namespaced XML tool calls (vLLM name `minimax_m3`), on vLLM's parser engine:

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

Spec: vLLM 0.33 `minimax_m3_config` (`vllm/parser/minimax_m3.py`), run by `_engine` as its tool
adapter does: the block opens with `NS<tool_call>` (NS = `]<]minimax[>[`), each `NS<invoke name=`
(quoted either way or bare) opens a call whose name runs to `">` / `'>` / `>`, `NS</invoke>`
closes it; after `NS</tool_call>` the rest of the output is dropped. Any name is accepted
(no validation); content whitespace is not stripped when calls are returned.

Arguments (`_minimax_m3_arg_converter`, then `_fix_arg_types`): the body is a sequence of
elements `NS<name>...NS</name>` (whitespace between them); parsing stops at the first
malformed or unterminated one. An element with children becomes an object (repeated names
collect into a list; text beside children goes under `$text`), or a list when its schema is
an array; a text element is coerced to its schema's types (an empty one is `[]` / `{}` for a
container schema that does not allow strings). vLLM sends the arguments once, when the
invoke closes (they are not prefix-stable); so do we: the state holds the call's body (bounded
by the tool-call limit) until then.

Gap: vLLM looks the schema up by the first call whose raw body equals this one's; two calls of
different tools with byte-identical bodies would use the first's schema there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers.tools._base import json_dumps
from parsers.tools._coerce import coerce_to_schema_type, schema_types
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr

__all__ = ["MinimaxM3ToolParser", "MINIMAX_M3_SPEC", "convert_invoke_body"]

NS = "]<]minimax[>["
_INVOKES = ("INVOKE_DQ", "INVOKE_SQ", "INVOKE_BARE")

MINIMAX_M3_SPEC = EngineSpec(
    terminals={
        "TOOL_START": f"{NS}<tool_call>", "TOOL_END": f"{NS}</tool_call>",
        "INVOKE_DQ": f'{NS}<invoke name="', "INVOKE_SQ": f"{NS}<invoke name='",
        "INVOKE_BARE": f"{NS}<invoke name=", "INVOKE_END": f"{NS}</invoke>",
        "NAME_END_DQ": '">', "NAME_END_SQ": "'>", "NAME_END_BARE": ">",
    },
    transitions={
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE),
        **{(state, invoke): Tr(S.NAME, (Ev.CALL_START,))
           for state in (S.PREAMBLE, S.BETWEEN) for invoke in _INVOKES},
        **{(S.NAME, end): Tr(S.ARGS) for end in ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_BARE")},
        (S.ARGS, "INVOKE_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.PREAMBLE, "TOOL_END"): Tr(S.BETWEEN),
        (S.BETWEEN, "TOOL_END"): Tr(S.BETWEEN),
    },
    strip_content_ws_with_tools=False,
)  # fmt: skip

# -- the element tree ----------------------------------------------------------------------

OPEN, CLOSE = f"{NS}<", f"{NS}</"
MIXED_TEXT = "$text"
MAX_DEPTH = 128
Element = str | list[tuple[str, "Element"]]


def _element(text: str, pos: int, depth: int) -> tuple[str, Element, int] | None:
    """The element opening at `pos`: (name, text or children, end), or None when malformed."""
    if depth > MAX_DEPTH:
        return None
    start = pos + len(OPEN)
    end = text.find(">", start)
    if end <= start:
        return None
    name = text[start:end]
    if name.startswith("/") or not name.strip():
        return None
    closer = f"{CLOSE}{name}>"
    pos = end + 1
    texts: list[str] = []
    children: list[tuple[str, Element]] = []
    while True:
        at = text.find(NS, pos)
        if at < 0:
            return None
        texts.append(text[pos:at])
        if text.startswith(closer, at):
            pos = at + len(closer)
            break
        if not text.startswith(OPEN, at):
            return None
        child = _element(text, at, depth + 1)
        if child is None:
            return None
        children.append(child[:2])
        pos = child[2]
    body = "".join(texts)
    if not children:
        return name, body, pos
    if body.strip():
        field = MIXED_TEXT
        while any(child == field for child, _ in children):
            field = "$" + field
        children.append((field, body))
    return name, children, pos


def _parameters(body: str) -> list[tuple[str, Element]]:
    """The top-level elements of an invoke body, up to the first malformed one."""
    out: list[tuple[str, Element]] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if not body.startswith(OPEN, pos):
            return out
        found = _element(body, pos, 1)
        if found is None:
            return out
        out.append(found[:2])
        pos = found[2]


def _container(schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The first array or object alternative the schema allows."""
    types = schema.get("type")
    for kind in ("array", "object"):
        if types == kind or (isinstance(types, list) and kind in types):
            return kind, schema
    if types is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for combiner in ("anyOf", "oneOf"):
        for choice in schema.get(combiner) or ():
            if isinstance(choice, dict) and (found := _container(choice)):
                return found
    return None


def _convert(value: Element, schema: Any) -> Any:
    if not isinstance(schema, dict):
        schema = None
    container = _container(schema) if schema is not None else None
    if isinstance(value, str):
        if schema is None:
            return value
        types = schema_types(schema)
        if container is not None and "string" not in types and not value.strip():
            return [] if container[0] == "array" else {}
        return coerce_to_schema_type(value, types)
    if container is not None and container[0] == "array":
        return [_convert(child, container[1].get("items")) for _, child in value]
    return _convert_object(value, container[1] if container is not None else None)


def _convert_object(elements: list[tuple[str, Element]], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    properties = (schema or {}).get("properties") or {}
    additional = (schema or {}).get("additionalProperties")
    out: dict[str, Any] = {}
    lists: set[str] = set()
    for name, element in elements:
        value = _convert(element, properties.get(name, additional))
        if name not in out:
            out[name] = value
        elif name in lists:
            out[name].append(value)
        else:
            out[name], lists = [out[name], value], lists | {name}
    return out


def convert_invoke_body(body: str, properties: Mapping[str, Any]) -> str:
    """vLLM's `_minimax_m3_arg_converter`: the invoke body -> the arguments JSON."""
    return json_dumps(_convert_object(_parameters(body), {"properties": properties or {}}))


# -- the argument format: the body is held until the invoke closes ------------------------


@dataclass(frozen=True, slots=True)
class BodyState(JsonState):
    body: str = ""

    def held_chars(self) -> int:
        return len(self.body)


class WholeBodyArgs:
    def __init__(self, parser: MinimaxM3ToolParser, name: str) -> None:
        self.parser = parser
        self.name = name

    def start(self, name: str) -> BodyState:
        return BodyState()

    def feed(self, state: BodyState, text: str) -> tuple[BodyState, str, None]:
        return BodyState(state.body + text), "", None

    def end(self, state: BodyState) -> tuple[BodyState, str]:
        if not state.body.strip():
            return BodyState(), "{}"
        args = convert_invoke_body(state.body, self.parser.tool_properties(self.name))
        return BodyState(), self.parser.coerce(args, self.name)


class MinimaxM3ToolParser(EngineToolParser):
    name: ClassVar[str] = "minimax_m3"
    spec = MINIMAX_M3_SPEC
    args_state: ClassVar[type[JsonState]] = BodyState

    def arg_format(self, name: str) -> WholeBodyArgs:
        return WholeBodyArgs(self, name)
