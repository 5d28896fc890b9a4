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
container schema that does not allow strings).

Streaming (`ElementArgs`): vLLM sends the arguments once, when the invoke closes (its
conversion is not prefix-stable); ours streams them parameter by parameter. A parameter whose
schema is only "string" (or that the schema does not mention) streams its text as fragments,
holding back only a possible `NS</name>`; any other parameter (a typed scalar, an object, an
array) is held until its element closes, then converted and coerced as vLLM does. State: the
open parameter's name, a tag tail or a typed element, never text already sent.

Divergences from vLLM's batch (stream == our batch instead; "a call that streamed stays a
call", tests `own:*` in DIVERGENCES): a repeated parameter is written twice (vLLM: one member,
a list of the values; `json.loads` keeps the last); a child element or any other marker
inside a streamed string value ends the value there and the rest of the body is dropped (vLLM:
an object with `$text`, or the element dropped); a streamed value the invoke or the output
cuts is kept (vLLM drops it). A typed element is exact: held, it is dropped or converted as
vLLM does.

Gap: vLLM looks the schema up by the first call whose raw body equals this one's; two calls of
different tools with byte-identical bodies would use the first's schema there.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers._text import partial_marker_len
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._coerce import coerce_to_schema_type, coerce_value, schema_types
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr, string_only

__all__ = ["MinimaxM3ToolParser", "MINIMAX_M3_SPEC", "ElementArgs", "ElementState"]

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


# -- the argument format: parameters stream -------------------------------------------------


class Where(enum.StrEnum):
    BETWEEN = "between"  # before a parameter: whitespace, then NS< (a partial one in buf)
    NAME = "name"  # after NS<: the parameter's name up to ">" (in buf)
    VALUE = "value"  # a string value streaming; buf: a possible NS or closing tag
    HELD = "held"  # a typed parameter's element, held in `held`; stack: its open names
    STOPPED = "stopped"  # a malformed element: the rest of the body is ignored


@dataclass(frozen=True, slots=True)
class ElementState(JsonState):
    """key: the open parameter. opened: the `{` was written."""

    where: Where = Where.BETWEEN
    buf: str = ""
    key: str = ""
    held: str = ""
    stack: tuple[str, ...] = ()
    opened: bool = False

    def __post_init__(self) -> None:
        if (self.where is Where.HELD) != bool(self.stack) or len(self.stack) > MAX_DEPTH:
            raise ValueError("open element names outside a held parameter")

    def held_chars(self) -> int:
        return len(self.buf) + len(self.key) + len(self.held) + sum(map(len, self.stack))


def _ns_prefix_at_end(text: str, pos: int) -> int:
    """Where a suffix of text[pos:] that may still grow into NS starts (len(text): none)."""
    return len(text) - partial_marker_len(text[pos:], (NS,))


Scan = tuple[ElementState, int]


class ElementArgs:
    """An invoke body -> the arguments JSON (module docstring), parameter by parameter."""

    def __init__(self, properties: Mapping[str, Any]) -> None:
        self.properties = properties

    def start(self, name: str) -> ElementState:
        return ElementState()

    def feed(self, state: ElementState, text: str) -> tuple[ElementState, str, None]:
        out: list[str] = []
        text, state = state.buf + text, state.replace(buf="")
        pos = 0
        while pos < len(text) and state.where is not Where.STOPPED:
            if state.where is Where.BETWEEN:
                state, pos = self._between(state, text, pos)
            elif state.where is Where.NAME:
                state, pos = self._name(state, text, pos, out)
            elif state.where is Where.VALUE:
                state, pos = self._value(state, text, pos, out)
            else:
                state, pos = self._held(state, text, pos, out)
        return state, "".join(out), None

    def end(self, state: ElementState) -> tuple[ElementState, str]:
        tail = json_string_body(state.buf) + '"' if state.where is Where.VALUE else ""  # kept
        return ElementState(), tail + "}" if state.opened else "{}"

    # -- scanning ----------------------------------------------------------------------

    def _between(self, state: ElementState, text: str, pos: int) -> Scan:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if text.startswith(OPEN, pos):
            return state.replace(where=Where.NAME), pos + len(OPEN)
        if OPEN.startswith(text[pos:]):
            return state.replace(buf=text[pos:]), len(text)
        return _stopped(state), len(text)

    def _name(self, state: ElementState, text: str, pos: int, out: list[str]) -> Scan:
        end = text.find(">", pos)
        if end < 0:
            return state.replace(buf=text[pos:]), len(text)
        name = text[pos:end]
        if name.startswith("/") or not name.strip():
            return _stopped(state), len(text)
        if string_only(self.properties, name):
            out.append(_member(state, name) + '"')
            return state.replace(where=Where.VALUE, key=name, opened=True), end + 1
        held = f"{OPEN}{name}>"
        return state.replace(where=Where.HELD, key=name, held=held, stack=(name,)), end + 1

    def _value(self, state: ElementState, text: str, pos: int, out: list[str]) -> Scan:
        at = text.find(NS, pos)
        if at < 0:
            keep = _ns_prefix_at_end(text, pos)
            out.append(json_string_body(text[pos:keep]))
            return state.replace(buf=text[keep:]), len(text)
        out.append(json_string_body(text[pos:at]))
        closer, tail = f"{CLOSE}{state.key}>", text[at:]
        if tail.startswith(closer):
            out.append('"')
            return state.replace(where=Where.BETWEEN, key=""), at + len(closer)
        if closer.startswith(tail):
            return state.replace(buf=tail), len(text)
        out.append('"')  # a child element or a stray marker: the value ends here (documented)
        return _stopped(state), len(text)

    def _held(self, state: ElementState, text: str, pos: int, out: list[str]) -> Scan:
        at = text.find(NS, pos)
        stop = _ns_prefix_at_end(text, pos) if at < 0 else at
        state = state.replace(held=state.held + text[pos:stop])
        if at < 0:
            return state.replace(buf=text[stop:]), len(text)
        closer, tail = f"{CLOSE}{state.stack[-1]}>", text[at:]
        if tail.startswith(closer):
            held, stack = state.held + closer, state.stack[:-1]
            if not stack:
                return self._write_held(state, held, out), at + len(closer)
            return state.replace(held=held, stack=stack), at + len(closer)
        name_end = tail.find(">", len(OPEN)) if tail.startswith(OPEN) else -1
        if closer.startswith(tail) or OPEN.startswith(tail) or (tail.startswith(OPEN) and name_end < 0):
            return state.replace(buf=tail), len(text)  # undecided: a closer or a child's name
        name = tail[len(OPEN) : name_end] if name_end >= 0 else ""
        if name.startswith("/") or not name.strip() or len(state.stack) >= MAX_DEPTH:
            return _stopped(state), len(text)  # malformed: vLLM drops it and stops, so do we
        return state.replace(held=state.held + tail[: name_end + 1], stack=(*state.stack, name)), at + name_end + 1

    def _write_held(self, state: ElementState, held: str, out: list[str]) -> ElementState:
        """A typed parameter closed (`held`: its element): converted as vLLM does, then
        coerced (`_fix_arg_types`)."""
        found = _element(held, 0, 1)
        if found is None:  # the scan above only closes well-formed elements
            return _stopped(state)
        schema = self.properties.get(state.key)
        value = _convert(found[1], schema)
        if isinstance(schema, dict):
            value, _ = coerce_value(value, schema)
        out.append(_member(state, state.key) + json_dumps(value))
        return state.replace(where=Where.BETWEEN, key="", held="", stack=(), opened=True)


def _member(state: ElementState, key: str) -> str:
    return ("{" if not state.opened else ", ") + json_dumps(key) + ": "


def _stopped(state: ElementState) -> ElementState:
    return state.replace(where=Where.STOPPED, buf="", key="", held="", stack=())


class MinimaxM3ToolParser(EngineToolParser):
    name: ClassVar[str] = "minimax_m3"
    spec = MINIMAX_M3_SPEC
    args_state: ClassVar[type[JsonState]] = ElementState

    def arg_format(self, name: str) -> ElementArgs:
        return ElementArgs(self.tool_properties(name))
