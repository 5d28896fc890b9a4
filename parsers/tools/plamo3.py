"""PLaMo 3 tool calls (vLLM name `plamo3`, `Plamo3EngineToolParser` over vllm/parser/plamo3.py):

    <|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>
    <|plamo:begin_tool_name:plamo|>NAME<|plamo:end_tool_name:plamo|>
    <|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{...}
    <|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|> ...
    <|plamo:end_tool_requests:plamo|><|plamo:tag|>

Spec: `plamo3_config` run by `_engine` (the think markers only with thinking on, as the
config); `<|plamo:tag|>` (EOT) leaves any state for content and is dropped. Every name is
accepted; content whitespace is not stripped, a whitespace-only content before calls is
dropped. Arguments (`Plamo3Args`): the raw text stripped ("{}" when blank), values coerced to
the tool's schema types; a `<|plamo:` remainder after a complete JSON value is dropped (vLLM's
`_handle_arg_chunk`: it strips from the last `<|plamo:` when what precedes is JSON).

At the end of the output a trailing unfinished marker (text from the last `<|plamo:` that is
a proper prefix of a terminal, cut where the terminal's tokens meet) is dropped from the
content and the name, as vLLM's `_strip_unfinished_marker` does on token ids.

Divergences (stream == our batch; DIVERGENCES in tests/parsers/tools/test_tool_plamo3.py):
arguments with text after a JSON value whose values the schema coerced keep the coerced value
as streamed, then the raw text (vLLM: the raw text); a coerced value after non-canonical text
is written coerced within the model's text (vLLM re-serialises; JSON-equal); a `<|plamo:`
remainder longer than MAX_HELD_CHARS after a value is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, Vocab
from parsers._events import Event
from parsers._state import JsonState
from parsers.tools._engine import EngineSpec, EngineToolParser, Ev, S, Tr
from parsers.tools._json_args import DONE, ERROR, JsonArgs, JsonArgsState, SchemaTable
from parsers.tools._machine import ToolStreamState

__all__ = ["Plamo3ToolParser", "Plamo3Args", "plamo3_spec", "unfinished_marker_at", "MARKER_LEAD"]

BEGIN_TOOL_REQUESTS = "<|plamo:begin_tool_requests:plamo|>"
END_TOOL_REQUESTS = "<|plamo:end_tool_requests:plamo|>"
BEGIN_TOOL_REQUEST = "<|plamo:begin_tool_request:plamo|>"
END_TOOL_REQUEST = "<|plamo:end_tool_request:plamo|>"
BEGIN_TOOL_NAME = "<|plamo:begin_tool_name:plamo|>"
END_TOOL_NAME = "<|plamo:end_tool_name:plamo|>"
BEGIN_TOOL_ARGUMENTS = "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
END_TOOL_ARGUMENTS = "<|plamo:end_tool_arguments:plamo|>"
BEGIN_THINK = "<|plamo:begin_think:plamo|>"
END_THINK = "<|plamo:end_think:plamo|>"
EOT = "<|plamo:tag|>"
MARKER_LEAD = "<|plamo:"
# Pieces of PLaMo's split markers: special in its tokenizer, but never dropped as such.
PLAMO_MARKER_TOKENS = frozenset({"<|plamo:begin_", "<|plamo:end_", ":plamo|>"})
_JSON_WS = " \t\n\r"


@functools.cache
def plamo3_spec(thinking: bool) -> EngineSpec:
    terminals: dict[str, str | tuple[str, ...]] = {
        "TOOL_REQUESTS_START": BEGIN_TOOL_REQUESTS, "TOOL_REQUESTS_END": END_TOOL_REQUESTS,
        "TOOL_REQUEST_START": BEGIN_TOOL_REQUEST, "TOOL_REQUEST_END": END_TOOL_REQUEST,
        "TOOL_NAME_START": BEGIN_TOOL_NAME, "TOOL_NAME_END": END_TOOL_NAME,
        "TOOL_ARGS_START": BEGIN_TOOL_ARGUMENTS, "TOOL_ARGS_END": END_TOOL_ARGUMENTS,
        "EOT": EOT,
    }  # fmt: skip
    transitions = {
        (S.CONTENT, "TOOL_REQUESTS_START"): Tr(S.PREAMBLE),
        (S.PREAMBLE, "TOOL_REQUEST_START"): Tr(S.PREAMBLE),
        (S.PREAMBLE, "TOOL_NAME_START"): Tr(S.NAME, (Ev.CALL_START,)),
        (S.NAME, "TOOL_NAME_END"): Tr(S.PREAMBLE),
        (S.PREAMBLE, "TOOL_ARGS_START"): Tr(S.ARGS),
        (S.ARGS, "TOOL_ARGS_END"): Tr(S.BETWEEN),
        (S.BETWEEN, "TOOL_REQUEST_END"): Tr(S.PREAMBLE, (Ev.CALL_END,)),
        (S.PREAMBLE, "TOOL_REQUESTS_END"): Tr(S.CONTENT, (Ev.LEAVE,)),
        (S.REASONING, "EOT"): Tr(S.CONTENT, (Ev.REASONING_END,)),
        (S.CONTENT, "EOT"): Tr(S.CONTENT),
    }
    for state in (S.PREAMBLE, S.NAME, S.ARGS, S.BETWEEN):
        transitions[(state, "EOT")] = Tr(S.CONTENT, (Ev.LEAVE,))
    if thinking:
        terminals |= {"THINK_START": BEGIN_THINK, "THINK_END": END_THINK}
        transitions |= {
            (S.REASONING, "THINK_START"): Tr(S.REASONING),
            (S.CONTENT, "THINK_START"): Tr(S.REASONING, (Ev.REASONING_START,)),
            (S.REASONING, "THINK_END"): Tr(S.CONTENT, (Ev.REASONING_END,)),
            (S.CONTENT, "THINK_END"): Tr(S.CONTENT),
            (S.REASONING, "TOOL_REQUESTS_START"): Tr(S.PREAMBLE, (Ev.REASONING_END,)),
        }
    return EngineSpec(
        terminals=terminals,
        transitions=transitions,
        strip_content_ws_with_tools=False,
        drop_ws_only_content_before_tools=True,
        preserve_tokens=PLAMO_MARKER_TOKENS,
    )


# -- the unfinished-marker rule ------------------------------------------------------------


def _known(vocab: Vocab | Mapping[str, int] | None, token: str) -> bool:
    if vocab is None:
        return False
    if isinstance(vocab, Mapping):
        return token in vocab
    return vocab.token_to_id(token) is not None


def _pieces(vocab: Vocab | Mapping[str, int] | None, literal: str) -> tuple[str, ...]:
    """`literal` cut greedily into the longest vocabulary tokens (a character where none is)."""
    pieces: list[str] = []
    i = 0
    while i < len(literal):
        j = len(literal)
        while j > i + 1 and not _known(vocab, literal[i:j]):
            j -= 1
        pieces.append(literal[i:j])
        i = j
    return tuple(pieces)


def marker_cut_prefixes(
    vocab: Vocab | Mapping[str, int] | None, literals: Iterable[str]
) -> frozenset[str]:
    """Every proper prefix of a terminal that ends where two of its tokens meet."""
    out: set[str] = set()
    for literal in literals:
        prefix = ""
        for piece in _pieces(vocab, literal)[:-1]:
            prefix += piece
            out.add(prefix)
    return frozenset(out)


def unfinished_marker_at(text: str, cuts: frozenset[str]) -> int:
    """Where vLLM's `_strip_unfinished_marker` cuts `text` (len(text): nowhere)."""
    at = text.rfind(MARKER_LEAD)
    return at if at >= 0 and text[at:] in cuts else len(text)


# -- arguments -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plamo3ArgsState(JsonState):
    """json: the raw JSON writer. raw: written as the model wrote it from here on. ws:
    trailing whitespace held (vLLM strips). wrote: something was written. tail: the text
    after a complete value, held while it may be a dropped `<|plamo:` remainder."""

    json: JsonArgsState = JsonArgsState()
    raw: bool = False
    ws: str = ""
    wrote: bool = False
    tail: str = ""

    def held_chars(self) -> int:
        return self.json.held_chars() + len(self.ws) + len(self.tail)


def _droppable_tail(tail: str) -> bool:
    """The text after a value is (still) blank, or JSON blanks then one `<|plamo:` remainder."""
    if not tail.strip():
        return True
    rest = tail.lstrip(_JSON_WS)
    if rest.startswith(MARKER_LEAD):
        return MARKER_LEAD not in rest[len(MARKER_LEAD):]
    return MARKER_LEAD.startswith(rest)


class Plamo3Args:
    """vLLM's PLaMo3 arguments as a stream: `_handle_arg_chunk`'s strip, `raw.strip() or "{}"`,
    `_fix_arg_types` (module docstring)."""

    def __init__(self, properties: Mapping[str, Any], limit: int) -> None:
        self.json = JsonArgs(raw=True, schema=SchemaTable(properties), limit=limit)

    def start(self, name: str = "") -> Plamo3ArgsState:
        return Plamo3ArgsState(json=self.json.start(name))

    def feed(self, state: Plamo3ArgsState, text: str) -> tuple[Plamo3ArgsState, str, None]:
        if state.raw:
            return self._write(state, text)
        if state.json.status == DONE:
            return self._after(state, text)
        js, out, rest = self.json.feed(state.json, text)
        state = state.replace(json=js)
        if js.status == ERROR:  # not JSON: the raw text (vLLM returns it stripped)
            return self._write(state.replace(raw=True), out + self.json.held_raw(js) + (rest or ""))
        state, written, _ = self._write(state, out)
        if js.status == DONE:
            state, tail, _ = self._after(state, rest or "")
            written += tail
        return state, written, None

    def _after(self, state: Plamo3ArgsState, text: str) -> tuple[Plamo3ArgsState, str, None]:
        tail = state.tail + text
        if _droppable_tail(tail) and len(tail) <= MAX_HELD_CHARS:
            return state.replace(tail=tail), "", None
        return self._write(state.replace(raw=True, tail=""), tail)

    def _write(self, state: Plamo3ArgsState, text: str) -> tuple[Plamo3ArgsState, str, None]:
        body = state.ws + text
        if not state.wrote:
            body = body.lstrip()
        kept = body.rstrip()
        return state.replace(ws=body[len(kept):], wrote=state.wrote or bool(kept)), kept, None

    def end(self, state: Plamo3ArgsState) -> tuple[Plamo3ArgsState, str]:
        written = ""
        if state.json.status == DONE and not state.tail.lstrip(_JSON_WS).startswith(MARKER_LEAD):
            # Only a `<|plamo:` remainder is dropped; a prefix of one stays.
            state, written, _ = self._write(state.replace(raw=True, tail=""), state.tail)
        if state.raw or state.json.status == DONE:
            return state.replace(ws="", tail=""), written or ("" if state.wrote else "{}")
        js, out = self.json.end(state.json)
        if js.status != DONE:
            out += self.json.held_raw(js)
        state, written, _ = self._write(state.replace(json=js), out)
        return state.replace(ws=""), written or ("" if state.wrote else "{}")


# -- the parser ----------------------------------------------------------------------------


class Plamo3ToolParser(EngineToolParser):
    name: ClassVar[str] = "plamo3"
    spec = plamo3_spec(True)
    args_state: ClassVar[type[JsonState]] = Plamo3ArgsState

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """`chat_template_kwargs`: `enable_thinking` (default on) picks the config, as vLLM's
        Plamo3Parser does."""
        thinking = bool((chat_template_kwargs or {}).get("enable_thinking", True))
        self.spec = plamo3_spec(thinking)  # per instance: the request decides
        super().__init__(vocab, tools, **kwargs)
        self._cuts = marker_cut_prefixes(vocab, self.spec.literal_terminals())

    def arg_format(self, name: str) -> Plamo3Args:
        return Plamo3Args(self.tool_properties(name), self.call_limit)

    def accepts(self, name: str) -> bool:
        return bool(name)

    def finish(self, state: JsonState, request_id: str) -> tuple[ToolStreamState, list[Event]]:
        # The lexer's held tail is where an unfinished marker ends the output; arguments
        # have their own rule (Plamo3Args).
        if isinstance(state, ToolStreamState) and state.phase != S.ARGS:
            cut = unfinished_marker_at(state.held, self._cuts)
            state = state.replace(held=state.held[:cut])
        return super().finish(state, request_id)
