"""Cohere Command output (vLLM 0.33 `CohereCommandParser`, `cohere_command3` / `cohere_command4`).

vLLM runs one `cohere_melody` filter (preset "cmd3" or "cmd4") over the whole output for both
the reasoning and the tool parser names; this module is that filter's behaviour, rebuilt from
its documented state machine and checked against it case by case (tests/parsers/tools/
test_tool_cohere.py). The chat parser runs it once in place of the reasoning -> tools pipeline.

The filter keeps a text buffer and re-reads it on every chunk:

* markers switch the mode: `<|START_THINKING|>` reasoning, `<|END_THINKING|>` and
  `<|START_RESPONSE|>` (cmd4 also `<|START_TEXT|>`) the answer, `<|START_ACTION|>` tool calls,
  `<|END_RESPONSE|>` / `<|END_ACTION|>` (cmd4 `<|END_TEXT|>`) ignore what follows. cmd3 starts
  in the answer, cmd4 in reasoning (its prompt opens the thinking block). Text before a marker
  is read in the old mode; a trailing prefix of a marker waits for the next chunk.
* answer and reasoning text is right-trimmed (trailing whitespace waits for more text and is
  dropped before a marker and at the end); `<|START_THINKING|>` also left-trims the next text.
  Citation markup `<co>text</co: 0:[1]>` is removed (the cited text stays).
* tool calls are found by pattern, not parsed as JSON: `"tool_call_id": "ID"`, then
  `"tool_name": "NAME"`, then `"parameters": {"...` whose raw text (up to 8 leading blanks of
  each line removed) is the arguments until a complete JSON value; `"parameters": {}` gives
  empty arguments. The model's `tool_call_id` is the call id, as vLLM keeps it.

The state is the unread buffer (a marker prefix, trailing whitespace, an open citation or the
piece of a call header not yet matched) plus the mode flags and a bounded JSON scanner for the
arguments: never the arguments or the reasoning read so far.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from parsers._base import make_tool_call_id
from parsers._events import (
    ContentDelta,
    Event,
    ReasoningDelta,
    ToolArgsDelta,
    ToolCallStart,
)
from parsers._state import JsonState
from parsers._whole_output import WholeOutputResult, collect
from parsers.tools._json_scan import DONE, ERROR, Ev, ScanState, scan

__all__ = ["CohereMachine", "CohereResult", "CohereState", "PRESETS"]

START_THINKING, END_THINKING = "<|START_THINKING|>", "<|END_THINKING|>"
CHATBOT_TOKEN = "<|CHATBOT_TOKEN|>"

# Filter modes: answer (content), reason (reasoning), action (tool calls), ignore.
ANSWER, REASON, ACTION, IGNORE = "answer", "reason", "action", "ignore"
_COMMON = {
    "<|START_RESPONSE|>": ANSWER, "<|END_RESPONSE|>": IGNORE, START_THINKING: REASON,
    END_THINKING: ANSWER, "<|START_ACTION|>": ACTION, "<|END_ACTION|>": IGNORE,
}  # fmt: skip
# preset -> (initial mode, marker -> mode). cmd3 does not know the START_TEXT pair.
PRESETS: dict[str, tuple[str, dict[str, str]]] = {
    "cmd3": (ANSWER, dict(_COMMON)),
    "cmd4": (REASON, {**_COMMON, "<|START_TEXT|>": ANSWER, "<|END_TEXT|>": IGNORE}),
}

# Rust's `char::is_whitespace` (Unicode White_Space), which the filter trims by.
_WS = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_ID_KEY = re.compile(r'"tool_call_id":\s*"')
_NAME_KEY = re.compile(r'"tool_name":\s*"')
_ID_KEY_TEXT, _NAME_KEY_TEXT = '"tool_call_id":', '"tool_name":'
_PARAMS_OBJECT = re.compile(r'"parameters":\s*\{\s*"')
_PARAMS_KEY = re.compile(r'"parameters":\s*')
_INDENT_REMOVED = 8  # leading blanks dropped per line of the raw arguments
_CIT_OPEN, _CIT_CLOSE = "<co", "</co: "
# Action sub-modes: before a call, in the id, after the id, in the name, after the name, args.
_BEFORE, _ID, _ID_END, _NAME, _NAME_END, _ARGS = "before", "id", "id_end", "name", "name_end", "args"


def _rstrip(s: str) -> str:
    end = len(s)
    while end and s[end - 1] in _WS:
        end -= 1
    return s[:end]


def _lstrip(s: str) -> str:
    start = 0
    while start < len(s) and s[start] in _WS:
        start += 1
    return s[start:]


def _unescaped_quote(s: str) -> int:
    """Index of the first `"` not escaped by an odd run of backslashes, or -1."""
    i = s.find('"')
    while i != -1:
        run = 0
        while run < i and s[i - run - 1] == "\\":
            run += 1
        if run % 2 == 0:
            return i
        i = s.find('"', i + 1)
    return -1


@dataclass(frozen=True, slots=True)
class CohereState(JsonState):
    """mode: the filter mode; buf: unread text; lt: left-trim the next text; cit: how much of
    an open citation's text was already sent (None: none open); act: the action sub-mode;
    idx: the current call's index; pid: its id, held until its name; named: the current call
    has started; args: the arguments' JSON scanner (None: not in arguments); bad: arguments
    that can no longer become JSON; ind / seen: the indentation removal of the current line."""

    VERSION: ClassVar[int] = 1

    mode: str = ANSWER
    buf: str = ""
    lt: bool = False
    cit: int | None = None
    act: str = _BEFORE
    idx: int = 0
    pid: str = ""
    args: ScanState | None = None
    bad: bool = False
    ind: int = 0
    seen: bool = False
    done: bool = False

    def __post_init__(self) -> None:
        if self.mode not in (ANSWER, REASON, ACTION, IGNORE):
            raise ValueError("unknown filter mode")
        if self.act not in (_BEFORE, _ID, _ID_END, _NAME, _NAME_END, _ARGS):
            raise ValueError("unknown action mode")
        if self.idx < 0 or not 0 <= self.ind <= _INDENT_REMOVED:
            raise ValueError("bad counters")


CohereResult = WholeOutputResult


@dataclass
class _Run:
    """One feed's mutable copy of the state, and the events it makes."""

    f: dict[str, Any]
    request_id: str
    events: list[Event] = field(default_factory=list)

    def text(self, mode: str, text: str) -> None:
        if text:
            self.events.append(ReasoningDelta(text) if mode == REASON else ContentDelta(text))


class CohereMachine:
    """The melody filter of one preset: immutable configuration, state in CohereState."""

    # CohereCommandParser: the reasoning parser's preset wins; a tool name alone needs auto
    # tool choice; reasoning is always split and calls dropped with tool_choice="none".
    prefers_reasoning_side = True
    needs_auto_tools_alone = True

    @staticmethod
    def kept(reasoning_set: bool, tools_set: bool, include_reasoning: bool,  # noqa: ARG004
             tool_choice: object) -> tuple[bool, bool]:
        return include_reasoning, tools_set and tool_choice != "none"

    def __init__(self, preset: str) -> None:
        self.preset = preset
        self.initial_mode, self.markers = PRESETS[preset]
        self._tail = max(len(m) for m in self.markers)

    @staticmethod
    def state_type() -> type[CohereState]:
        return CohereState

    def initial_state(self) -> CohereState:
        return CohereState(mode=self.initial_mode)

    def feed(self, state: CohereState, text: str, request_id: str) -> tuple[CohereState, list[Event]]:
        if state.done or not text:
            return state, []
        run = _Run(_fields(state), request_id)
        run.f["buf"] += text
        self._write(run)
        buf = run.f["buf"]
        if len(buf) > self._tail:
            if run.f["mode"] == IGNORE:
                # Ignored text is never read again; only a marker prefix at its end matters.
                run.f["buf"] = buf[-self._tail :]
            elif run.f["mode"] == ACTION and run.f["act"] in (_BEFORE, _ID_END):
                # Only where the next key can still begin matters (and a marker prefix).
                # (A held match, behind a trailing backslash, stays whole.)
                key, pattern = (
                    (_ID_KEY_TEXT, _ID_KEY) if run.f["act"] == _BEFORE else (_NAME_KEY_TEXT, _NAME_KEY)
                )
                if pattern.search(buf) is None:
                    run.f["buf"] = buf[min(_key_start(buf, key), len(buf) - self._tail) :]
        return CohereState(**run.f), run.events

    def finish(self, state: CohereState, request_id: str) -> tuple[CohereState, list[Event]]:
        if state.done:
            return state, []
        run = _Run(_fields(state), request_id)
        buf, run.f["buf"] = run.f["buf"], ""
        if buf:
            self._handle(run, run.f["mode"], buf, final=True)
        if run.f["pid"]:
            # An id whose name never came: vLLM's batch still returns it, nameless.
            run.events.append(ToolCallStart(run.f["idx"], run.f["pid"], ""))
            run.f["pid"] = ""
        run.f["done"] = True
        return CohereState(**run.f), run.events

    def parse(self, text: str, request_id: str) -> CohereResult:
        state, events = self.feed(self.initial_state(), text, request_id)
        _, tail = self.finish(state, request_id)
        return collect([*events, *tail])

    # -- the buffer ---------------------------------------------------------------------------

    def _find_marker(self, buf: str) -> tuple[int, str | None]:
        """(index, marker) of the first full marker; (index, None) for a marker prefix that
        ends the buffer; (-1, None) for neither."""
        best, found = -1, None
        for marker in self.markers:
            i = buf.find(marker)
            if i != -1:
                if best == -1 or i < best:
                    best, found = i, marker
                continue
            for cut in range(len(marker) - 1, 0, -1):
                if buf.endswith(marker[:cut]):
                    i = len(buf) - cut
                    if best == -1 or best > i:
                        best, found = i, None
                    break
        return best, found

    def _write(self, run: _Run) -> None:
        f = run.f
        while True:
            buf = f["buf"]
            idx, marker = self._find_marker(buf) if "<" in buf else (-1, None)
            if idx != -1 and marker is None:
                if idx > 0:
                    used = self._handle(run, f["mode"], buf[:idx], final=False)
                    f["buf"] = f["buf"][used:]
                return
            if marker is not None:
                new_mode = self.markers[marker]
                if idx:  # the text before a marker is read as the end of its mode
                    self._handle(run, f["mode"], buf[:idx], final=True)
                f["cit"] = None  # an open citation ends with its mode
                if new_mode == REASON:
                    f["lt"] = True
                f["buf"] = buf[idx + len(marker) :]
                f["mode"] = new_mode
                continue
            if buf:
                used = self._handle(run, f["mode"], buf, final=False)
                f["buf"] = f["buf"][used:]
            return

    def _handle(self, run: _Run, mode: str, s: str, *, final: bool) -> int:
        """Read `s` in `mode`; returns how much of it was used (the rest stays unread)."""
        if mode == IGNORE:
            return 0
        if mode == ACTION:
            return self._actions(run, s)
        used = self._grounded(run, mode, s, final=final)
        while final and 0 < used < len(s):  # at its end, all of the text is read
            s = s[used:]
            used = self._grounded(run, mode, s, final=True)
        return used

    # -- answer / reasoning text --------------------------------------------------------------

    def _grounded(self, run: _Run, mode: str, s: str, *, final: bool) -> int:
        f = run.f
        send = _rstrip(s)
        rem_right = len(s) - len(send)
        if f["lt"]:
            send = _lstrip(send)
            if send:
                f["lt"] = False
        left = len(s) - len(send) - rem_right
        text, used, cited = self._citations(run, send)
        if text is None or (not text and not cited):
            if not send or not final or f["cit"] is not None:
                return left + used
            run.text(mode, send)
            return len(s)
        run.text(mode, text)
        return left + used

    def _citations(self, run: _Run, s: str) -> tuple[str | None, int, int]:
        """(text to send, used, citations found) for `s` with `<co>..</co: ..>` citations
        removed; text None while a citation is incomplete and nothing can be sent yet."""
        f = run.f
        first, first_end = _element(s, _CIT_OPEN)
        if first == -1:
            return s, len(s), 0
        if first_end == -1:
            return None, 0, 0
        last, last_end = _element(s, _CIT_CLOSE)
        if last != -1 and last_end != -1 and first_end > last:
            return None, 0, 0  # a closing tag before the opening one
        if len(_CIT_OPEN) + first != first_end:
            # Not a `<co>` tag (`<code>`, `<co: 0>`): plain text up to the next tag.
            stops = [i for i in (last, s.find(_CIT_OPEN, first + 1)) if i > 0]
            stop = min(stops) if stops else len(s)
            more, used, cited = self._citations(run, s[stop:])
            if more is None:
                return s[:stop], stop, 0
            return s[:stop] + more, stop + used, cited
        if last == -1 or last_end == -1:
            if last_end == -1:
                text, used = self._open_citation(run, s, first, first_end, last)
                if text:
                    return text, used, 0
            return None, 0, 0
        text = s[:first] + s[first_end + 1 : last]
        cit = f["cit"]
        if cit is not None:
            text = s[cit:last] if cit < last else ""
        f["cit"] = None
        more, used, cited = self._citations(run, s[last_end + 1 :])
        if more is None:
            return text, last_end + 1, 1
        return text + more, last_end + 1 + used, 1 + cited

    def _open_citation(self, run: _Run, s: str, first: int, first_end: int, last: int) -> tuple[str, int]:
        f = run.f
        stop = last if last > 0 else len(s)
        before = s[:first]
        cit = f["cit"]
        if cit is not None:
            if cit >= len(s):
                return before, len(before)
            start = cit
        else:
            start = first_end + 1
        f["cit"] = len(s) - len(before)
        if start >= stop:
            return before, len(before)
        return before + s[start:stop], len(before)

    # -- tool calls ---------------------------------------------------------------------------

    def _actions(self, run: _Run, s: str) -> int:
        f = run.f
        if not s or s.endswith("\\"):
            return 0
        act = f["act"]
        if act == _BEFORE:
            return self._key(run, s, _ID_KEY, _ID)
        if act == _ID_END:
            return self._key(run, s, _NAME_KEY, _NAME)
        if act in (_ID, _NAME):
            q = _unescaped_quote(s)
            if q == -1:
                return 0
            if act == _ID:
                f["pid"] = s[:q] or f["pid"]
            else:
                # An empty name still makes a call (melody's aggregate keeps it).
                index = f["idx"]
                call_id = f["pid"] or make_tool_call_id(run.request_id, index)
                run.events.append(ToolCallStart(index, call_id, s[:q]))
                f["pid"] = ""
            f["act"] = _ID_END if act == _ID else _NAME_END
            return q + 1 + self._actions(run, s[q + 1 :])
        if act == _NAME_END:
            if _PARAMS_OBJECT.search(s):
                m = _PARAMS_KEY.search(s)
                assert m is not None
                f["act"], f["args"], f["bad"] = _ARGS, ScanState(), False
                return m.end() + self._actions(run, s[m.end() :])
            close = s.find("}")
            if close == -1:
                return 0
            self._call_end(f)
            return close + self._actions(run, s[close:])
        return self._args(run, s)

    def _key(self, run: _Run, s: str, key: re.Pattern[str], act: str) -> int:
        m = key.search(s)
        if m is None:
            return 0
        run.f["act"] = act
        return m.end() + self._actions(run, s[m.end() :])

    def _args(self, run: _Run, s: str) -> int:
        f = run.f
        end = -1
        if not f["bad"]:
            state, events, pos, status = scan(_surrogate(f["args"], -_HI_SHIFT), s)
            state = _surrogate(state, _HI_SHIFT)
            if any(_not_serde(ev) for ev in events):
                status = ERROR  # melody's serde_json never accepts it
            if status == DONE:
                end = pos
            elif status == ERROR:
                f["bad"] = True
            else:
                f["args"] = state
        if end == -1:
            self._send_args(run, s)
            return len(s)
        self._send_args(run, s[:end])
        self._call_end(f)
        return end + self._actions(run, s[end:])

    @staticmethod
    def _call_end(f: dict[str, Any]) -> None:
        f["act"], f["idx"], f["args"], f["bad"] = _BEFORE, f["idx"] + 1, None, False

    def _send_args(self, run: _Run, s: str) -> None:
        f = run.f
        out: list[str] = []
        ind, seen = f["ind"], f["seen"]
        for ch in s:
            if ch == "\n":
                ind, seen = 0, False
            elif ch in _WS:
                if ind < _INDENT_REMOVED and not seen:
                    ind += 1
                    continue
            else:
                seen = True
            out.append(ch)
        f["ind"], f["seen"] = ind, seen
        if out:
            run.events.append(ToolArgsDelta(f["idx"], "".join(out)))


# A scanner holding a high surrogate (waiting for its low half) keeps it as a character,
# which a UTF-8 state cannot carry: the state holds it moved to plane 15 instead.
_HI_SHIFT = 0xF0000 - 0xD800


def _surrogate(state: ScanState, shift: int) -> ScanState:
    return state.replace(hi=chr(ord(state.hi) + shift)) if state.hi else state


def _not_serde(ev: Ev) -> bool:
    """JSON that Python accepts and serde_json (melody's judge of where arguments end) does
    not: NaN / Infinity (and numbers out of float range), lone surrogate escapes."""
    if ev.kind == "scalar":
        return isinstance(ev.value, float) and not math.isfinite(ev.value)
    if ev.kind in ("chars", "key"):
        return any("\ud800" <= ch <= "\udfff" for ch in ev.value)
    return False


def _key_start(buf: str, key: str) -> int:
    """The first index from which `buf` can still grow into `key` + blanks + `"` (the
    pattern searched for; `buf` holds no match yet), or len(buf)."""
    i = buf.find('"')
    while i != -1:
        rest = buf[i:]
        if key.startswith(rest) or (rest.startswith(key) and not rest[len(key) :].strip()):
            return i
        i = buf.find('"', i + 1)
    return len(buf)


def _element(s: str, start: str) -> tuple[int, int]:
    """(start, index of the next `>`) of the first `start` tag in `s`; (i, -1) when the tag is
    cut (at the end) or unclosed; (-1, -1) when there is none."""
    i = s.find(start)
    if i == -1:
        for cut in range(len(start) - 1, 0, -1):
            if s.endswith(start[:cut]):
                return len(s) - cut, -1
        return -1, -1
    j = s.find(">", i + 1)
    return i, j


def _fields(state: CohereState) -> dict[str, Any]:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}

