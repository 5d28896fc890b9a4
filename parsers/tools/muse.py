"""Muse Spark / Muse Glimmer ATEM tool calls (vLLM names `muse`, `musespark1x`, `muse_glimmer`).

    to=self<|message|>...reasoning...<|eom|>
    <|start|>assistant to=read.read<|message|><atem:function_calls>
    <atem:invoke name="read.read">
    <atem:parameter name="path">/etc/hostname</atem:parameter>
    </atem:invoke>
    </atem:function_calls><|eom|>
    <|start|>assistant to=user<|message|>...answer...<|eot|>

Spec: vLLM 0.33 `vllm/tool_parsers/muse_tool_parser.py` (`MuseToolParser`, also `musespark1x`)
and `muse_glimmer_tool_parser.py` (`MuseGlimmerToolParser`); their batch is the oracle.

The output is a sequence of messages. A header is `<|message|>`, optionally preceded by
`to=RCPT` (RCPT `[A-Za-z0-9_.-]+`, the maximal run before `<|message|>`), horizontal whitespace
and `<|start|> assistant`; a body runs to the first `<|eom|>` / `<|eot|>` / `<|start|>` / next
header (whose leading horizontal whitespace and `to=RCPT` are not body). Text before the first
header, after a boundary or after a `<|start|>` is dropped. Content is the bodies of the content
recipients (Spark: `user`, `commentary`; Glimmer: bare and `user`), or None; an output with no
`<|message|>` at all is content verbatim. Only its end says which, so the text before the first
header is held while short (PRE_HEADER_CHARS); longer, it streams as content and call scope. Reasoning
bodies are not returned (vLLM's batch has no reasoning here).

Calls: the bodies of the other recipients (not bare, not the non-tool ones), joined with "\\n",
or with no header at all the whole output. Each `<atem:invoke ...>` up to the first
`</atem:invoke>` is one call (one never closed is dropped); its name is the first
`name="..."` of an invoke tag, `X.X` read as `X` when `X` is a request tool; its arguments every
`<atem:parameter name="K">V</atem:parameter>`: V raw when the tool's schema types K `string`
(Spark only), else `json.loads(V)` or the raw string, `json.dumps`ed as one object.
Streaming: content streams (only a possible header or marker tail is held); a call starts at
its invoke tag's `name="..."`, a string value streams as JSON-escaped fragments (a possible
closing tag held), any other value goes through `JsonValue` (`_json_value.py`: a short one is
held and decoded at its `</atem:parameter>`, a longer one streams as its canonical JSON, or as a
string once it cannot be JSON); an invoke tag without a name is held to its `</atem:invoke>`.

Divergences from vLLM's batch (stream == our batch instead; tests `test_tool_muse.py`), each
because the call had streamed: an invoke never closed (the output cut) is kept with what it
had, where vLLM drops it; a string value its invoke's end cuts is kept, and so is a longer
value that had streamed; a repeated parameter is written twice (`json.loads` gives vLLM's
object); a value over `HOLD_CHARS` that stops being JSON after them (or repeats a key) keeps
the canonical text it streamed, then its raw text (vLLM: the whole value as a string); text
before the first header past PRE_HEADER_CHARS stays content, and its calls calls, when a
header comes (vLLM drops both).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import regex

from parsers._base import MAX_HELD_CHARS, ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import LimitExceededError, StateError
from parsers._events import Event, ToolCallStart, push_args, push_content
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import MAX_TOOL_CALL_CHARS, assemble, json_dumps
from parsers.tools._json_value import JsonValue, JsonValueState

__all__ = ["MuseToolParser", "MuseGlimmerToolParser", "MuseToolState", "PRE_HEADER_CHARS"]

_MESSAGE = "<|message|>"
_MARKER = regex.compile(r"<\|message\|>|<\|eom\|>|<\|eot\|>|<\|start\|>")
_RCPT = regex.compile(r"to=([A-Za-z0-9_.\-]+)\Z")
# Where a header that ends at the end of a body's text starts (its whitespace and recipient).
_HEADER_TAIL = regex.compile(r"[^\S\n]*(?:to=[A-Za-z0-9_.\-]+)?\Z")
# A body tail that may still grow into a header start or a marker.
_OPEN_TAIL = regex.compile(r"[^\S\n]*(?:to=[A-Za-z0-9_.\-]*|to|t)?(?:<(?:\|[a-z]*\|?)?)?\Z")
_INVOKE_OPEN = "<atem:invoke"
_INVOKE_CLOSE = "</atem:invoke>"
_PARAM_OPEN = "<atem:parameter"
_PARAM_CLOSE = "</atem:parameter>"
_PARAM_HEAD = regex.compile(r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>')
_WORD = regex.compile(r"\w")
_NAME = regex.compile(r'<atem:invoke\b[^>]*?\bname="([^"]+)"')
_PARAM = regex.compile(
    r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>',
    regex.DOTALL,
)
# Recipient kinds.
_CONTENT, _TOOL, _DROP = "content", "tool", "drop"
# Phases: before the first header (held; streaming as content and call scope once longer than
# PRE_HEADER_CHARS: lead), in a body, between messages (skipping to the next header).
_PRE, _LEAD, _BODY, _SKIP = "pre", "lead", "body", "skip"
# Text before the first header held whole (decided as vLLM does) up to this many characters.
PRE_HEADER_CHARS = 256
# ATEM scanner modes: outside a call, in an invoke's opening tag, an invoke whose tag names
# nothing (held to its end), in a call's body, in a string value, in a held value.
_OUT, _TAG, _WHOLE, _STRING, _HELD = "", "tag", "whole", "string", "held"
# The text kept to read a recipient while skipping (names are short).
_RCPT_WINDOW = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class MuseToolState(JsonState):
    VERSION = 3

    parser: str
    phase: str = _PRE
    kind: str = _DROP  # the current body's recipient kind (phase body)
    held: str = ""  # pre: the output so far (bounded); body, lead: an open tail; skip: a recipient window
    atem: str = ""  # tool-channel text not yet decided (an open invoke or a prefix of one)
    tool_bodies: int = 0  # tool bodies seen (the next one is joined with "\n")
    n_calls: int = 0
    mode: str = _OUT  # the ATEM scanner's
    name: str = ""  # the call being read
    key: str = ""  # the open value's parameter
    members: int = 0  # members written in the call being read
    value: JsonValueState | None = None  # a non-string value's writer (mode held)

    def __post_init__(self) -> None:
        if self.phase not in (_PRE, _LEAD, _BODY, _SKIP) or self.kind not in (_CONTENT, _TOOL, _DROP) \
                or self.mode not in (_OUT, _TAG, _WHOLE, _BODY, _STRING, _HELD):
            raise ValueError("unknown phase or kind")
        if self.n_calls < 0 or self.tool_bodies < 0:
            raise ValueError("negative count")
        if (self.value is None) == (self.mode == _HELD):
            raise ValueError("a value writer outside a value")


class MuseToolParser(ToolParser):
    name: ClassVar[str] = "muse"
    preserve_string_parameters: ClassVar[bool] = True
    content_recipients: ClassVar[tuple[str | None, ...]] = ("user", "commentary")
    non_tool_recipients: ClassVar[tuple[str, ...]] = ("self", "user", "commentary", "developer")
    # DelegatingParser keeps the raw output when no call is made; ours keeps the channel
    # content, as vLLM's stream sends it (parsers/chat.py reads this).
    content_without_calls_is_parsed: ClassVar[bool] = True

    def __init__(
        self, vocab: Any, tools: Any = None, *, max_call_chars: int | None = None
    ) -> None:
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self._registered: frozenset[str] = frozenset(n for n, _ in self._functions())
        self._strings: dict[str, frozenset[str]] = {
            name: frozenset(
                key for key, schema in (params.get("properties") or {}).items()
                if isinstance(schema, Mapping) and schema.get("type") == "string"
            )
            for name, params in self._functions()
            if self.preserve_string_parameters and isinstance(params, Mapping)
        }

    def _functions(self) -> list[tuple[str, Any]]:
        out = []
        for tool in self.tools:
            function = tool.get("function") or tool
            if isinstance(function, Mapping) and function.get("name"):
                out.append((str(function["name"]), function.get("parameters")))
        return out

    @property
    def call_limit(self) -> int:
        return min(self.max_call_chars or MAX_TOOL_CALL_CHARS, MAX_TOOL_CALL_CHARS)

    @functools.cached_property
    def values(self) -> JsonValue:
        """The writer of non-string values (`json.loads(raw)`, else raw, streamed)."""
        return JsonValue(self.call_limit)

    # -- ToolParser -------------------------------------------------------------------

    def initial_state(self) -> MuseToolState:
        return MuseToolState(parser=self.name)

    @classmethod
    def state_type(cls) -> type[MuseToolState]:
        return MuseToolState

    def feed(self, state: JsonState, text: str, request_id: str) -> tuple[MuseToolState, list[Event]]:
        return self._run(self._check(state), text, request_id, final=False)

    def finish(self, state: JsonState, request_id: str) -> tuple[MuseToolState, list[Event]]:
        return self._run(self._check(state), "", request_id, final=True)

    def parse(self, text: str, request_id: str) -> ToolParseResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return assemble(events + tail)

    def _check(self, state: object) -> MuseToolState:
        if not isinstance(state, MuseToolState) or state.parser != self.name:
            raise StateError(f"{self.name}: not a state of this parser")
        if state.phase != _PRE and len(state.held) > MAX_HELD_CHARS:
            raise StateError(f"{self.name}: held text over its bound")
        if len(state.held) + len(state.atem) > self.call_limit:
            raise StateError(f"{self.name}: state over the tool-call limit")
        return state

    # -- messages ---------------------------------------------------------------------

    def _kind(self, rcpt: str | None) -> str:
        if rcpt in self.content_recipients:
            return _CONTENT
        if rcpt is not None and rcpt not in self.non_tool_recipients:
            return _TOOL
        return _DROP

    def _run(
        self, state: MuseToolState, text: str, request_id: str, *, final: bool
    ) -> tuple[MuseToolState, list[Event]]:
        run = _Run(self, state, request_id)
        buf = state.held + text
        if run.phase in (_PRE, _LEAD):
            buf = self._lead(run, buf, final)
        while run.phase not in (_PRE, _LEAD):
            marker = _MARKER.search(buf)
            if run.phase == _BODY:
                if marker is None:
                    keep = 0 if final else len(buf) - _tail_start(_OPEN_TAIL, buf)
                    run.body(buf[: len(buf) - keep])
                    buf = buf[len(buf) - keep :]
                    break
                before = buf[: marker.start()]
                if marker.group() == _MESSAGE:
                    run.body(before[: _tail_start(_HEADER_TAIL, before)])
                    run.open(self._kind(_recipient(before)))
                else:  # a boundary, or a <|start|> that cuts the body
                    run.body(before)
                    run.phase = _SKIP
                buf = buf[marker.end() :]
                continue
            if marker is None:
                if run.phase == _SKIP:
                    buf = buf[-_RCPT_WINDOW:]
                break
            if marker.group() == _MESSAGE:
                run.open(self._kind(_recipient(buf[: marker.start()])))
            buf = buf[marker.end() :]
        if final:
            run.end(buf)
            buf = ""
        run.held = buf
        new = MuseToolState(self.name, run.phase, run.kind, run.held, run.atem, run.tool_bodies,
                            run.n_calls, run.mode, run.name, run.key, run.members, run.value)  # fmt: skip
        if len(new.held) + len(new.atem) > self.call_limit:
            raise LimitExceededError(
                f"{self.name}: held text exceeds the limit of {self.call_limit} characters "
                "(--max-tool-call-chars)"
            )
        if new.phase == _BODY and len(new.held) > MAX_HELD_CHARS:
            raise LimitExceededError(f"{self.name}: a held marker tail over {MAX_HELD_CHARS} characters")
        return new, run.events

    def _lead(self, run: _Run, buf: str, final: bool) -> str:
        """Before the first header: the text to go on with (after the header), or the text
        held. vLLM drops that text once a header comes, and makes it the content and the
        calls' scope if none does; so it is held while short, and past PRE_HEADER_CHARS it
        streams as both (kept when a header comes: a named divergence)."""
        found = buf.find(_MESSAGE)
        end = len(buf) if final else _tail_start(_OPEN_TAIL, buf)
        if found >= 0:
            end = _tail_start(_HEADER_TAIL, buf[:found])
        if end > PRE_HEADER_CHARS:
            run.phase = _LEAD
        if found < 0 and final and run.phase == _PRE:
            return buf  # no header at all: `end` makes it content and scope
        if run.phase == _LEAD:
            run.lead(buf[:end])
            buf = buf[end:]
        if found < 0:
            return buf
        if run.phase == _LEAD:
            run.atem = run.invokes(run.atem, final=True)
        run.open(self._kind(_recipient(buf[: buf.find(_MESSAGE)])))
        return buf[buf.find(_MESSAGE) + len(_MESSAGE) :]

    # -- calls ------------------------------------------------------------------------

    def normalize(self, name: str) -> str:
        if not self._registered or name in self._registered:
            return name
        head, dot, tail = name.partition(".")
        return head if dot and head == tail and head in self._registered else name

    def string_parameters(self, name: str) -> frozenset[str]:
        return self._strings.get(name, frozenset())

    def call_of(self, invoke: str) -> tuple[str, str] | None:
        found = _NAME.search(invoke)
        if found is None:
            return None
        name = self.normalize(found.group(1))
        strings = self._strings.get(name, frozenset())
        args: dict[str, Any] = {}
        for param in _PARAM.finditer(invoke):
            key, raw = param.group("key"), param.group("value")
            args[key] = raw if key in strings else _decode(raw)
        return name, json_dumps(args)


class MuseGlimmerToolParser(MuseToolParser):
    name: ClassVar[str] = "muse_glimmer"
    preserve_string_parameters: ClassVar[bool] = False
    content_recipients: ClassVar[tuple[str | None, ...]] = (None, "user")
    non_tool_recipients: ClassVar[tuple[str, ...]] = ("self", "user")


def _tail_start(pattern: regex.Pattern[str], text: str) -> int:
    """Start of the tail `pattern` (all optional, anchored at the end) matches."""
    found = pattern.search(text)
    return found.start() if found else len(text)


def _recipient(before: str) -> str | None:
    found = _RCPT.search(before)
    return found.group(1) if found else None


def _decode(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class _Run:
    """Scratch copy of a state for one feed/finish, plus the events it emits."""

    def __init__(self, parser: MuseToolParser, state: MuseToolState, request_id: str) -> None:
        self.parser = parser
        self.request_id = request_id
        self.phase, self.kind = state.phase, state.kind
        self.atem, self.tool_bodies, self.n_calls = state.atem, state.tool_bodies, state.n_calls
        self.mode, self.name, self.key, self.members = state.mode, state.name, state.key, state.members
        self.value = state.value
        self.held = ""
        self.events: list[Event] = []

    def lead(self, text: str) -> None:
        """Text before any header, past PRE_HEADER_CHARS: content and calls' scope."""
        if text:
            self.content(text)
            self.atem = self.invokes(self.atem + text, final=False)

    def open(self, kind: str) -> None:
        """A header: the output is framed; its text before the header is dropped."""
        self.phase, self.kind = _BODY, kind
        if kind == _TOOL:
            if self.tool_bodies:
                self.atem += "\n"
            self.tool_bodies += 1

    def body(self, text: str) -> None:
        if not text:
            return
        if self.kind == _CONTENT:
            self.content(text)
        elif self.kind == _TOOL:
            self.atem = self.invokes(self.atem + text, final=False)

    def content(self, text: str) -> None:
        push_content(self.events, text)

    def end(self, rest: str) -> None:
        if self.phase == _PRE:  # no header at all: the whole output is content and scope
            self.content(rest)
            self.invokes(rest, final=True)
            return
        if self.phase == _BODY:
            self.body(rest)
        self.atem = self.invokes(self.atem, final=True)

    def invokes(self, text: str, *, final: bool) -> str:
        """Run the ATEM scanner over `text` (the held tool-channel text plus new text): calls
        start at their name, string values stream, other values are sent at their end.
        Returns the text still undecided."""
        while True:
            mode = self.mode
            if mode == _OUT:
                start = _find_word(text, _INVOKE_OPEN, final)
                if start is None:
                    return "" if final else _partial_tail(text, _INVOKE_OPEN)
                if start < 0:  # `<atem:invoke` at the end: its next character decides
                    return text[start + 1 :]
                text, self.mode = text[start:], _TAG
                continue
            if mode == _TAG:
                named = _NAME.match(text, partial=not final)
                if named is None:  # no name in this tag: decided at the invoke's end
                    self.mode = _WHOLE
                    continue
                if named.partial:
                    return text
                self.start_call(self.parser.normalize(named.group(1)))
                text, self.mode = text[named.end() :], _BODY
                continue
            if mode == _WHOLE:
                close = text.find(_INVOKE_CLOSE)
                if close < 0:
                    if final:
                        self.mode = _OUT
                        return ""
                    return text
                end = close + len(_INVOKE_CLOSE)
                call = self.parser.call_of(text[:end])
                if call is not None:
                    self.start_call(call[0])
                    self.args(call[1][1:-1])
                    self.end_call()
                text, self.mode = text[end:], _OUT
                continue
            if mode == _BODY:
                close = text.find(_INVOKE_CLOSE)
                param = _find_word(text[: close if close >= 0 else len(text)], _PARAM_OPEN, final or close >= 0)
                if param is not None and param >= 0:
                    head = _PARAM_HEAD.match(text, param, partial=not final)
                    if head is None:
                        text = text[param + 1 :]  # not a parameter tag
                        continue
                    if not head.partial:
                        self.open_value(head.group("key"))
                        text = text[head.end() :]
                        continue
                    if close < 0:
                        return text[param:]
                    text = text[param + 1 :]  # a tag the invoke's end cuts
                if close >= 0:
                    self.end_call()
                    text, self.mode = text[close + len(_INVOKE_CLOSE) :], _OUT
                    continue
                if final:
                    self.end_call()
                    self.mode = _OUT
                    return ""
                if param is not None:  # `<atem:parameter` at the end
                    return text[param + 1 :]
                return _partial_tail(text, _INVOKE_CLOSE, _PARAM_OPEN)
            # A value: it ends at `</atem:parameter>`; an invoke end first cuts it.
            stop = text.find(_PARAM_CLOSE)
            close = text.find(_INVOKE_CLOSE)
            if close >= 0 and (stop < 0 or close < stop):
                self.cut_value(text[:close])
                self.mode = _BODY
                continue
            if stop >= 0:
                self.value_text(text[:stop])
                self.close_value()
                text, self.mode = text[stop + len(_PARAM_CLOSE) :], _BODY
                continue
            if final:
                self.cut_value(text)
                self.end_call()
                self.mode = _OUT
                return ""
            keep = len(_partial_tail(text, _PARAM_CLOSE, _INVOKE_CLOSE))
            self.value_text(text[: len(text) - keep])
            return text[len(text) - keep :]

    def start_call(self, name: str) -> None:
        index = self.n_calls
        self.events.append(ToolCallStart(index, make_tool_call_id(self.request_id, index), name))
        self.n_calls += 1
        self.members = 0
        self.name = name
        self.args("{")

    def end_call(self) -> None:
        self.args("}")

    def open_value(self, key: str) -> None:
        strings = self.parser.string_parameters(self.name)
        self.mode = _STRING if key in strings else _HELD
        self.key = key
        if self.mode == _STRING:
            self.args(self.separator() + json_dumps(key) + ': "')
        else:  # its member is written once the value is no longer held whole
            self.value = self.parser.values.start()

    def value_text(self, text: str) -> None:
        if self.mode == _STRING:
            self.args(json_string_body(text))
            return
        value = self.value or self.parser.values.start()
        self.value, out = self.parser.values.feed(value, text)
        if value.holding and not self.value.holding:
            self.args(self.separator() + json_dumps(self.key) + ": ")
        self.args(out)

    def close_value(self) -> None:
        if self.mode == _STRING:
            self.args('"')
        else:
            value = self.value or self.parser.values.start()
            if value.holding:
                self.args(self.separator() + json_dumps(self.key) + ": ")
            self.args(self.parser.values.end(value)[1])
        self.key, self.value = "", None

    def cut_value(self, text: str) -> None:
        """The invoke's end (or the output's) cuts the value: one that had streamed is kept
        as far as it came, one still held is dropped (vLLM reads no parameter there)."""
        self.value_text(text)
        if self.mode == _STRING or not (self.value is None or self.value.holding):
            self.close_value()
        self.key, self.value = "", None

    def separator(self) -> str:
        self.members += 1
        return ", " if self.members > 1 else ""

    def args(self, text: str) -> None:
        push_args(self.events, self.n_calls - 1, text)


def _find_word(text: str, marker: str, final: bool) -> int | None:
    """Index of the first `marker` followed by a non-word character (or the end when `final`);
    -(len(tail)+1) when one sits at the end undecided; None when there is none."""
    pos = 0
    while True:
        found = text.find(marker, pos)
        if found < 0:
            return None
        after = text[found + len(marker) : found + len(marker) + 1]
        if not after:
            return found if final else -(len(text) - found) - 1
        if not _WORD.match(after):
            return found
        pos = found + 1


def _partial_tail(text: str, *markers: str) -> str:
    """The longest tail of `text` that is a proper prefix of one of `markers`."""
    for k in range(min(len(text), max(len(m) for m in markers) - 1), 0, -1):
        if any(m.startswith(text[-k:]) for m in markers):
            return text[-k:]
    return ""
