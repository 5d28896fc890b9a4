"""GLM-4.5 / 4.6 / 4.7 XML tool calls (vLLM names `glm45`, `glm47`; `ling3` reuses the format):

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

Spec: vLLM 0.33 `glm47_moe_config` (`vllm/parser/glm47_moe.py`), run by `_engine` as its tool
adapter does. `<tool_call>` opens a slot whose name is the text up to the first `<arg_key>`
(stripped; with request tools, an undeclared name drops the call); every arg tag and the text
between them is argument text; `</tool_call>` closes the slot. The reasoning markers are
terminals only while thinking is on (`thinking` / `enable_thinking` chat-template kwargs, as
vLLM constructs the engine per request).

Arguments (`_glm47_arg_converter`, then `_fix_arg_types`): each
`<arg_key>KEY</arg_key>` + whitespace + `<arg_value>VALUE</arg_value>` pair (the regex is
lazy: a `</arg_key>` not followed by whitespace and `<arg_value>` belongs to the key; the
value ends at the first `</arg_value>`); KEY stripped, VALUE verbatim; a pair never closed is
dropped; the object is `json.dumps`ed and values are coerced to the tool's schema types.

Streaming (`ArgPairs`): a value whose schema type is only "string" (or that the schema does not
mention) streams as it is read, holding back a possible `</arg_value>`; any other value is
held until it closes, then coerced. State: the key being read and the open tag or value tail,
never value text already sent.

Divergences from vLLM's batch (stream == our batch instead; tests `test_glm_*`): a streamed
value that never closes (the call or the output ends first) is kept, where vLLM's batch
drops the pair; a repeated key is written twice (vLLM keeps the first position with the last
value: `json.loads` of both gives the same object); the engine's leading-whitespace rule
(`_engine`).

Gap: vLLM ignores a thinking switch for GLM-5.3 chat templates (detected from the tokenizer's
template); this parser sees no template and honours the switch (as `glm45` reasoning does).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._base import Vocab
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._coerce import coerce_to_schema_type, schema_types
from parsers.tools._engine import WS, EngineSpec, EngineToolParser, Ev, S, Tr, string_only

__all__ = ["Glm47ToolParser", "Ling3ToolParser", "ArgPairs", "ArgPairsState", "glm47_spec", "thinking_enabled"]

THINK_START, THINK_END = "<think>", "</think>"
TOOL_START, TOOL_END = "<tool_call>", "</tool_call>"
KEY_START, KEY_END = "<arg_key>", "</arg_key>"
VALUE_START, VALUE_END = "<arg_value>", "</arg_value>"
_ARG_TAGS = {"ARG_KEY_START": KEY_START, "ARG_KEY_END": KEY_END,
             "ARG_VALUE_START": VALUE_START, "ARG_VALUE_END": VALUE_END}  # fmt: skip


def _spec(thinking: bool) -> EngineSpec:
    reasoning_terminals = {"THINK_START": THINK_START, "THINK_END": THINK_END} if thinking else {}
    reasoning = {
        (S.CONTENT, "THINK_START"): Tr(S.REASONING, (Ev.REASONING_START,)),
        (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
        (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
    } if thinking else {}  # fmt: skip
    return EngineSpec(
        terminals={**reasoning_terminals, "TOOL_START": TOOL_START, "TOOL_END": TOOL_END, **_ARG_TAGS},
        transitions={
            **reasoning,
            (S.REASONING, "THINK_START"): Tr(S.REASONING),
            (S.REASONING, "TOOL_START"): Tr(S.NAME, (Ev.REASONING_END, Ev.CALL_START)),
            (S.CONTENT, "TOOL_START"): Tr(S.NAME, (Ev.CALL_START,)),
            (S.NAME, "ARG_KEY_START"): Tr(S.ARGS, (Ev.ARG,)),
            (S.NAME, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
            (S.ARGS, "TOOL_END"): Tr(S.CONTENT, (Ev.CALL_END,)),
            **{(S.ARGS, tag): Tr(S.ARGS, (Ev.ARG,)) for tag in _ARG_TAGS},
        },
        validate_tool_names=True,
    )


_SPECS = {True: _spec(True), False: _spec(False)}


def glm47_spec(thinking: bool = True) -> EngineSpec:
    return _SPECS[thinking]


def thinking_enabled(chat_template_kwargs: Mapping[str, Any] | None) -> bool:
    """vLLM's switch: on unless `thinking` / `enable_thinking` is given and both are falsy."""
    kwargs = chat_template_kwargs or {}
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    if thinking is None and enable is None:
        return True
    return bool(thinking) or bool(enable)


# -- the argument format ------------------------------------------------------------------

_GAP = regex.compile(f"{WS}")  # what `\s*` between `</arg_key>` and `<arg_value>` takes


class Where(enum.StrEnum):
    SEEK = "seek"  # between pairs: text is ignored until `<arg_key>`
    KEY = "key"  # reading a key (held in `key`)
    GAP = "gap"  # after `</arg_key>`: whitespace (held in `gap`) until `<arg_value>`
    VALUE = "value"  # inside a value


@dataclass(frozen=True, slots=True)
class ArgPairsState(JsonState):
    """buf: a possible tag still being read. key: the open pair's raw key; gap: the
    whitespace after its `</arg_key>`. stream: the value streams (else it is held in value).
    opened: the `{` was written."""

    where: Where = Where.SEEK
    buf: str = ""
    key: str = ""
    gap: str = ""
    stream: bool = False
    value: str = ""
    opened: bool = False

    def held_chars(self) -> int:
        return len(self.buf) + len(self.key) + len(self.gap) + len(self.value)


def _partial_tag(text: str, tags: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `tags`."""
    for n in range(min(len(text), max(map(len, tags)) - 1), 0, -1):
        tail = text[-n:]
        if any(tag.startswith(tail) for tag in tags):
            return n
    return 0


class ArgPairs:
    """`<arg_key>K</arg_key><arg_value>V</arg_value>` pairs -> the JSON object (module docstring)."""

    def __init__(
        self,
        properties: Mapping[str, Any],
        *,
        tags: tuple[str, str, str, str] = (KEY_START, KEY_END, VALUE_START, VALUE_END),
        convert: Callable[[str, str], Any] | None = None,
        streams: Callable[[str], bool] | None = None,
        strip_keys: bool = True,
    ) -> None:
        """`tags`: the key and value tags (families spell them differently); `convert`:
        (key, raw value) -> the value written (default: vLLM's engine coercion to the key's
        schema types); `streams`: whether a key's value is written as the raw string it is
        (default: its schema type is only "string"), so it streams; `strip_keys`: keys are
        stripped (GLM) or kept verbatim."""
        self.properties = properties
        self.key_start, self.key_end, self.value_start, self.value_end = tags
        self.convert = convert or self._coerce
        self.streams = streams or (lambda key: string_only(properties, key))
        self.strip_keys = strip_keys

    def _coerce(self, key: str, value: str) -> Any:
        return coerce_to_schema_type(value, schema_types(self.properties.get(key)))

    def start(self, name: str) -> ArgPairsState:
        return ArgPairsState()

    def feed(self, state: ArgPairsState, text: str) -> tuple[ArgPairsState, str, None]:
        out: list[str] = []
        text = state.buf + text
        state = state.replace(buf="")
        pos = 0
        while pos < len(text):
            if state.where is Where.SEEK:
                state, pos = self._seek(state, text, pos)
            elif state.where is Where.KEY:
                state, pos = self._key(state, text, pos)
            elif state.where is Where.GAP:
                state, pos = self._gap(state, text, pos, out)
            else:
                state, pos = self._value(state, text, pos, out)
        return state, "".join(out), None

    def end(self, state: ArgPairsState) -> tuple[ArgPairsState, str]:
        out = ""
        if state.where is Where.VALUE and state.stream:  # documented: an open value is kept
            out = json_string_body(state.buf) + '"'
        if not state.opened:
            return ArgPairsState(), "{}"
        return ArgPairsState(), out + "}"

    # -- scanning ----------------------------------------------------------------------

    def _seek(self, state: ArgPairsState, text: str, pos: int) -> tuple[ArgPairsState, int]:
        at = text.find(self.key_start, pos)
        if at != -1:
            return state.replace(where=Where.KEY, key=""), at + len(self.key_start)
        held = _partial_tag(text[pos:], (self.key_start,))
        return state.replace(buf=text[len(text) - held :] if held else ""), len(text)

    def _key(self, state: ArgPairsState, text: str, pos: int) -> tuple[ArgPairsState, int]:
        at = text.find(self.key_end, pos)
        if at != -1:
            return state.replace(where=Where.GAP, key=state.key + text[pos:at], gap=""), at + len(self.key_end)
        held = _partial_tag(text[pos:], (self.key_end,))
        stop = len(text) - held
        return state.replace(key=state.key + text[pos:stop], buf=text[stop:]), len(text)

    def _gap(self, state: ArgPairsState, text: str, pos: int, out: list[str]) -> tuple[ArgPairsState, int]:
        ws = _GAP.match(text, pos)
        end = ws.end() if ws is not None else pos
        state = state.replace(gap=state.gap + text[pos:end])
        if end == len(text):
            return state, end
        if text.startswith(self.value_start, end):
            return self._open_value(state, out), end + len(self.value_start)
        if self.value_start.startswith(text[end:]):
            return state.replace(buf=text[end:]), len(text)
        # Not a pair yet: the lazy key runs on through this `</arg_key>`.
        return state.replace(where=Where.KEY, key=state.key + self.key_end + state.gap, gap=""), end

    def _open_value(self, state: ArgPairsState, out: list[str]) -> ArgPairsState:
        key = state.key.strip() if self.strip_keys else state.key
        stream = self.streams(key)
        if stream:
            out.append(self._member(state, key) + '"')
            state = state.replace(opened=True)
        return state.replace(where=Where.VALUE, key=key, gap="", stream=stream, value="")

    def _member(self, state: ArgPairsState, key: str) -> str:
        return ("{" if not state.opened else ", ") + json_dumps(key) + ": "

    def _value(self, state: ArgPairsState, text: str, pos: int, out: list[str]) -> tuple[ArgPairsState, int]:
        at = text.find(self.value_end, pos)
        if at != -1:
            state = self._value_text(state, text[pos:at], out)
            return self._close_value(state, out), at + len(self.value_end)
        held = _partial_tag(text[pos:], (self.value_end,))
        stop = len(text) - held
        state = self._value_text(state, text[pos:stop], out)
        return state.replace(buf=text[stop:]), len(text)

    def _value_text(self, state: ArgPairsState, text: str, out: list[str]) -> ArgPairsState:
        if not text:
            return state
        if state.stream:
            out.append(json_string_body(text))
            return state
        return state.replace(value=state.value + text)

    def _close_value(self, state: ArgPairsState, out: list[str]) -> ArgPairsState:
        if state.stream:
            out.append('"')
        else:
            value = self.convert(state.key, state.value)
            out.append(self._member(state, state.key) + json_dumps(value))
            state = state.replace(opened=True)
        return state.replace(where=Where.SEEK, key="", value="", stream=False)


class Glm47ToolParser(EngineToolParser):
    name: ClassVar[str] = "glm45"
    spec = glm47_spec(True)
    args_state: ClassVar[type[JsonState]] = ArgPairsState
    # vLLM's GLM engine strips the slot's name before it decides anything about it.
    strips_slot_name: ClassVar[bool] = True

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        special_tokens: Iterable[str] = (),
        skip_reasoning_parsing: bool = False,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """`chat_template_kwargs`: the request's; thinking off removes the reasoning terminals."""
        self.spec = glm47_spec(thinking_enabled(chat_template_kwargs))
        super().__init__(vocab, tools, max_call_chars=max_call_chars, special_tokens=special_tokens,
                         skip_reasoning_parsing=skip_reasoning_parsing)  # fmt: skip

    def arg_format(self, name: str) -> ArgPairs:
        return ArgPairs(self.tool_properties(name))


class Ling3ToolParser(Glm47ToolParser):
    """`ling3` (vLLM's Ling3ToolParser): GLM-4.7's engine and format under its own name; its
    class keeps the default tool strict level."""

    name: ClassVar[str] = "ling3"
