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
`<|message|>` at all is content verbatim (held to its end: only its end says so). Reasoning
bodies are not returned (vLLM's batch has no reasoning here).

Calls: the bodies of the other recipients (not bare, not the non-tool ones), joined with "\\n",
or with no header at all the whole output. Each `<atem:invoke ...>` up to the first
`</atem:invoke>` is one call (one never closed is dropped); its name is the first
`name="..."` of an invoke tag, `X.X` read as `X` when `X` is a request tool; its arguments every
`<atem:parameter name="K">V</atem:parameter>`: V raw when the tool's schema types K `string`
(Spark only), else `json.loads(V)` or the raw string, `json.dumps`ed as one object.
Streaming: content streams (only a possible header or marker tail is held); a call is held
from `<atem:invoke` to its `</atem:invoke>` and then sent whole (bounded by the tool-call
limit), which makes the stream equal vLLM's batch on every output.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import regex

from parsers._base import MAX_HELD_CHARS, ToolParser, ToolParseResult, make_tool_call_id
from parsers._errors import LimitExceededError, StateError
from parsers._events import ContentDelta, Event, ToolArgsDelta, ToolCallStart
from parsers._state import JsonState
from parsers.tools._base import MAX_TOOL_CALL_CHARS, assemble, json_dumps

__all__ = ["MuseToolParser", "MuseGlimmerToolParser", "MuseToolState"]

_MESSAGE = "<|message|>"
_MARKER = regex.compile(r"<\|message\|>|<\|eom\|>|<\|eot\|>|<\|start\|>")
_RCPT = regex.compile(r"to=([A-Za-z0-9_.\-]+)\Z")
# Where a header that ends at the end of a body's text starts (its whitespace and recipient).
_HEADER_TAIL = regex.compile(r"[^\S\n]*(?:to=[A-Za-z0-9_.\-]+)?\Z")
# A body tail that may still grow into a header start or a marker.
_OPEN_TAIL = regex.compile(r"[^\S\n]*(?:to=[A-Za-z0-9_.\-]*|to|t)?(?:<(?:\|[a-z]*\|?)?)?\Z")
_INVOKE_OPEN = "<atem:invoke"
_INVOKE_CLOSE = "</atem:invoke>"
_WORD = regex.compile(r"\w")
_NAME = regex.compile(r'<atem:invoke\b[^>]*?\bname="([^"]+)"')
_PARAM = regex.compile(
    r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>',
    regex.DOTALL,
)
# Recipient kinds.
_CONTENT, _TOOL, _DROP = "content", "tool", "drop"
# Phases: before the first header, in a body, between messages (skipping to the next header).
_PRE, _BODY, _SKIP = "pre", "body", "skip"
# The text kept to read a recipient while skipping (names are short).
_RCPT_WINDOW = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class MuseToolState(JsonState):
    VERSION = 1

    parser: str
    phase: str = _PRE
    kind: str = _DROP  # the current body's recipient kind (phase body)
    held: str = ""  # pre: the whole output so far; body: an open tail; skip: a recipient window
    atem: str = ""  # tool-channel text not yet decided (an open invoke or a prefix of one)
    tool_bodies: int = 0  # tool bodies seen (the next one is joined with "\n")
    n_calls: int = 0

    def __post_init__(self) -> None:
        if self.phase not in (_PRE, _BODY, _SKIP) or self.kind not in (_CONTENT, _TOOL, _DROP):
            raise ValueError("unknown phase or kind")
        if self.n_calls < 0 or self.tool_bodies < 0:
            raise ValueError("negative count")


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
        while True:
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
            elif run.phase == _PRE:
                # Still no header: the text stays whole (content if none ever comes).
                run.pre_marker(buf[: marker.end()])
            buf = buf[marker.end() :]
        if final:
            run.end(buf)
            buf = ""
        run.held = run.pre + buf if run.phase == _PRE else buf
        new = MuseToolState(self.name, run.phase, run.kind, run.held, run.atem, run.tool_bodies,
                            run.n_calls)  # fmt: skip
        if len(new.held) + len(new.atem) > self.call_limit:
            raise LimitExceededError(
                f"{self.name}: held text exceeds the limit of {self.call_limit} characters "
                "(--max-tool-call-chars)"
            )
        if new.phase == _BODY and len(new.held) > MAX_HELD_CHARS:
            raise LimitExceededError(f"{self.name}: a held marker tail over {MAX_HELD_CHARS} characters")
        return new, run.events

    # -- calls ------------------------------------------------------------------------

    def normalize(self, name: str) -> str:
        if not self._registered or name in self._registered:
            return name
        head, dot, tail = name.partition(".")
        return head if dot and head == tail and head in self._registered else name

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
        self.pre = ""  # phase pre: the output so far is re-read from `held` each time
        self.held = ""
        self.events: list[Event] = []

    def pre_marker(self, text: str) -> None:
        self.pre += text

    def open(self, kind: str) -> None:
        """A header: the output is framed; its text before the header is dropped."""
        self.phase, self.kind, self.pre = _BODY, kind, ""
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
        last = self.events[-1] if self.events else None
        if isinstance(last, ContentDelta):
            self.events[-1] = ContentDelta(last.text + text)
        elif text:
            self.events.append(ContentDelta(text))

    def end(self, rest: str) -> None:
        if self.phase == _PRE:  # no header at all: the whole output is content and scope
            whole = self.pre + rest
            self.content(whole)
            self.invokes(whole, final=True)
            self.pre = ""
            return
        if self.phase == _BODY:
            self.body(rest)
        self.atem = self.invokes(self.atem, final=True)

    def invokes(self, text: str, *, final: bool) -> str:
        """Send every complete invoke of `text`; return the undecided rest."""
        pos = 0
        while True:
            start = text.find(_INVOKE_OPEN, pos)
            if start < 0:
                if final:
                    return ""
                return text[max(pos, len(text) - len(_INVOKE_OPEN) + 1) :] if _partial(text) else ""
            after = text[start + len(_INVOKE_OPEN) : start + len(_INVOKE_OPEN) + 1]
            if after and _WORD.match(after):
                pos = start + 1
                continue
            close = text.find(_INVOKE_CLOSE, start)
            if close < 0:
                return "" if final else text[start:]
            end = close + len(_INVOKE_CLOSE)
            call = self.parser.call_of(text[start:end])
            if call is not None:
                self.emit(*call)
            pos = end

    def emit(self, name: str, arguments: str) -> None:
        index = self.n_calls
        self.events.append(ToolCallStart(index, make_tool_call_id(self.request_id, index), name))
        self.events.append(ToolArgsDelta(index, arguments))
        self.n_calls += 1


def _partial(text: str) -> bool:
    """Whether `text` ends with a proper prefix of `<atem:invoke`."""
    return any(text.endswith(_INVOKE_OPEN[:k]) for k in range(1, len(_INVOKE_OPEN)))
