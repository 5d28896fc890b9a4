"""Kimi K2 tool calls (vLLM 0.33 `kimi_k2`: `KimiK2ToolParser` over `vllm/parser/kimi_k2.py`).

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Tokyo"}<|tool_call_end|><|tool_calls_section_end|>

Spec: `kimi_k2_config(thinking)` run by `_engine` (thinking from the request's chat
template kwargs, as vLLM builds engine tool adapters; on without them). The section marker enters the tool states and they are never
left: text after the section is dropped. With thinking on `</think>` in content is dropped and `<think>`
is text (both are text when no reasoning parser is configured); off, both are text.

The header (the slot's name text) is Kimi's own call id: when its stripped text starts with
`.+:\\d+` (one line), the call id is that match and the name its part before the first `:`
without `functions.`. A header that is no id is reset to "" once arguments arrive, so the
name is the first `"name": "..."` in the arguments, else the arguments read as a
`{"name", "arguments"}` object (the engine's fallbacks); a call with no argument text keeps
its stripped header as its name and gets a deterministic id.

Arguments (`KimiArgs`, vLLM's `_extract_args_json` override + `_fix_arg_types`): the raw
text, stripped, "{}" when blank; when it is one JSON object, values are coerced to the
tool's schema types (then re-serialised as vLLM does). They stream raw, holding back only
values the schema may coerce and trailing whitespace (`_json_args` raw mode).

Divergences (stream == our batch; tests `test_kimi_k2_divergence_*`): a coerced value
followed by text that makes the arguments no longer JSON keeps its coerced spelling (vLLM then
leaves the whole text raw); a coerced value after non-canonical text (the objects are
JSON-equal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers._state import JsonState
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr
from parsers.tools._json_args import DONE, ERROR, JsonArgs, JsonArgsState, SchemaTable
from parsers.tools.glm47 import thinking_enabled

__all__ = ["KimiK2ToolParser", "KimiArgs", "KIMI_K2_SPEC", "kimi_k2_spec", "kimi_header"]

THINK_START = "<think>"
THINK_END = "</think>"
SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"

_REASONING_TERMINALS = {"THINK_START": THINK_START, "THINK_END": THINK_END}
_REASONING_TRANSITIONS = {
    (S.REASONING, "THINK_START"): Tr(S.REASONING),
    (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
    (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
}


def kimi_k2_spec(thinking: bool = True) -> EngineSpec:
    """`kimi_k2_config(thinking)`: thinking off drops the `<think>` terminals."""
    return EngineSpec(
        terminals={
            **(_REASONING_TERMINALS if thinking else {}),
            "TOOL_SECTION_START": SECTION_BEGIN, "TOOL_SECTION_END": SECTION_END,
            "TOOL_START": CALL_BEGIN, "TOOL_END": CALL_END, "ARG_START": ARG_BEGIN,
        },
        transitions={
            **(_REASONING_TRANSITIONS if thinking else {}),
            (S.REASONING, "TOOL_SECTION_START"): Tr(S.PREAMBLE, (Ev.REASONING_END,)),
            (S.CONTENT, "TOOL_SECTION_START"): Tr(S.PREAMBLE),
            (S.PREAMBLE, "TOOL_START"): Tr(S.NAME, (Ev.CALL_START,)),
            (S.NAME, "ARG_START"): Tr(S.ARGS),
            (S.ARGS, "TOOL_END"): Tr(S.BETWEEN, (Ev.CALL_END,)),
            (S.ARGS, "TOOL_SECTION_END"): Tr(S.PREAMBLE, (Ev.CALL_END,)),
            (S.BETWEEN, "TOOL_START"): Tr(S.NAME, (Ev.CALL_START,)),
            (S.PREAMBLE, "TOOL_SECTION_END"): Tr(S.PREAMBLE),
            (S.BETWEEN, "TOOL_SECTION_END"): Tr(S.PREAMBLE),
        },
        strip_content_ws_with_tools=False,
        drop_ws_only_content_before_tools=True,
    )  # fmt: skip


_SPECS = {thinking: kimi_k2_spec(thinking) for thinking in (True, False)}
KIMI_K2_SPEC = _SPECS[True]

# vLLM's `_TOOL_ID_RE.match` (`regex` module: `.` is any character but "\n").
_TOOL_ID = re.compile(r".+:\d+")


def kimi_header(header: str) -> tuple[str, str] | None:
    """(call id, name) of a Kimi header, or None when it is no id (or names nothing)."""
    found = _TOOL_ID.match(header.strip())
    if found is None:
        return None
    call_id = found.group(0).strip()
    name = call_id.split(":")[0].removeprefix("functions.")
    return (call_id, name) if name else None


@dataclass(frozen=True, slots=True)
class KimiArgsState(JsonState):
    """json: the raw JSON writer. raw: the text is written as it is from here on (the JSON
    value ended, or was never one). ws: trailing whitespace held (vLLM strips the text).
    wrote: something was written."""

    json: JsonArgsState = JsonArgsState()
    raw: bool = False
    ws: str = ""
    wrote: bool = False

    def held_chars(self) -> int:
        return self.json.held_chars() + len(self.ws)


class KimiArgs:
    """`raw.strip() or "{}"`, then `_fix_arg_types` (module docstring), as a stream."""

    def __init__(self, properties: Mapping[str, Any], limit: int) -> None:
        self.json = JsonArgs(raw=True, schema=SchemaTable(properties), limit=limit)

    def start(self, name: str = "") -> KimiArgsState:
        return KimiArgsState(json=self.json.start(name))

    def feed(self, state: KimiArgsState, text: str) -> tuple[KimiArgsState, str, None]:
        if state.raw:
            return self._write(state, text)
        js, out, rest = self.json.feed(state.json, text)
        state = state.replace(json=js)
        if js.status == ERROR:
            return self._write(state.replace(raw=True), out + self.json.held_raw(js) + (rest or ""))
        if js.status == DONE:
            return self._write(state.replace(raw=True), out + (rest or ""))
        return self._write(state, out)

    def _write(self, state: KimiArgsState, text: str) -> tuple[KimiArgsState, str, None]:
        body = state.ws + text
        if not state.wrote:
            body = body.lstrip()
        kept = body.rstrip()
        return state.replace(ws=body[len(kept) :], wrote=state.wrote or bool(kept)), kept, None

    def end(self, state: KimiArgsState) -> tuple[KimiArgsState, str]:
        out = ""
        if not state.raw:
            js, out = self.json.end(state.json)
            if js.status != DONE:
                out += self.json.held_raw(js)
            state = state.replace(json=js)
        state, written, _ = self._write(state, out)
        return state.replace(ws=""), written or ("" if state.wrote else "{}")


class KimiK2ToolParser(EngineToolParser):
    name: ClassVar[str] = "kimi_k2"
    spec = KIMI_K2_SPEC
    args_state: ClassVar[type[JsonState]] = KimiArgsState

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
        self.spec = _SPECS[thinking_enabled(chat_template_kwargs)]
        super().__init__(vocab, tools, max_call_chars=max_call_chars, special_tokens=special_tokens,
                         skip_reasoning_parsing=skip_reasoning_parsing)  # fmt: skip

    def arg_format(self, name: str) -> KimiArgs:
        return KimiArgs(self.tool_properties(name), self.call_limit)

    def name_text(self, raw_name: str, closing: bool) -> str:
        return raw_name if closing or kimi_header(raw_name) else ""

    def commit_name(self, raw_name: str) -> str:
        header = kimi_header(raw_name)
        return header[1] if header else raw_name.strip()

    def own_call_id(self, raw_name: str) -> str | None:
        header = kimi_header(raw_name)
        return header[0] if header else None
