"""LFM2 / LFM2.5 tool calls (vLLM 0.33 `Lfm2ToolParser`): a pythonic call list between markers,

    Let me check.<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>It is sunny.

vLLM's batch: the text from the first `<|tool_call_start|>` to the next `<|tool_call_end|>`
(or to the end of the output), stripped, must be `[...]` and parse (`ast`) as a non-empty
list of calls (`pythonic`'s literal rules); then the calls are returned and the content is the
stripped text before the block and the stripped text after it (after the last
`<|tool_call_end|>`, an echoed body is dropped), joined by a newline; otherwise the whole
output is content.

Streaming, on `pythonic`'s call-list machine (`PythonicCallsBase`): content streams, holding
its trailing blanks (dropped by a block with calls) and a blank start; the block's list is
read as `pythonic` reads one (a call commits at its first argument fragment, its arguments
stream); after the block, content streams behind a newline, its blanks held the same way.
Until the first call is sent the block's text is kept, so a block that is no call list makes
the whole output content.

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests),
besides `pythonic`'s (`broken_call_list`, `repeated_key`): blanks at the very start of the
content, before other content and a block with calls, are kept; text after the block before
an echoed `<|tool_call_end|>` has streamed and stays; vLLM's repairs of outputs `ast` refuses
(control characters and nested quotes in strings, leading-zero numbers, reserved keyword
names) are not made (the list breaks); a first call whose arguments start with a positional
argument, or blanks between `[` and the first name, make no call list (the `pythonic` head).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from parsers._state import JsonState
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    ToolStreamState,
    nothing,
    to_content,
)
from parsers.tools.pythonic import P, PythonicCallsBase, PythonicState, _act

__all__ = ["Lfm2ToolParser", "TOOL_CALL_START", "TOOL_CALL_END"]

TOOL_CALL_START = "<|tool_call_start|>"
TOOL_CALL_END = "<|tool_call_end|>"
_BLANK = " \t\n\r\x0b\x0c"


@dataclass(frozen=True, slots=True)
class Lfm2Side(JsonState):
    """The content around the block. ws: blanks held (at the end of the content so far, or
    after the block); said: content was sent before the block; after: content was sent
    after it."""

    ws: str = ""
    said: bool = False
    after: bool = False


@dataclass(frozen=True, slots=True)
class Lfm2State(PythonicState):
    side: Lfm2Side = Lfm2Side()


class Lfm2ToolParser(PythonicCallsBase):
    name: ClassVar[str] = "lfm2"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = Lfm2State

    def held_chars(self, state: ToolStreamState) -> int:
        side = state.side if isinstance(state, Lfm2State) else Lfm2Side()
        return super().held_chars(state) + len(side.ws)

    # -- content before the block ------------------------------------------------------------

    def content_text(self, run: Run[Lfm2ToolParser], text: str) -> None:
        side = _side(run)
        buf = side.ws + text
        body = buf.rstrip(_BLANK)
        if body:
            run.content(body)
            side = side.replace(said=True)
        _set_side(run, side.replace(ws=buf[len(body):]))

    def content_end(self, run: Run[Lfm2ToolParser], text: str) -> None:
        run.content(_side(run).ws)
        _set_side(run, _side(run).replace(ws=""))

    def block_open(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        """The held blanks go with the block: dropped with its calls, content without."""
        run.ext = run.ext.replace(raw=_side(run).ws + marker)
        _set_side(run, _side(run).replace(ws=""))
        run.phase = P.BLOCK

    # -- the block ---------------------------------------------------------------------------

    def block_text(self, run: Run[Lfm2ToolParser], text: str) -> str | None:
        buf = run.ext.raw + text
        start = buf.index(TOOL_CALL_START) + len(TOOL_CALL_START)
        start = len(buf) - len(buf[start:].lstrip(_BLANK))
        if start == len(buf):
            run.ext = run.ext.replace(raw=buf)
            return None
        if buf[start] != "[":
            self.not_a_call_list(run, buf)
            return None
        return self.open_head(run, buf, start + 1)

    def block_close(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        self.not_a_call_list(run, run.ext.raw + marker)

    def block_end(self, run: Run[Lfm2ToolParser], text: str) -> None:
        self.not_a_call_list(run, run.ext.raw)

    def args_close(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        self.args_end(run, marker)

    def args_eos(self, run: Run[Lfm2ToolParser], text: str) -> None:
        self.args_end(run)

    def list_close(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        self.list_end(run, marker)

    def list_eos(self, run: Run[Lfm2ToolParser], text: str) -> None:
        self.list_end(run)

    def trailer_close(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        """Only blanks may follow the list inside the block (vLLM's `\\[.*\\]$`)."""
        if run.ext.raw.strip(_BLANK):
            self.break_list(run, marker)
            return
        run.ext = run.ext.replace(raw="")
        run.phase = P.AFTER

    def trailer_end(self, run: Run[PythonicCallsBase], text: str) -> None:
        if run.ext.raw.strip(_BLANK):
            self.break_list(run, "")
        run.ext = run.ext.replace(raw="")

    # -- content after the block -----------------------------------------------------------

    def after_text(self, run: Run[Lfm2ToolParser], text: str) -> None:
        side = _side(run)
        buf = side.ws + text
        if not side.after:
            buf = buf.lstrip(_BLANK)
        body = buf.rstrip(_BLANK)
        if body:
            run.content(("\n" if side.said and not side.after else "") + body)
            side = side.replace(after=True)
        _set_side(run, side.replace(ws=buf[len(body):]))

    def after_marker(self, run: Run[Lfm2ToolParser], marker: str) -> None:
        """An echoed end marker: vLLM drops the text before it (held blanks here)."""
        _set_side(run, _side(run).replace(ws=""))

    def after_end(self, run: Run[Lfm2ToolParser], text: str) -> None:
        _set_side(run, _side(run).replace(ws=""))


def _side(run: Run[Lfm2ToolParser]) -> Lfm2Side:
    side = vars(run)["side"]  # the state's own field, copied onto the run
    assert isinstance(side, Lfm2Side)
    return side


def _set_side(run: Run[Lfm2ToolParser], side: Lfm2Side) -> None:
    vars(run)["side"] = side


def _lfm2_table() -> Table:
    steps = {
        (P.CONTENT, TEXT): Step(_act("content_text")),
        (P.CONTENT, TOOL_CALL_START): Step(_act("block_open")),
        (P.CONTENT, EOS): Step(_act("content_end")),
        (P.BLOCK, TEXT): Step(_act("block_text")),
        (P.BLOCK, TOOL_CALL_END): Step(_act("block_close")),
        (P.BLOCK, EOS): Step(_act("block_end")),
        (P.ARGS, TEXT): Step(_act("args_text")),
        (P.ARGS, TOOL_CALL_END): Step(_act("args_close")),
        (P.ARGS, EOS): Step(_act("args_eos")),
        (P.LIST, TEXT): Step(_act("list_text")),
        (P.LIST, TOOL_CALL_END): Step(_act("list_close")),
        (P.LIST, EOS): Step(_act("list_eos")),
        (P.TRAILER, TEXT): Step(_act("trailer_text")),
        (P.TRAILER, TOOL_CALL_END): Step(_act("trailer_close")),
        (P.TRAILER, EOS): Step(_act("trailer_end")),
        (P.AFTER, TEXT): Step(_act("after_text")),
        (P.AFTER, TOOL_CALL_END): Step(_act("after_marker")),
        (P.AFTER, ANY_MARKER): Step(_act("after_text")),
        (P.AFTER, EOS): Step(_act("after_end")),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    }
    return Table({phase for phase, _ in steps}, (TOOL_CALL_START, TOOL_CALL_END), steps)


Lfm2ToolParser.table = _lfm2_table()
