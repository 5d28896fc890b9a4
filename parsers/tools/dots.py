"""dots.llm1 XML tool calls (vLLM name `dots`, vLLM's DotsToolParser), on the parser engine:

    <dots_function_call>
    <invoke name="search">
    <parameter name="query">weather in Shanghai</parameter>
    </invoke>
    </dots_function_call>

Spec: vLLM 0.33 `vllm/tool_parsers/dots_tool_parser.py` (a hand-written parser; its batch is
the oracle). Only a `<dots_function_call>` block holds calls: each `<invoke name=NAME>` in it
up to `</invoke>` is one call, NAME stripped and unquoted; a block whose body is not invokes
is read as one `{"name", "arguments" | "parameters"}` JSON object (arguments an object, kept
as written, no coercion). A call whose name is not one of the request's tools is dropped
(without tools every call is). With a call returned the content is the text before the first
block, stripped; without one it is the whole output verbatim (`keeps_raw_without_calls`).

Arguments: every `<parameter name=NAME>VALUE</parameter>`, NAME stripped and unquoted, VALUE
stripped, then converted by the schema type vLLM resolves (`type`, a `$defs` `$ref`, the
first non-null anyOf/oneOf/allOf alternative; default string): "null" (any case) -> null;
string -> as is; integer -> int(); number -> float (an integral one as int); boolean ->
"true"/"1" (any case); otherwise JSON, else the string. Streaming (`DotsArgs`): a string value
streams, holding back only what is undecided (its leading whitespace, dropped; its first
characters while it may still strip to "null"; trailing whitespace); a boolean holds only what
may still be "true" / "1" / "null"; any other typed value is held until its `</parameter>`
(its conversion needs the whole text). State: that undecided text, never text already sent.

Divergences from vLLM's batch (stream == our batch instead; tests `test_dots_*`), each because
a call had already streamed: an invoke without `</invoke>` (output cut, or its block closed
first) is kept, where vLLM drops it (and, with no other call, returns the text), with the
string values it streamed (one the output cuts is closed; an undecided or typed one is
dropped); a repeated
parameter is written twice (`json.loads` gives vLLM's object); text that is not whitespace
before a block's first invoke is read as a JSON call of its own and the invokes still count
(vLLM reads the whole block as JSON and drops it); `<invoke` / `<parameter` spelled with other whitespace than
one space before `name=` is not markup; the engine's leading-whitespace rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import regex

from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps, json_loads
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr
from parsers.tools.qwen3_coder import ParamArgs, ParamState, ParamSyntax, Where

__all__ = ["DotsToolParser", "DOTS_SPEC"]

_INVOKE = "<invoke name="

DOTS_SPEC = EngineSpec(
    terminals={
        "TOOL_START": "<dots_function_call>", "TOOL_END": "</dots_function_call>",
        "INVOKE": _INVOKE, "NAME_END": ">", "INVOKE_END": "</invoke>",
    },
    transitions={
        # The block itself is a slot: its body, when it is no invoke, is a JSON call.
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE, (Ev.CALL_START,)),
        (S.PREAMBLE, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
        (S.PREAMBLE, "INVOKE"): Tr(S.NAME, (Ev.CALL_END, Ev.CALL_START)),
        (S.NAME, "NAME_END"): Tr(S.ARGS),
        (S.ARGS, "INVOKE_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.ARGS, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
        (S.NAME, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
        (S.BETWEEN, "INVOKE"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.BETWEEN, "TOOL_END"): Tr(S.CONTENT),
    },
    content_events={S.CONTENT: Ev.TEXT, S.PREAMBLE: Ev.ARG, S.NAME: Ev.NAME, S.ARGS: Ev.ARG},
    validate_tool_names=True,
)  # fmt: skip

DOTS_PARAMS = ParamSyntax(
    header=regex.compile(r"<parameter\s+name\s*=([^>]+)>"),
    value_end=regex.compile(r"</parameter>"),
    next_header=regex.compile(r"(?!)"),  # vLLM's value runs to `</parameter>`, nothing else
    name=lambda m: unquote(m.group(1)),
    trim_newline=False,
)


def unquote(value: str) -> str:
    """vLLM's `_extract_name`: stripped, one pair of matching quotes removed."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def resolve_type(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    """vLLM's `_resolve_param_type` (None: unresolved, read as string)."""
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return resolve_type(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for keyword in ("anyOf", "oneOf", "allOf"):
        alternatives = schema.get(keyword)
        if not isinstance(alternatives, list):
            continue
        for alternative in alternatives:
            if isinstance(alternative, dict) and alternative.get("type") == "null":
                continue
            resolved = resolve_type(alternative, defs, depth + 1)
            if resolved is not None:
                return resolved
    return None


def convert_value(value: str, kind: Any) -> Any:
    """vLLM's `_convert_param_value` of a stripped value under schema type `kind`."""
    if value.lower() == "null":
        return None
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), "string")
    kind = str(kind).lower()
    if kind in ("string", "str", "text"):
        return value
    try:
        if kind in ("integer", "int"):
            return int(value)
        if kind in ("number", "float"):
            number = float(value)
            return int(number) if number.is_integer() else number
    except ValueError:
        return value
    if kind in ("boolean", "bool"):
        return value.lower() in ("true", "1")
    try:
        return json.loads(value)
    except ValueError:
        return value


# The stripped values a kind decides by its text alone (`convert_value`): while a value may
# still be one of these, it is held; a string value then streams, a boolean one is false.
_STRING_KINDS = frozenset({"string", "str", "text"})
_LITERALS: Mapping[str, tuple[str, ...]] = {"string": ("null",), "boolean": ("true", "1", "null")}


def value_kind(schema: Any, known: bool, defs: Mapping[str, Any]) -> str:
    """The kind `convert_value` converts a member to: "string", "boolean" or another (held)."""
    kind = (resolve_type(schema, defs) or "string") if known else "string"
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), "string")
    kind = str(kind).lower()
    return "string" if kind in _STRING_KINDS else "boolean" if kind in ("boolean", "bool") else kind


def may_be_literal(held: str, literals: tuple[str, ...]) -> bool:
    """Whether a value whose text so far is `held` (left-stripped) may still strip to one of
    `literals` (any case). Only ASCII letters lower into them, so lengths are safe."""
    core = held.rstrip()
    folded = core.lower()
    tail_ok = len(held) == len(core) or folded in literals
    return tail_ok and any(literal.startswith(folded) for literal in literals)


class DotsArgs(ParamArgs):
    """`<parameter name=NAME>VALUE</parameter>` -> members (module docstring).

    A string value (`stream`) drops its leading whitespace, holds its first characters while
    they may still be "null" and then streams (`started`: its member and opening quote were
    written), holding back trailing whitespace; `value` holds that undecided text. A boolean
    value holds only what may still be "true" / "1" / "null", then is false (`skip`: the rest
    is ignored). Any other value is held whole in `value` until `</parameter>`."""

    def __init__(self, properties: Mapping[str, Any], defs: Mapping[str, Any]) -> None:
        super().__init__(properties, DOTS_PARAMS)
        self.defs = defs

    def _kind(self, key: str) -> str:
        return value_kind(self.properties.get(key), key in self.properties, self.defs)

    def _open_value(self, state: ParamState, key: str, out: list[str]) -> ParamState:
        return state.replace(where=Where.VALUE, key=key, stream=self._kind(key) in _LITERALS,
                             value="", started=False, nl=False, skip=False)  # fmt: skip

    def _value_text(self, state: ParamState, text: str, out: list[str]) -> ParamState:
        if not text or state.skip:
            return state
        held = state.value + text
        if not state.stream:
            return state.replace(value=held)
        kind = self._kind(state.key)
        if not state.started:
            held = held.lstrip()
            if may_be_literal(held, _LITERALS[kind]):
                return state.replace(value=held)
            if kind == "boolean":  # no longer "true" / "1" / "null": false, whatever follows
                out.append(self._member(state, state.key) + "false")
                return state.replace(value="", opened=True, skip=True)
            out.append(self._member(state, state.key) + '"')
            state = state.replace(started=True, opened=True)
        body = held.rstrip()  # trailing whitespace may still be stripped
        out.append(json_string_body(body))
        return state.replace(value=held[len(body) :])

    def _close_value(self, state: ParamState, out: list[str]) -> ParamState:
        if state.started:
            out.append('"')
        elif not state.skip:
            value = convert_value(state.value.strip(), self._kind(state.key))
            out.append(self._member(state, state.key) + json_dumps(value))
        return state.replace(where=Where.BETWEEN, key="", value="", stream=False, started=False,
                             skip=False, opened=True)  # fmt: skip

    def end(self, state: ParamState) -> tuple[ParamState, str]:
        # A value the output cuts: one that streamed is closed, an undecided one is dropped.
        if state.where is Where.VALUE and not state.started:
            state = state.replace(stream=False)
        return super().end(state)


class DotsToolParser(EngineToolParser):
    name: ClassVar[str] = "dots"
    spec = DOTS_SPEC
    args_state: ClassVar[type[JsonState]] = ParamState
    # vLLM returns the whole output, markup included, when no call is made.
    keeps_raw_without_calls = True

    def arg_format(self, name: str) -> DotsArgs:
        return DotsArgs(self.tool_properties(name), self._defs(name))

    def _defs(self, name: str) -> Mapping[str, Any]:
        for tool in self.tools:
            function = tool.get("function")
            if isinstance(function, Mapping) and function.get("name") == name:
                params = function.get("parameters")
                defs = params.get("$defs", {}) if isinstance(params, Mapping) else {}
                return defs if isinstance(defs, Mapping) else {}
        return {}

    def accepts(self, name: str) -> bool:
        """Only a request tool's name (none without tools)."""
        return bool(name) and name in self._tool_names

    def announces(self, raw_name: str) -> bool:
        return self.accepts(self.commit_name(raw_name))

    def name_text(self, raw_name: str, closing: bool) -> str:
        # The block's own slot has no name text: held, decided at its end as JSON.
        return raw_name or " "

    def commit_name(self, raw_name: str) -> str:
        if not raw_name.strip():
            return ""
        # An invoke whose name unquotes to nothing keeps its text: undeclared, dropped.
        return unquote(raw_name) or raw_name

    def body_name_and_args(self, raw: str) -> tuple[Any, str]:
        """The block read as one JSON object (vLLM's `_validated_call`)."""
        obj = json_loads(raw.strip()) if raw.strip() else None
        if not isinstance(obj, dict):
            return "", ""
        arguments = obj.get("arguments", obj.get("parameters", {})) or {}
        if not isinstance(arguments, dict):
            return "", ""
        return obj.get("name"), json_dumps(arguments)

    def coerce(self, args_json: str, name: str) -> str:
        return args_json  # vLLM keeps a JSON call's arguments as written
