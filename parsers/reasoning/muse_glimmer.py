"""`muse_glimmer` reasoning (vLLM 0.33 `MuseGlimmerReasoningParser`: `MuseReasoningParser`
with `_glimmer_compat`, the Glimmer channel rules). The message framing is Muse's
(parsers/reasoning/muse.py); vLLM's Glimmer batch is regex subtraction over the whole output:

* Reasoning: the reasoning gaps are collapsed (from an `<|eom|>` to the next `to=self<|message|>`,
  becoming "\\n"), then the first `to=self<|message|>` left runs to the next `<|eom|>`. So the
  first self header starts one chain that every later one joins ("\\n" between bodies); a body
  runs to its `<|eom|>` across any header or `<|eot|>`. A self header after another message's
  `<|eom|>` (before any chain) is swallowed by the collapse. Plus the first self body that
  reaches a header or the end without `<|eom|>` (vLLM's open-span fallback), after a "\\n".
* Remainder: the output without its self spans (an optional `<|start|>assistant` and
  whitespace, the header, up to the next `<|eom|>`; an unclosed one up to a header or the end).
* Content: the remainder when it holds `<atem:function_calls>` / `<atem:invoke` (the tool
  parser re-splits it); else the first `to=user<|message|>` body, to `<|eot|>` / `<|eom|>` / the
  end (found anywhere in the output); else nothing when a self header appears; else the whole
  output (then reasoning is none).

The stream decides as it goes and holds only what the batch needs: the remainder until it
shows ATEM, a user header, or ends (bounded: past the tool-call limit LimitExceededError; the
text before the first header only up to PRE_HEADER_CHARS, past them it streams as content),
and possible marker tails. Where vLLM's answer depends on
how the output ends, ours keeps what it sent (the test's DIVERGENCES, README "Known
differences"): a chain that never closes after joining a second span (vLLM drops the closed
spans), a self body that runs into a header (vLLM counts it twice), a swallowed self header
whose body never closes, content sent before the remainder shows ATEM, text before the first
header past PRE_HEADER_CHARS (vLLM drops it when a user or self header comes). Composed with a Muse
tool parser the first answer goes out framed (header and boundary), so the tool parser keeps
ATEM echoed in it as the answer's text, where vLLM's batch hands it the framed remainder.

`is_reasoning_end` on prompt ids is vLLM's Glimmer one (the text after the last
`<|start|>assistant`, self spans removed, from its first header that is not self / user on,
holds ATEM). Reasoning tokens: vLLM's Glimmer class uses the base method, 0.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import regex

from parsers._base import ToolParser
from parsers._errors import LimitExceededError, StateError
from parsers._events import Event, ReasoningDelta, push_content
from parsers._state import JsonState
from parsers.reasoning.muse import PRE_HEADER_CHARS, MuseReasoningParser
from parsers.tools._base import MAX_TOOL_CALL_CHARS

__all__ = ["MuseGlimmerReasoningParser", "MuseGlimmerReasoningState"]

_SELF = r"(?:<\|start\|>assistant\s*)?to=self<\|message\|>"
_ATEM = r"<atem:function_calls>|<atem:invoke"
_TOKEN = regex.compile(
    r"(?P<self>" + _SELF + r")|to=(?P<rcpt>[^\s<]+)<\|message\|>"
    r"|(?P<eom><\|eom\|>)|(?P<eot><\|eot\|>)|(?P<atem>" + _ATEM + ")"
)
# Reasoning chain: not started, in a body, after a body's <|eom|>.
_OUT, _IN, _GAP = "out", "in", "gap"
# Content: before a user header, in the first user body, after it.
_PRE, _USER, _DONE = "pre", "user", "done"
# is_reasoning_end (prompt text, batch).
_STRIP_CLOSED = regex.compile(_SELF + r".*?<\|eom\|>", regex.DOTALL)
_HEADER = r"to=[^\s<]+<\|message\|>"
_STRIP_OPEN = regex.compile(
    _SELF + r"(?:(?!<\|eom\|>)(?!" + _HEADER + r").)*(?=" + _HEADER + r"|$)", regex.DOTALL)
_TOOL_HEADER = regex.compile(r"to=(?!(?:self|user)<\|message\|>)[^\s<]+<\|message\|>")


@dataclass(frozen=True, slots=True)
class MuseGlimmerReasoningState(JsonState):
    VERSION = 2

    chain: str = _OUT
    swallow: bool = False  # an <|eom|> before any chain: the next self header is swallowed
    phase: str = _PRE
    in_self: bool = False  # inside a self span of the remainder's subtraction
    saw_self: bool = False
    framed: bool = False  # the remainder showed ATEM: content is the remainder from then on
    pending: str = ""  # remainder text not sent (before ATEM shows)
    held: str = ""  # a possible token at the end of the text
    headed: bool = False  # a header came
    lead: bool = False  # the text before the first header streams as content (it grew long)

    def __post_init__(self) -> None:
        if self.chain not in (_OUT, _IN, _GAP) or self.phase not in (_PRE, _USER, _DONE):
            raise ValueError("unknown chain or phase")
        if self.pending and (self.framed or self.lead):
            raise ValueError("pending text once framed")


class MuseGlimmerReasoningParser(MuseReasoningParser):
    name: ClassVar[str] = "muse_glimmer"
    # Composed with a Muse tool parser: the answer goes out framed (its header and boundary),
    # so ATEM echoed in it stays the answer's text for the tool parser, as in vLLM's batch.
    frames_answer: bool = False

    def for_tool_parser(self, tool_parser: ToolParser) -> MuseGlimmerReasoningParser:
        if tool_parser.name not in ("muse", "musespark1x", "muse_glimmer"):
            return self
        clone = copy.copy(self)
        clone.frames_answer = True
        return clone

    def initial_state(self, prompt_token_ids: Sequence[int] = ()) -> MuseGlimmerReasoningState:  # type: ignore[override]
        return MuseGlimmerReasoningState()

    @classmethod
    def state_type(cls) -> type[MuseGlimmerReasoningState]:  # type: ignore[override]
        return MuseGlimmerReasoningState

    @staticmethod
    def turn_started(text: str) -> bool:
        return glimmer_tool_turn_started(text)

    def feed(self, state: JsonState, text: str) -> tuple[MuseGlimmerReasoningState, list[Event]]:  # type: ignore[override]
        return _Scan(self._check(state), self.frames_answer).run(text, final=False)

    def finish(self, state: JsonState) -> tuple[MuseGlimmerReasoningState, list[Event]]:  # type: ignore[override]
        return _Scan(self._check(state), self.frames_answer).run("", final=True)

    def _check(self, state: object) -> MuseGlimmerReasoningState:  # type: ignore[override]
        if not isinstance(state, MuseGlimmerReasoningState):
            raise StateError(f"{self.name}: not a state of this parser")
        if len(state.held) + len(state.pending) > MAX_TOOL_CALL_CHARS:
            raise StateError(f"{self.name}: held text over its bound")
        return state


class _Scan:
    """Scratch copy of a state for one feed/finish, plus the events it emits."""

    def __init__(self, state: MuseGlimmerReasoningState, frames_answer: bool) -> None:
        self.s, self.frames_answer = state, frames_answer
        self.chain, self.swallow, self.phase = state.chain, state.swallow, state.phase
        self.in_self, self.saw_self, self.framed = state.in_self, state.saw_self, state.framed
        self.pending, self.headed, self.lead = state.pending, state.headed, state.lead
        self.events: list[Event] = []

    def run(self, text: str, *, final: bool) -> tuple[MuseGlimmerReasoningState, list[Event]]:
        buf, pos = self.s.held + text, 0
        while True:
            found = _TOKEN.search(buf, pos, partial=not final)
            if found is None or found.partial:
                cut = len(buf) if found is None else found.start()
                self.plain(buf[pos:cut])
                buf = buf[cut:]
                break
            self.plain(buf[pos : found.start()])
            self.token(found)
            pos = found.end()
        self.maybe_lead()
        if final:
            self.end()
            buf = ""
        new = MuseGlimmerReasoningState(self.chain, self.swallow, self.phase, self.in_self, self.saw_self,
                                        self.framed, self.pending, buf, self.headed, self.lead)  # fmt: skip
        if len(new.held) + len(new.pending) > MAX_TOOL_CALL_CHARS:
            raise LimitExceededError(
                f"muse_glimmer: held text exceeds the limit of {MAX_TOOL_CALL_CHARS} characters")
        return new, self.events

    def reason(self, text: str) -> None:
        if text:
            self.events.append(ReasoningDelta(text))

    def remainder(self, text: str) -> None:
        """Text of the output outside the self spans."""
        if self.framed or self.lead:
            push_content(self.events, text)
        elif self.phase != _USER:  # (the answer's body went out as content)
            self.pending += text

    def maybe_lead(self) -> None:
        """Before any header, text past PRE_HEADER_CHARS streams as content (vLLM's batch
        keeps it only if no header comes; holding it would hold the whole output)."""
        if not self.headed and not self.framed and not self.lead and len(self.pending) > PRE_HEADER_CHARS:
            self.lead = True
            push_content(self.events, self.pending)
            self.pending = ""

    def plain(self, text: str) -> None:
        if not text:
            return
        if self.chain == _IN:
            self.reason(text)
        if self.phase == _USER and not self.framed:
            push_content(self.events, text)
        if not self.in_self:
            self.remainder(text)

    def token(self, found: regex.Match[str]) -> None:
        text = found.group()
        kind = found.lastgroup
        if kind in ("self", "rcpt") and not self.headed:
            self.maybe_lead()
            self.headed, self.lead = True, False
        if kind == "self":
            self.saw_self = True
            if self.chain == _IN:
                self.reason(text)
            elif self.chain == _GAP:
                self.chain = _IN
                self.reason("\n")
            elif self.swallow:
                self.swallow = False
            else:
                self.chain = _IN
            if self.phase == _USER and not self.framed:
                push_content(self.events, text)
            self.in_self = True
            return
        if kind in ("eom", "eot"):
            if self.chain == _IN and kind == "eom":
                self.chain = _GAP
            elif self.chain == _IN:
                self.reason(text)
            elif self.chain == _OUT and kind == "eom":
                self.swallow = True
            if self.phase == _USER:
                self.phase = _DONE
                if self.frames_answer and not self.framed:
                    push_content(self.events, text)
            if not self.in_self:
                self.remainder(text)
            if not self.framed and self.phase != _PRE:
                self.pending = ""  # after the answer, only the current message waits for ATEM
            if kind == "eom":
                self.in_self = False
            return
        # A header (not self) or ATEM markup.
        if kind == "rcpt":  # an unclosed self span ends at a header (vLLM's open-span rule)
            self.chain = _GAP if self.chain == _IN else self.chain
            self.in_self = False
        elif self.chain == _IN:
            self.reason(text)
        if self.phase == _USER and not self.framed:
            push_content(self.events, text)
        if kind == "rcpt" and found.group("rcpt") == "user" and self.phase == _PRE:
            self.phase = _USER
            if not self.framed:
                self.pending = ""
                if self.frames_answer:
                    push_content(self.events, text)
        if not self.in_self:
            self.remainder(text)
            if kind == "atem" and not self.framed and not (self.frames_answer and self.phase == _USER):
                self.framed = True
                push_content(self.events, self.pending)
                self.pending = ""

    def end(self) -> None:
        if not self.framed and self.phase == _PRE and not self.saw_self:
            push_content(self.events, self.pending)  # no header vLLM reads: content verbatim
        self.pending = ""


def glimmer_tool_turn_started(text: str) -> bool:
    """vLLM's Glimmer `_tool_channel_remainder` holds ATEM."""
    start = text.rfind("<|start|>assistant")
    scoped = text[start + len("<|start|>assistant"):] if start >= 0 else text
    scoped = _STRIP_OPEN.sub("", _STRIP_CLOSED.sub("", scoped))
    header = _TOOL_HEADER.search(scoped)
    rest = scoped[header.start():] if header is not None else ""
    return "<atem:function_calls>" in rest or "<atem:invoke" in rest
