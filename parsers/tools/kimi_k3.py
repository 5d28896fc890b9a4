"""Kimi K3 XTML tool calls (vLLM 0.33 `kimi_k3`: `KimiK3ToolParser`, composed by
`vllm/parser/kimi_k3.py`).

    <|open|>response<|sep|>Checking.<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Tokyo<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>

`<|open|>`, `<|close|>`, `<|sep|>` are special tokens; a *tag* is `<|open|>` or `<|close|>`,
a head, then `<|sep|>` (vLLM's regexes allow whitespace around a channel name: `\\s*` of the
`regex` module). `XtmlLexer` turns text into plain text and tags, holding only a partial
`<|open|>` / `<|close|>` or an unfinished head (bounded by MAX_HELD_CHARS, then text). A
tag whose head is no known name is text. The reasoning family shares the lexer and the
content rules (`ContentRules`).

Content (vLLM's `_content` / `_strip_response_content`, on the text before the first
`<|open|>tools<|sep|>`): after `<|open|>response<|sep|>` the channel body up to
`<|close|>response<|sep|>` (text after it is dropped); without it, the text with every
`<|close|>response<|sep|>` and `<|close|>message<|sep|>` removed; empty -> None.

Calls (`_call_re` / `_arg_re` over the tools section, which ends at the first
`<|close|>tools<|sep|>`): `<|open|>call ATTRS<|sep|>` up to `<|close|>call<|sep|>`; its name is
the `tool="..."` attribute (`&quot;` / `&amp;` unescaped); a call without one is dropped.
Each `<|open|>argument ATTRS<|sep|>VALUE<|close|>argument<|sep|>` in the body is member `key`:
`type="string"` (the default) is VALUE raw, any other type is `json.loads(VALUE)`, else VALUE
as a string; the arguments are `json.dumps(members, ensure_ascii=False)`. No schema coercion,
any name is accepted.

Streaming: content streams (a whitespace-only start is held until a response channel or other
text decides); a call is announced at its header; a string value streams escaped as it
arrives (holding only a partial close marker); other values go through `JsonValue`
(`_json_value.py`): a short one is held and decoded at its close marker, a longer one streams
as its canonical JSON, or as a string once it cannot be JSON.

Divergences (stream == our batch; `DIVERGENCES` in tests/parsers/tools/test_tool_kimi_k3.py),
each because text had streamed before vLLM's regex could decide: a call or argument whose
close marker never comes (the output, the call or the tools channel ends first) is kept,
where vLLM drops it; a repeated argument key is written twice (vLLM keeps one, JSON-equal);
content before a late `<|open|>response<|sep|>` stays (vLLM drops it); a response channel
that starts or ends only after the tools channel is not the content; a
`<|close|>message<|sep|>` inside a closed response channel is dropped (vLLM keeps it); a literal
`<|open|>` inside a call's attributes restarts the tag; a non-string value over
`HOLD_CHARS` that stops being JSON after them (or a repeated key in it) keeps the canonical text
it streamed, then its raw text (vLLM: the whole value as a string).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import regex

from parsers._base import MAX_HELD_CHARS, ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import StateError
from parsers._events import Event, ToolCallStart, push_args, push_content
from parsers._state import JsonState
from parsers.tools._base import MAX_TOOL_CALL_CHARS, assemble, json_dumps
from parsers.tools._json_value import JsonValue, JsonValueState

__all__ = [
    "OPEN", "CLOSE", "SEP", "Tag", "XtmlLexer", "tag_name", "ContentRules", "ContentState",
    "KimiK3ToolParser", "KimiK3ToolState",
]  # fmt: skip

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"
_STARTERS = (OPEN, CLOSE)


@dataclass(frozen=True, slots=True)
class Tag:
    starter: str
    head: str

    @property
    def literal(self) -> str:
        return self.starter + self.head + SEP


Item = str | Tag


class XtmlLexer:
    """Text -> plain text and tags. `pending` is the held raw text (see module docstring)."""

    @staticmethod
    def feed(pending: str, text: str, final: bool = False) -> tuple[str, list[Item]]:
        buf = pending + text
        items: list[Item] = []
        start = 0  # the first character not yet given out
        pos = 0
        while True:
            j = _next_starter(buf, pos)
            if j < 0:
                break
            body = j + len(OPEN if buf.startswith(OPEN, j) else CLOSE)
            sep = buf.find(SEP, body)
            again = _next_starter(buf, body)
            if again >= 0 and (sep < 0 or again < sep):
                pos = again  # another tag starts first: this one is text
                continue
            if sep < 0:
                if final or len(buf) - j > MAX_HELD_CHARS:
                    break  # never closed (or overlong): text
                _text(items, buf[start:j])
                return buf[j:], items
            _text(items, buf[start:j])
            items.append(Tag(buf[j:body], buf[body:sep]))
            start = pos = sep + len(SEP)
        tail = buf[start:]
        keep = 0 if final else _partial_starter(tail)
        _text(items, tail[: len(tail) - keep])
        return tail[len(tail) - keep :], items


def _next_starter(buf: str, pos: int) -> int:
    found = [i for i in (buf.find(OPEN, pos), buf.find(CLOSE, pos)) if i >= 0]
    return min(found) if found else -1


def _partial_starter(tail: str) -> int:
    for n in range(min(len(tail), len(CLOSE) - 1), 0, -1):
        if any(s.startswith(tail[-n:]) for s in _STARTERS):
            return n
    return 0


def _text(items: list[Item], text: str) -> None:
    if text:
        items.append(text)


# `regex` module semantics, as vLLM's patterns: `\s` is Unicode White_Space.
_NAMED = regex.compile(r"\s*(think|response|tools|message|call|argument)\s*")
_WITH_ATTRS = regex.compile(r"\s*(call|argument)\s+(.*)", regex.DOTALL)
_ATTR = regex.compile(r'(?P<k>\w+)="(?P<v>[^"]*)"')


def tag_name(tag: Tag) -> tuple[str, str]:
    """("open"|"close", name) of a known tag, ("", "") otherwise; the attributes of an
    `<|open|>call` / `<|open|>argument` tag are `attrs(tag)`."""
    kind = "open" if tag.starter == OPEN else "close"
    if kind == "open":
        found = _WITH_ATTRS.fullmatch(tag.head)
        if found is not None:
            return kind, found.group(1)
    found = _NAMED.fullmatch(tag.head)
    if found is None or (kind == "open" and found.group(1) in ("call", "argument", "message")):
        return "", ""
    return kind, found.group(1)


def attrs(tag: Tag) -> dict[str, str]:
    """vLLM's `_attrs`: every `key="value"` (the last wins), `&quot;` then `&amp;` unescaped."""
    found = _WITH_ATTRS.fullmatch(tag.head)
    text = found.group(2) if found else ""
    return {m["k"]: m["v"].replace("&quot;", '"').replace("&amp;", "&") for m in _ATTR.finditer(text)}


# -- content -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContentState(JsonState):
    """phase: "pre" (no response channel yet), "resp" (in it), "after" (it closed), "tools"
    (the tools channel: the caller's). ws: held whitespace at the start. wrote: non-whitespace
    content written."""

    phase: str = "pre"
    ws: str = ""
    wrote: bool = False

    def __post_init__(self) -> None:
        if self.phase not in ("pre", "resp", "after", "tools") or len(self.ws) > MAX_HELD_CHARS:
            raise ValueError("bad content state")


class ContentRules:
    """The response-channel unwrapping both K3 parsers apply (module docstring). `tools`: the
    tool parser's variant (`<|open|>tools<|sep|>` starts the tools channel); without it the
    reasoning parser's `_strip_content_wrapper`, where tools markup is text."""

    def __init__(self, tools: bool) -> None:
        self.tools = tools

    def item(self, state: ContentState, item: Item, out: list[str]) -> ContentState:
        phase = state.phase
        if isinstance(item, Tag):
            kind, name = tag_name(item)
            if self.tools and (kind, name) == ("open", "tools"):
                out.append(state.ws)
                return state.replace(phase="tools", ws="")
            if (kind, name) == ("open", "response") and phase == "pre":
                return state.replace(phase="resp", ws="")  # the text before it is dropped
            if kind == "close" and name == "message" and phase != "after":
                return state
            if (kind, name) == ("close", "response") and phase != "after":
                return state.replace(phase="after" if phase == "resp" else phase)
            text = item.literal
        else:
            text = item
        if phase == "after":
            return state
        if phase == "pre" and not state.wrote:
            if not text.strip():
                ws = state.ws + text
                if len(ws) <= MAX_HELD_CHARS:
                    return state.replace(ws=ws)
                text = ws
            else:
                text = state.ws + text
            state = state.replace(ws="", wrote=bool(text.strip()))
        out.append(text)
        return state

    def finish(self, state: ContentState, out: list[str]) -> ContentState:
        out.append(state.ws)
        return state.replace(ws="")


# -- the tool parser ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KimiK3ToolState(JsonState):
    """lex: the lexer's held text. content: the content rules' state (phase "tools" once the
    tools channel opened). where: in the tools channel: "section", "call" (a call's body),
    "skip" (a call without a name), "string" / "json" (an argument value), "done" (after the
    channel). calls: calls announced. members: members written in the open call. value: a
    non-string value's writer (where "json")."""

    VERSION: ClassVar[int] = 2

    lex: str = ""
    content: ContentState = ContentState()
    where: str = "section"
    calls: int = 0
    members: int = 0
    value: JsonValueState | None = None

    def __post_init__(self) -> None:
        if self.where not in _WHERE or self.calls < 0 or self.members < 0:
            raise ValueError("bad tool state")
        if (self.where in ("call", "string", "json") and not self.calls) or (
                (self.value is None) == (self.where == "json")):
            raise ValueError("a value or call without its call")
        if len(self.lex) > 2 * MAX_HELD_CHARS or (self.value and self.value.held_chars() > MAX_TOOL_CALL_CHARS):
            raise ValueError("held text over its limit")


_WHERE = frozenset({"section", "call", "skip", "string", "json", "done"})
_CONTENT = ContentRules(tools=True)


class KimiK3ToolParser(ToolParser):
    name: ClassVar[str] = "kimi_k3"
    # vLLM's KimiK3Parser: the tool stage runs for every tool_choice and its content is the
    # answer (parsers/chat.py).
    own_composition: ClassVar[bool] = True

    @property
    def call_limit(self) -> int:
        return min(self.max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)

    @functools.cached_property
    def _value(self) -> JsonValue:
        return JsonValue(self.call_limit)

    def initial_state(self) -> KimiK3ToolState:
        return KimiK3ToolState()

    @classmethod
    def state_type(cls) -> type[KimiK3ToolState]:
        return KimiK3ToolState

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[KimiK3ToolState, list[Event]]:
        return self._run(self._check(state), text, request_id, final=False)

    def finish(self, state: JsonState, request_id: str) -> tuple[KimiK3ToolState, list[Event]]:
        return self._run(self._check(state), "", request_id, final=True)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return assemble(events + tail)

    def _check(self, state: JsonState) -> KimiK3ToolState:
        if not isinstance(state, KimiK3ToolState):
            raise StateError(f"{self.name}: expected KimiK3ToolState, got {type(state).__name__}")
        return state

    def _run(
        self, state: KimiK3ToolState, text: str, request_id: str, *, final: bool
    ) -> tuple[KimiK3ToolState, list[Event]]:
        lex, items = XtmlLexer.feed(state.lex, text, final)
        state = state.replace(lex=lex)
        out: list[Event] = []
        for item in items:
            state = self._item(state, item, request_id, out)
        if final:
            state = self._end(state, out)
        return state, out

    def _item(self, state: KimiK3ToolState, item: Item, request_id: str, out: list[Event]) -> KimiK3ToolState:
        if state.content.phase != "tools":
            texts: list[str] = []
            state = state.replace(content=_CONTENT.item(state.content, item, texts))
            push_content(out, "".join(texts))
            return state
        where = state.where
        kind, name = tag_name(item) if isinstance(item, Tag) else ("", "")
        if where == "done":
            return state
        if (kind, name) == ("close", "tools"):
            return self._close_call(state, out).replace(where="done")
        if where in ("string", "json"):
            if (kind, name) == ("close", "argument"):
                return self._close_value(state, out)
            if (kind, name) == ("close", "call"):
                return self._close_call(state, out)
            return self._value_text(state, item.literal if isinstance(item, Tag) else item, out)
        if where in ("call", "skip"):
            if (kind, name) == ("close", "call"):
                return self._close_call(state, out)
            if where == "call" and (kind, name) == ("open", "argument") and isinstance(item, Tag):
                return self._open_value(state, item, out)
            return state
        if (kind, name) == ("open", "call") and isinstance(item, Tag):
            tool = attrs(item).get("tool", "")
            if not tool:
                return state.replace(where="skip")
            index = state.calls
            out.append(ToolCallStart(index, make_tool_call_id(request_id, index), tool))
            push_args(out, index, "{")
            return state.replace(where="call", calls=index + 1, members=0)
        return state

    def _open_value(self, state: KimiK3ToolState, tag: Tag, out: list[Event]) -> KimiK3ToolState:
        found = attrs(tag)
        head = (", " if state.members else "") + json_dumps(found.get("key", "")) + ": "
        if found.get("type", "string") == "string":
            push_args(out, state.calls - 1, head + '"')
            return state.replace(where="string", members=state.members + 1)
        push_args(out, state.calls - 1, head)
        return state.replace(where="json", members=state.members + 1, value=self._value.start())

    def _value_text(self, state: KimiK3ToolState, text: str, out: list[Event]) -> KimiK3ToolState:
        if state.where == "string":
            push_args(out, state.calls - 1, json_dumps(text)[1:-1])
            return state
        value, written = self._value.feed(state.value or self._value.start(), text)
        push_args(out, state.calls - 1, written)
        return state.replace(value=value)

    def _close_value(self, state: KimiK3ToolState, out: list[Event]) -> KimiK3ToolState:
        if state.where == "string":
            push_args(out, state.calls - 1, '"')
        else:
            _, written = self._value.end(state.value or self._value.start())
            push_args(out, state.calls - 1, written)
        return state.replace(where="call", value=None)

    def _close_call(self, state: KimiK3ToolState, out: list[Event]) -> KimiK3ToolState:
        if state.where in ("string", "json"):
            state = self._close_value(state, out)
        if state.where == "call":
            push_args(out, state.calls - 1, "}")
        return state.replace(where="section", members=0)

    def _end(self, state: KimiK3ToolState, out: list[Event]) -> KimiK3ToolState:
        if state.content.phase != "tools":
            texts: list[str] = []
            state = state.replace(content=_CONTENT.finish(state.content, texts))
            push_content(out, "".join(texts))
            return state
        return self._close_call(state, out)

