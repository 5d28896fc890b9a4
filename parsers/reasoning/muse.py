"""`muse` / `musespark1x` reasoning (vLLM 0.33 `MuseReasoningParser`, Spark channel rules).

    to=self<|message|>...reasoning...<|eom|>
    <|start|>assistant to=read.read<|message|><atem:function_calls>...</atem:function_calls><|eom|>
    <|start|>assistant to=user<|message|>...answer...<|eot|>

vLLM's batch (`extract_reasoning`, its `_muse_messages` split): a header is `<|message|>`,
optionally preceded by `to=RCPT` (RCPT `[^\\s<]+`, no space before `<|message|>`) and by
`<|start|>assistant` plus any whitespace; a body runs from its header to the first `<|eom|>` /
`<|eot|>` / `<|start|>` or the next header's start (whitespace before a `to=` stays body, unlike
the tool parser's split: parsers/tools/muse.py). A message's framed text runs from its header
to the next header's start (its boundary and the text after it included). Text before the
first header belongs to no message; an output with no header is content verbatim. Only its
end says which, so that text is held while it is short (PRE_HEADER_CHARS); longer, it streams
as content and stays content if a header comes (vLLM's batch would drop it: a named
divergence), so the state never holds the output.

* Reasoning: the bodies of bare and `to=self` messages, joined with nothing.
* Content: the `to=user` / `to=commentary` bodies; `developer` and tool bodies are dropped.
* Once a tool message (any other recipient) holds `<atem:function_calls>` or `<atem:invoke`,
  content is the framed text of every message from it on, but bare / self / developer ones
  (the tool parser re-splits it). vLLM's batch decides that over the whole output, so earlier
  user / commentary / tool messages become framed text too; a stream cannot know it before it
  happens, so ours keeps what it sent (earlier user / commentary bodies unframed, an earlier
  tool message without ATEM dropped). A tool message's text is held until its body shows ATEM
  or ends (bounded: LimitExceededError past the tool-call limit).

`is_reasoning_end` on prompt ids is vLLM's (a tool message holding ATEM in the prompt's current
assistant turn); the split itself ignores the prompt, as vLLM's batch does. Reasoning tokens
(`parsers/reasoning_tokens.py`): the tokens of bare / self bodies, markers not counted.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import regex

from parsers._base import ReasoningParser, ReasoningResult, ToolParser
from parsers._errors import LimitExceededError, StateError
from parsers._events import ContentDelta, Event, ReasoningDelta, push_content
from parsers._state import JsonState
from parsers.tools._base import MAX_TOOL_CALL_CHARS
from parsers.tools.muse import PRE_HEADER_CHARS  # text before the first header held up to this

__all__ = ["MuseReasoningParser", "MuseSpark1xReasoningParser", "MuseReasoningState", "PRE_HEADER_CHARS"]

# vLLM's header and boundaries, one alternation (searched with partial matching so a possible
# header or marker at the end of the text is held).
_HEAD = r"(?P<head>(?:<\|start\|>assistant\s*)?(?:to=(?P<rcpt>[^\s<]+))?<\|message\|>)"
_SPLIT = regex.compile(_HEAD + r"|<\|eom\|>|<\|eot\|>|<\|start\|>")
_HEADER = regex.compile(_HEAD)
_OTHER_ROLE = regex.compile(r"<\|start\|>(?!assistant(?:\s|<|$))[^\s<]+")
_ATEM = ("<atem:function_calls>", "<atem:invoke")
# Message kinds: reasoning (bare, self), content (user, commentary), developer, tool.
_R, _C, _D, _T = "r", "c", "d", "t"
# Phases: before the first header (held; streaming as content once longer than
# PRE_HEADER_CHARS: "lead"), in a body, after a body's boundary.
_PRE, _LEAD, _BODY, _GAP = "pre", "lead", "body", "gap"


def _kind(rcpt: str | None) -> str:
    if rcpt in (None, "self"):
        return _R
    if rcpt in ("user", "commentary"):
        return _C
    return _D if rcpt == "developer" else _T


@dataclass(frozen=True, slots=True)
class MuseReasoningState(JsonState):
    VERSION = 2

    phase: str = _PRE
    kind: str = _R
    held: str = ""  # pre: the output so far (bounded); else a possible header / marker tail
    framed: bool = False  # a tool message held ATEM: content is framed text from then on
    pending: str = ""  # a tool message's framed text, before framing starts (until ATEM shows)

    def __post_init__(self) -> None:
        if self.phase not in (_PRE, _LEAD, _BODY, _GAP) or self.kind not in (_R, _C, _D, _T):
            raise ValueError("unknown phase or kind")
        if self.pending and (self.framed or self.kind != _T):
            raise ValueError("pending text outside an undecided tool message")


class MuseReasoningParser(ReasoningParser):
    name: ClassVar[str] = "muse"
    # Composed with a Spark tool parser: content is framed text from the first header on.
    frames_content: bool = False

    def for_tool_parser(self, tool_parser: ToolParser) -> MuseReasoningParser:
        if tool_parser.name not in ("muse", "musespark1x"):
            return self
        clone = copy.copy(self)
        clone.frames_content = True
        return clone

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> MuseReasoningState:
        return MuseReasoningState(framed=self.frames_content)

    @classmethod
    def state_type(cls) -> type[MuseReasoningState]:
        return MuseReasoningState

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        decode = getattr(self.vocab, "decode", None)
        if decode is None:
            return False
        try:
            text = str(decode(list(token_ids), skip_special_tokens=False))
        except Exception:  # noqa: BLE001 - vLLM returns False when decoding fails
            return False
        return self.turn_started(text)

    @staticmethod
    def turn_started(text: str) -> bool:
        """vLLM's is_reasoning_end on the decoded prompt: has the current turn reached a tool?"""
        return tool_turn_started(text)

    def feed(self, state: JsonState, text: str) -> tuple[MuseReasoningState, list[Event]]:
        return _Run.split(self._check(state), text, final=False)

    def finish(self, state: JsonState) -> tuple[MuseReasoningState, list[Event]]:
        return _Run.split(self._check(state), "", final=True)

    def parse(self, text: str, prompt_token_ids: Sequence[int] = ()) -> ReasoningResult:
        state, events = self.feed(self.initial_state(), text)
        _, tail = self.finish(state)
        events += tail
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        content = "".join(e.text for e in events if isinstance(e, ContentDelta))
        return ReasoningResult(reasoning or None, content or None)

    def _check(self, state: object) -> MuseReasoningState:
        if not isinstance(state, MuseReasoningState):
            raise StateError(f"{self.name}: not a state of this parser")
        if len(state.held) + len(state.pending) > MAX_TOOL_CALL_CHARS:
            raise StateError(f"{self.name}: held text over its bound")
        return state


class MuseSpark1xReasoningParser(MuseReasoningParser):
    """vLLM's `musespark1x`: an alias of `muse` (the same class)."""

    name: ClassVar[str] = "musespark1x"


class _Run:
    """Scratch copy of a state for one feed/finish, plus the events it emits."""

    def __init__(self, state: MuseReasoningState) -> None:
        self.phase, self.kind, self.framed, self.pending = (
            state.phase, state.kind, state.framed, state.pending)  # fmt: skip
        self.events: list[Event] = []

    @staticmethod
    def split(state: MuseReasoningState, text: str, *, final: bool
              ) -> tuple[MuseReasoningState, list[Event]]:
        run = _Run(state)
        buf = state.held + text
        pos = 0
        if run.phase in (_PRE, _LEAD):
            buf, pos = run.lead(buf, final)
        while pos >= 0:
            found = _SPLIT.search(buf, pos, partial=not final)
            if found is not None and not final and found.group() == "<|start|>":
                # A whole `<|start|>` wins over a header it may still begin: hold it.
                head = _HEADER.match(buf, found.start(), partial=True)
                found = head if head is not None and head.partial else found
            if found is None or found.partial:
                cut = len(buf) if found is None else found.start()
                run.text(buf[pos:cut])
                buf = buf[cut:]
                break
            run.text(buf[pos : found.start()])
            if found.group("head") is not None:
                run.open(_kind(found.group("rcpt")), found.group())
            else:
                run.boundary(found.group())
            pos = found.end()
        if final:
            run.close()
            buf = ""
        new = MuseReasoningState(run.phase, run.kind, buf, run.framed, run.pending)
        if len(new.held) + len(new.pending) > MAX_TOOL_CALL_CHARS:
            raise LimitExceededError(
                f"muse: held text exceeds the limit of {MAX_TOOL_CALL_CHARS} characters"
            )
        return new, run.events

    def _framed(self, text: str) -> None:
        """Framed text of the current message (header, body, boundary, gap)."""
        if not text:
            return
        if self.framed and self.kind in (_C, _T):
            push_content(self.events, text)
        elif self.kind == _T and not self.framed:
            self.pending += text
            if self.phase == _BODY and any(m in self.pending for m in _ATEM):
                self.framed = True
                push_content(self.events, self.pending)
                self.pending = ""

    def lead(self, buf: str, final: bool) -> tuple[str, int]:
        """Before the first header: (the text to go on with, where its header starts), or
        (the text held, -1) when no header is whole yet. The text before the header is held
        while it is short; longer (or at the end, with no header) it is content."""
        found = _HEADER.search(buf, partial=not final)
        start = len(buf) if found is None else found.start()
        if start > PRE_HEADER_CHARS or (final and found is None):
            self.phase = _LEAD
        if self.phase == _LEAD:
            push_content(self.events, buf[:start])
            buf, start = buf[start:], 0
        if found is None or found.partial:
            return buf, -1
        return buf, start

    def text(self, text: str) -> None:
        if not text or self.phase in (_PRE, _LEAD):
            return
        if self.phase == _BODY and self.kind == _R:
            self.events.append(ReasoningDelta(text))
        elif self.phase == _BODY and self.kind == _C and not self.framed:
            push_content(self.events, text)
        else:
            self._framed(text)

    def open(self, kind: str, header: str) -> None:
        self.close()
        self.phase, self.kind = _BODY, kind
        self._framed(header)

    def boundary(self, marker: str) -> None:
        if self.phase in (_PRE, _LEAD):
            return
        self._end_body()
        self.phase = _GAP
        self._framed(marker)

    def _end_body(self) -> None:
        if self.phase == _BODY and self.kind == _T and not self.framed:
            self.pending = ""  # a tool body without ATEM: vLLM frames nothing of it
            self.kind = _D  # its boundary and gap go nowhere either

    def close(self) -> None:
        """The current message ends (a new header, or the output's end)."""
        self._end_body()
        self.pending = ""


def tool_turn_started(text: str) -> bool:
    """vLLM's `_tool_channel_remainder` is not empty: in the text's current assistant turn a
    tool message holds ATEM."""
    roles = list(_OTHER_ROLE.finditer(text))
    if roles:
        start = text.find("<|start|>assistant", roles[-1].end())
        if start < 0:
            return False
        text = text[start:]
    state, _ = _Run.split(MuseReasoningState(), text, final=False)
    return state.framed
