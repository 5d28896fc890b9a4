"""Qwen3-Coder XML tool calls (vLLM names `qwen3_coder`, `qwen3_xml`), on vLLM's parser engine:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Spec: vLLM 0.33 `qwen3_config` (`vllm/parser/qwen3.py`), run by `_engine` as its tool adapter
does. Arguments (`_qwen3_arg_converter`, then `_fix_arg_types`): every
`<parameter=NAME>VALUE` ended by `</parameter>` or by the next `<parameter=` (whitespace
allowed inside the tags, as vLLM's regex does); NAME verbatim; VALUE loses one leading and
one trailing newline; the object is `json.dumps`ed and values are coerced to the tool's
schema types.

Streaming (`ParamArgs`): a value whose schema type is only "string" (or that the schema does
not mention) streams as it is read, holding back one trailing newline and a possible closing
tag; any other value is held until it ends, then coerced. State: the open tag or value tail,
never the value text already sent.

Divergences from vLLM's batch (stream == our batch instead; tests `test_qwen3_coder_*`):
a streamed value that never ends (the call or the output stops first) is kept, where vLLM's
batch drops the parameter; a repeated parameter is written twice (vLLM keeps the first
position with the last value: `json.loads` of both gives the same object); and the engine's
leading-whitespace rule (`_engine`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._coerce import coerce_to_schema_type, schema_types
from parsers.tools._engine import WS, EngineSpec, EngineToolParser, Ev, S, Tr, string_only

__all__ = ["Qwen3CoderToolParser", "QWEN3_XML_SPEC", "QWEN3_PARAMS", "ParamArgs", "ParamState", "ParamSyntax"]

TOOL_START, TOOL_END = "<tool_call>", "</tool_call>"
FUNC_PREFIX, FUNC_END = "<function=", "</function>"

_START = (Ev.REASONING_END, Ev.CALL_START)
QWEN3_XML_SPEC = EngineSpec(
    terminals={
        "THINK_START": "<think>", "THINK_END": "</think>",
        "TOOL_START": TOOL_START, "TOOL_END": TOOL_END,
        "FUNC_PREFIX": FUNC_PREFIX, "FUNC_END": FUNC_END,
        "PARAM_START": "<parameter=", "PARAM_END": "</parameter>", "CLOSE_ANGLE": ">",
    },
    transitions={
        (S.REASONING, "THINK_START"): Tr(S.REASONING),
        (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
        (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
        (S.REASONING, "TOOL_START"): Tr(S.PREAMBLE, _START),
        (S.CONTENT, "TOOL_START"): Tr(S.PREAMBLE, _START),
        (S.CONTENT, "FUNC_PREFIX"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.PREAMBLE, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
        (S.PREAMBLE, "FUNC_PREFIX"): Tr(S.NAME),
        (S.NAME, "CLOSE_ANGLE"): Tr(S.ARGS),
        (S.NAME, "FUNC_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.NAME, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
        (S.NAME, "TOOL_START"): Tr(S.PREAMBLE, (Ev.CALL_END, Ev.CALL_START)),
        (S.NAME, "FUNC_PREFIX"): Tr(S.NAME, (Ev.CALL_END, Ev.CALL_START)),
        (S.ARGS, "FUNC_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
        (S.ARGS, "FUNC_PREFIX"): Tr(S.NAME, (Ev.CALL_END, Ev.CALL_START)),
        (S.ARGS, "PARAM_START"): Tr(S.ARGS, (Ev.ARG,)),
        (S.ARGS, "PARAM_END"): Tr(S.ARGS, (Ev.ARG,)),
        (S.BETWEEN, "TOOL_END"): Tr(S.CONTENT),
        (S.BETWEEN, "TOOL_START"): Tr(S.PREAMBLE, (Ev.CALL_START,)),
        (S.BETWEEN, "FUNC_PREFIX"): Tr(S.NAME, (Ev.CALL_START,)),
    },
)  # fmt: skip


# -- the argument format ------------------------------------------------------------------


@dataclass(frozen=True)
class ParamSyntax:
    """How a family's `<parameter ...>VALUE` arguments are written (vLLM's converter regex).

    header: one parameter's opening tag; `name(match)` its name ("" with `skip_empty`: the
    parameter is read and dropped). value_end / next_header: what ends a value (its closing
    tag, or the next opening tag, which stays). trim_newline: a value loses one leading and
    one trailing newline. preferred: the header alternatives the regex tries first; while one
    of them may still match the text, a match of a later alternative is not final."""

    header: regex.Pattern[str]
    value_end: regex.Pattern[str]
    next_header: regex.Pattern[str]
    name: Callable[[regex.Match[str]], str] = lambda match: match.group(1)
    trim_newline: bool = True
    skip_empty: bool = False
    preferred: regex.Pattern[str] | None = None


QWEN3_PARAMS = ParamSyntax(
    header=regex.compile(rf"<{WS}parameter{WS}={WS}([^>]*)>"),
    value_end=regex.compile(rf"<{WS}/{WS}parameter{WS}>"),
    next_header=regex.compile(rf"<{WS}parameter{WS}="),
)


class Where(enum.StrEnum):
    BETWEEN = "between"  # outside a parameter: text is ignored, a header may start
    VALUE = "value"  # inside a parameter's value


@dataclass(frozen=True, slots=True)
class ParamState(JsonState):
    """buf: BETWEEN: a header still being read; VALUE: a possible end tag still being read.
    key: the open parameter's name. stream: its value streams (else it is held in value).
    started: a streamed value is past its first character; nl: a streamed value's trailing
    newline is held. opened: the `{` was written. skip: the open parameter is dropped."""

    where: Where = Where.BETWEEN
    buf: str = ""
    key: str = ""
    stream: bool = False
    value: str = ""
    started: bool = False
    nl: bool = False
    opened: bool = False
    skip: bool = False

    def held_chars(self) -> int:
        return len(self.buf) + len(self.key) + len(self.value)


class ParamArgs:
    """`<parameter=NAME>VALUE</parameter>` arguments -> the JSON object (module docstring)."""

    def __init__(self, properties: Mapping[str, Any], syntax: ParamSyntax = QWEN3_PARAMS) -> None:
        self.properties = properties
        self.syntax = syntax

    def start(self, name: str) -> ParamState:
        return ParamState()

    def feed(self, state: ParamState, text: str) -> tuple[ParamState, str, None]:
        out: list[str] = []
        text = state.buf + text
        state = state.replace(buf="")
        pos = 0
        while pos < len(text):
            if state.where is Where.BETWEEN:
                state, pos = self._between(state, text, pos, out)
            else:
                state, pos = self._value(state, text, pos, out)
        return state, "".join(out), None

    def end(self, state: ParamState) -> tuple[ParamState, str]:
        out: list[str] = []
        if state.where is Where.VALUE and state.stream:  # documented: an open value is kept
            out.append('"')
        if not state.opened and out == []:
            return ParamState(), "{}"
        out.append("}")
        return ParamState(), "".join(out)

    # -- scanning ----------------------------------------------------------------------

    def _between(self, state: ParamState, text: str, pos: int, out: list[str]) -> tuple[ParamState, int]:
        at = text.find("<", pos)
        if at == -1:
            return state, len(text)
        syntax = self.syntax
        header = syntax.header.match(text, at)
        if header is not None and not self._undecided(text, at):
            return self._open_value(state, syntax.name(header), out), header.end()
        if header is not None or syntax.header.fullmatch(text, at, partial=True):
            return state.replace(buf=text[at:]), len(text)
        return state, at + 1

    def _undecided(self, text: str, at: int) -> bool:
        """A header alternative the regex prefers may still match once more text comes."""
        preferred = self.syntax.preferred
        if preferred is None:
            return False
        found = preferred.match(text, at, partial=True)
        return found is not None and found.partial

    def _open_value(self, state: ParamState, key: str, out: list[str]) -> ParamState:
        if self.syntax.skip_empty and not key:
            return state.replace(where=Where.VALUE, key="", stream=False, value="", started=False,
                                 nl=False, skip=True)  # fmt: skip
        stream = string_only(self.properties, key)
        if stream:
            out.append(self._member(state, key) + '"')
            state = state.replace(opened=True)
        return state.replace(where=Where.VALUE, key=key, stream=stream, value="",
                             started=False, nl=False, skip=False)  # fmt: skip

    def _member(self, state: ParamState, key: str) -> str:
        return ("{" if not state.opened else ", ") + json_dumps(key) + ": "

    def _value(self, state: ParamState, text: str, pos: int, out: list[str]) -> tuple[ParamState, int]:
        at = text.find("<", pos)
        if at == -1:
            return self._value_text(state, text[pos:], out), len(text)
        state = self._value_text(state, text[pos:at], out)
        syntax = self.syntax
        closing = syntax.value_end.match(text, at)
        if closing is not None:
            return self._close_value(state, out), closing.end()
        if syntax.next_header.match(text, at) is not None:
            return self._close_value(state, out), at
        if syntax.value_end.fullmatch(text, at, partial=True) or syntax.next_header.fullmatch(
            text, at, partial=True
        ):
            return state.replace(buf=text[at:]), len(text)
        return self._value_text(state, "<", out), at + 1

    def _value_text(self, state: ParamState, text: str, out: list[str]) -> ParamState:
        if not text or state.skip:
            return state
        if not state.stream:
            return state.replace(value=state.value + text)
        if not self.syntax.trim_newline:
            out.append(json_string_body(text))
            return state
        if not state.started:
            text = text.removeprefix("\n")
            state = state.replace(started=True)
        text = ("\n" if state.nl else "") + text
        nl = text.endswith("\n")
        out.append(json_string_body(text[:-1] if nl else text))
        return state.replace(nl=nl)

    def _close_value(self, state: ParamState, out: list[str]) -> ParamState:
        if state.skip:
            pass
        elif state.stream:
            out.append('"')
        else:
            value = state.value
            if self.syntax.trim_newline:
                value = value.removeprefix("\n").removesuffix("\n")
            types = schema_types(self.properties.get(state.key))
            out.append(self._member(state, state.key) + json_dumps(coerce_to_schema_type(value, types)))
            state = state.replace(opened=True)
        return state.replace(where=Where.BETWEEN, key="", value="", stream=False, started=False,
                             nl=False, skip=False)  # fmt: skip


class Qwen3CoderToolParser(EngineToolParser):
    name: ClassVar[str] = "qwen3_coder"
    spec = QWEN3_XML_SPEC
    args_state: ClassVar[type[JsonState]] = ParamState

    def arg_format(self, name: str) -> ParamArgs:
        return ParamArgs(self.tool_properties(name))
