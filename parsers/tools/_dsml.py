"""DeepSeek DSML tool calls (vLLM 0.33 `deepseek_v32`, `deepseek_v4`, `deepseek_v41`): the
spec and the argument format the three share. V3.2 and V4 differ only in the block marker
(and V4's `<think>` terminals); V4.1 spells every tag with a space after `｜DSML｜`:

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">5</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

Spec (`deepseek_v32_config` / `deepseek_v4_config` / `deepseek_v41_config`, run by
`_engine`): the block marker enters the tool states, `invoke name="` opens a call (also
straight from content), its name runs to `">`, the arguments to `</invoke>` (or the block
end); after a call all text is dropped. Every name is accepted.

Arguments (`DsmlArgs`, vLLM's `_dsml_arg_converter` + `_unwrap_wrapper_args` +
`_fix_arg_types`): every match of `<parameter\\s+name="K"(\\s+string="S")?\\s*>V` where V is
the shortest text up to `</parameter>` or up to the next `<parameter\\s+name=`; other text is
ignored. S == "true": V verbatim; otherwise `json.loads(V)`, else V as a string. The object
is `json.dumps`ed; when its only member is `arguments` or `input` (not a declared parameter)
and that value (or its JSON text) is an object of declared parameters, the result is that
object; then values are coerced to the tool's schema types.

Streaming: a string value whose schema type is only "string" streams as it is read, holding
back a possible terminator; any other value is held until it ends, then converted. A call
whose first parameter is an undeclared `arguments` / `input` is held to its end (the wrapper
rule needs the whole call). State: the open head or value tail, never text already sent.

Divergences (stream == our batch; tests `test_dsml_divergence_*`): a streamed value that never
ends (the call or the output ends first) is kept, where vLLM's batch drops the parameter; a
repeated parameter is written twice (vLLM keeps the first position with the last value:
`json.loads` of both gives the same object).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from parsers._errors import LimitExceededError
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._coerce import coerce_value, fix_args_with_properties
from parsers.tools._engine import EngineSpec, Ev, S, Tr, string_only

__all__ = ["Dialect", "DSML", "DSML_SPACED", "DsmlArgs", "DsmlArgsState", "dsml_spec", "dsml_arguments"]


@dataclass(frozen=True)
class Dialect:
    """One spelling of the DSML tags, with the patterns vLLM builds from it."""

    invoke: str  # `<｜DSML｜invoke name="`
    invoke_end: str
    param: str  # `<｜DSML｜parameter`
    param_close: str
    head: regex.Pattern[str] = field(init=False)  # a parameter head after `param`
    end: regex.Pattern[str] = field(init=False)  # what ends a value
    full: regex.Pattern[str] = field(init=False)  # vLLM's parameter regex

    def __post_init__(self) -> None:
        start, close = regex.escape(self.param), regex.escape(self.param_close)
        head = r'\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>'
        full = rf"{start}{head}(.*?)(?:{close}|(?={start}\s+name=))"
        object.__setattr__(self, "head", regex.compile(head))  # frozen: set once here
        object.__setattr__(self, "end", regex.compile(rf"{close}|{start}\s+name="))
        object.__setattr__(self, "full", regex.compile(full, regex.DOTALL))


DSML = Dialect('<｜DSML｜invoke name="', "</｜DSML｜invoke>", "<｜DSML｜parameter", "</｜DSML｜parameter>")
DSML_SPACED = Dialect('<｜DSML｜ invoke name="', "</｜DSML｜ invoke>", "<｜DSML｜ parameter", "</｜DSML｜ parameter>")
THINK_START, THINK_END = "<think>", "</think>"


def dsml_spec(dialect: Dialect, block: tuple[str, ...], block_end: str, *, think: bool) -> EngineSpec:
    """The engine config: `block` the block marker's spellings (the first canonical)."""
    transitions = {
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE),
        (S.PREAMBLE, "INVOKE_PREFIX"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.CONTENT, "INVOKE_PREFIX"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.NAME, "INVOKE_NAME_END"): Tr(S.ARGS),
        (S.ARGS, "INVOKE_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.ARGS, "TOOL_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.BETWEEN, "INVOKE_PREFIX"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.BETWEEN, "TOOL_END"): Tr(S.BETWEEN),
        (S.BETWEEN, "TOOL_START"): Tr(S.PREAMBLE),
    }
    terminals: dict[str, str | tuple[str, ...]] = {
        "TOOL_START": block if len(block) > 1 else block[0], "TOOL_END": block_end,
        "INVOKE_PREFIX": dialect.invoke, "INVOKE_NAME_END": '">', "INVOKE_END": dialect.invoke_end,
        "PARAM_START": dialect.param, "PARAM_CLOSE": dialect.param_close,
    }  # fmt: skip
    if think:
        terminals |= {"THINK_START": THINK_START, "THINK_END": THINK_END}
        transitions |= {
            (S.CONTENT, "THINK_START"): Tr(S.REASONING, (Ev.REASONING_START,)),
            (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
            (S.REASONING, "THINK_START"): Tr(S.REASONING),
            (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
            (S.REASONING, "TOOL_START"): Tr(S.PREAMBLE, (Ev.REASONING_END,)),
        }
    return EngineSpec(terminals=terminals, transitions=transitions, strip_content_ws_with_tools=False)


# -- the batch rule -------------------------------------------------------------------------


def dsml_arguments(raw: str, dialect: Dialect, properties: Mapping[str, Any]) -> str:
    """The arguments vLLM returns for a call's whole raw argument text (module docstring)."""
    params: dict[str, Any] = {}
    for found in dialect.full.finditer(raw):
        params[found.group(1)] = _decode(found.group(3), found.group(2) == "true")
    out = _unwrap(params, properties)
    return fix_args_with_properties(out, properties)


def _decode(raw: str, is_string: bool) -> Any:
    """A parameter value: verbatim, or `json.loads` falling back to the text."""
    if is_string:
        return raw
    value = json_loads(raw)
    return value if is_json(value) else raw


def _unwrap(params: dict[str, Any], properties: Mapping[str, Any]) -> str:
    """`_unwrap_wrapper_args`: a lone undeclared `arguments` / `input` member's object."""
    args = json_dumps(params)
    if not properties or not isinstance(properties, Mapping):
        return args
    for wrapper in ("arguments", "input"):
        if set(params) != {wrapper} or wrapper in properties:
            continue
        inner = params[wrapper]
        if isinstance(inner, str):
            inner = json_loads(inner)
            if not is_json(inner):
                return args
        if isinstance(inner, dict) and set(inner) <= set(properties):
            return json_dumps(inner)
    return args


# -- the stream -----------------------------------------------------------------------------


class Where(enum.StrEnum):
    SEEK = "seek"  # outside parameters: `buf` may be the start of a parameter tag
    HEAD = "head"  # `buf`: the head after the parameter tag, not yet complete
    VALUE = "value"  # inside a value: `buf` its held tail (or all of it when held)
    WHOLE = "whole"  # the call is held whole in `buf` (the wrapper rule)


@dataclass(frozen=True, slots=True)
class DsmlArgsState(JsonState):
    """where / buf: see `Where`. key, string: the open parameter. stream: its value streams
    (else `buf` holds all of it). opened: the `{` was written."""

    where: Where = Where.SEEK
    buf: str = ""
    key: str = ""
    string: bool = False
    stream: bool = False
    opened: bool = False

    def held_chars(self) -> int:
        return len(self.buf) + len(self.key)


class DsmlArgs:
    """DSML parameters -> vLLM's arguments string, as a stream (module docstring)."""

    def __init__(self, dialect: Dialect, properties: Mapping[str, Any], limit: int) -> None:
        self.dialect, self.properties, self.limit = dialect, properties, limit

    def start(self, name: str = "") -> DsmlArgsState:
        return DsmlArgsState()

    def feed(self, state: DsmlArgsState, text: str) -> tuple[DsmlArgsState, str, None]:
        out: list[str] = []
        state = self._run(state, state.buf + text, out)
        if len(state.buf) > self.limit:
            raise LimitExceededError(f"a held DSML parameter exceeds {self.limit} characters")
        return state, "".join(out), None

    def end(self, state: DsmlArgsState) -> tuple[DsmlArgsState, str]:
        if state.where is Where.WHOLE:
            return state.replace(buf=""), dsml_arguments(state.buf, self.dialect, self.properties)
        out = ""
        if state.where is Where.VALUE and state.stream:
            out = json_string_body(state.buf) + '"'  # a streamed value that never ended
        if not state.opened:
            return state.replace(buf=""), "{}"
        return state.replace(buf="", where=Where.SEEK), out + "}"

    # -- the scanner --------------------------------------------------------------------

    def _run(self, state: DsmlArgsState, text: str, out: list[str]) -> DsmlArgsState:
        d = self.dialect
        while True:
            if state.where is Where.WHOLE:
                return state.replace(buf=text)
            if state.where is Where.SEEK:
                at = text.find(d.param)
                if at == -1:
                    return state.replace(buf=text[len(text) - _prefix_len(text, d.param) :])
                state, text = state.replace(where=Where.HEAD), text[at + len(d.param) :]
                continue
            if state.where is Where.HEAD:
                found = d.head.match(text, partial=True)
                if found is None:  # no parameter here: look for the next tag in its text
                    state = state.replace(where=Where.SEEK)
                    continue
                if found.partial:
                    return state.replace(buf=text)
                key, string = found.group(1), found.group(2) == "true"
                if not state.opened and self._wrapped(key):
                    return state.replace(where=Where.WHOLE, buf=d.param + text)
                stream = string and string_only(self.properties, key)
                if stream:
                    out.append(("{" if not state.opened else ", ") + json_dumps(key) + ': "')
                    state = state.replace(opened=True)
                state = state.replace(where=Where.VALUE, key=key, string=string, stream=stream)
                text = text[found.end() :]
                continue
            # VALUE
            found = d.end.search(text, partial=True)
            if found is None or found.partial:
                cut = len(text) if found is None else found.start()
                if state.stream:
                    out.append(json_string_body(text[:cut]))
                    return state.replace(buf=text[cut:])
                return state.replace(buf=text)
            state = self._close_value(state, text[: found.start()], out)
            # The next parameter tag (when that ended the value) is scanned again.
            text = text[found.end() :] if found.group(0) == d.param_close else text[found.start() :]

    def _close_value(self, state: DsmlArgsState, raw: str, out: list[str]) -> DsmlArgsState:
        if state.stream:
            out.append(json_string_body(raw) + '"')
        else:
            value = _decode(raw, state.string)
            prop = self.properties.get(state.key) if isinstance(self.properties, Mapping) else None
            if isinstance(prop, dict):
                value, _ = coerce_value(value, prop)
            out.append(("{" if not state.opened else ", ") + json_dumps(state.key) + ": " + json_dumps(value))
            state = state.replace(opened=True)
        return state.replace(where=Where.SEEK, key="", string=False, stream=False, buf="")

    def _wrapped(self, key: str) -> bool:
        """The first parameter may be a wrapper vLLM unwraps: hold the call whole."""
        properties = self.properties
        return bool(properties) and key in ("arguments", "input") and key not in properties


def _prefix_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
