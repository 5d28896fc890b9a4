"""Shared DeepSeek machinery: `<｜tool▁calls▁begin｜>` blocks of `<｜tool▁call▁begin｜>` calls.

vLLM 0.33's DeepSeek-V3 and V3.1 parsers differ in the header of one call (what comes between
the call marker and the arguments), in what ends the arguments, and in what counts as
content. A family supplies `read_header` and its end marker; the phases are here:

    CONTENT --calls begin--> BLOCK --call begin--> HEADER --header read--> ARGS --end--> BLOCK

Batch semantics reproduced (both versions): content is the text before the first
`<｜tool▁calls▁begin｜>` (None when empty); calls are every match of the call regex, in
order; a call marker where the regex cannot match is skipped (findall resumes one character
later); arguments are the model's raw text (no JSON canonicalisation, as upstream).

Streaming: content streams until the block marker (holding back a possible marker start). A
call's header is held until it is complete, then the call is sent and its arguments stream
raw, holding back only a possible end marker (the lexer does that).

Divergences from vLLM's batch (stream == our batch instead; the families' tests name them):
call text in the content before the block is content here, as in vLLM's stream (vLLM's batch
regex also returns it as a call, though it streamed as content; following it would hold every
call seen in content until a block begins); a call whose arguments never end (the output
stops first) is kept with the arguments it has (vLLM's batch finds no match and drops it; its
own stream sends it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from parsers._state import JsonState
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    drop,
    nothing,
    to_content,
)

__all__ = [
    "CALLS_BEGIN", "CALLS_END", "CALL_BEGIN", "CALL_END", "SEP",
    "P", "Header", "NEED_MORE", "NO_MATCH", "DeepSeekToolParserBase", "deepseek_table",
]  # fmt: skip

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"

NEED_MORE = "need_more"  # the header may still match once more text arrives
NO_MATCH = "no_match"  # the regex cannot match at this call marker


class P(enum.StrEnum):
    CONTENT = "content"
    BLOCK = "block"  # inside the calls block, between calls
    HEADER = "header"  # after a call marker, before its arguments (held in `call.raw`)
    BAD = "bad"  # V3: a call whose type is not "function", held to see whether it matches
    ARGS = "args"  # a committed call's arguments, streaming
    AFTER = "after"  # V3: after the block end, text is content
    VERBATIM = "verbatim"


@dataclass(frozen=True, slots=True)
class Header:
    """A complete header: the call's name, whether vLLM accepts it (V3: the type must be
    "function"), and the header text's length (what follows is argument text)."""

    name: str
    valid: bool
    length: int


@dataclass(frozen=True, slots=True)
class DeepSeekState(ToolStreamState):
    call: CallState | None = None
    ext: JsonState | None = None


class DeepSeekToolParserBase(TableToolParser):
    args_end: ClassVar[str]  # the marker that ends a call's arguments
    state_class = DeepSeekState
    initial_phase = P.CONTENT
    call_phases = frozenset({P.HEADER, P.BAD, P.ARGS})

    def read_header(self, raw: str, eos: bool) -> Header | str:
        """Match one call header at the start of `raw` (the text after a call marker)."""
        raise NotImplementedError

    # -- actions ---------------------------------------------------------------------------

    def open_call(self, run: Run[DeepSeekToolParserBase], marker: str) -> None:
        run.open_call_raw(marker)
        run.call = CallState()

    def header_text(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        self._try_header(run, run.call.raw + text)

    def _try_header(self, run: Run[DeepSeekToolParserBase], raw: str) -> None:
        found = self.read_header(raw, run.eos)
        if found == NEED_MORE:
            run.call = run.call.replace(raw=raw)
        elif found == NO_MATCH:
            self._skip_call(run, raw)
        elif isinstance(found, Header) and found.valid:
            run.call = CallState()
            run.start_call(found.name)
            run.phase = P.ARGS
            run.args(raw[found.length :])
        elif isinstance(found, Header):
            run.call = run.call.replace(raw=raw)
            run.phase = P.BAD

    def _skip_call(self, run: Run[DeepSeekToolParserBase], raw: str) -> None:
        """findall resumes one character after the failed match: at the next call marker."""
        at = raw.find(CALL_BEGIN)
        run.keep_raw(raw if at == -1 else raw[:at])
        if at == -1:
            run.call = None
            run.phase = P.BLOCK
            return
        run.open_call_raw(CALL_BEGIN)
        run.call = CallState()
        self._try_header(run, raw[at + len(CALL_BEGIN) :])

    def bad_text(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        run.call = run.call.replace(raw=run.call.raw + text)

    def bad_end(self, run: Run[DeepSeekToolParserBase], marker: str) -> None:
        """The bad-type call matched: vLLM's batch raises and returns all output as content
        (the first call); after emitted calls only its own text becomes content."""
        run.reject_call(run.call.raw + marker, P.VERBATIM, P.BLOCK)

    def bad_eos(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        self._skip_call(run, run.call.raw)
        self.end_of_block(run, "")

    def header_eos(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        self._try_header(run, run.call.raw)
        if run.phase in (P.HEADER, P.BLOCK, P.BAD):
            run.call = None
            self.end_of_block(run, "")

    def args_text(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        run.args(text)

    def end_call(self, run: Run[DeepSeekToolParserBase], marker: str) -> None:
        run.call = None

    def end_of_block(self, run: Run[DeepSeekToolParserBase], text: str) -> None:
        """End of the output inside the block: text that was kept for a first call that
        never came is dropped, as upstream drops it."""
        run.pending = ""


def deepseek_table(parser: type[DeepSeekToolParserBase], *, after_block: bool) -> Table:
    """The phase table; `after_block`: the block end leads to AFTER (V3) or is dropped."""
    p = parser
    steps = {
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, CALLS_BEGIN): Step(drop, P.BLOCK),
        (P.CONTENT, EOS): Step(nothing),
        (P.BLOCK, TEXT): Step(drop),
        (P.BLOCK, CALL_BEGIN): Step(lambda run, m: run.parser.open_call(run, m), P.HEADER),
        (P.BLOCK, CALLS_END): Step(drop, P.AFTER if after_block else None),
        (P.BLOCK, EOS): Step(lambda run, t: run.parser.end_of_block(run, t)),
        (P.HEADER, TEXT): Step(lambda run, t: run.parser.header_text(run, t)),
        (P.HEADER, EOS): Step(lambda run, t: run.parser.header_eos(run, t)),
        (P.BAD, TEXT): Step(lambda run, t: run.parser.bad_text(run, t)),
        (P.BAD, p.args_end): Step(lambda run, m: run.parser.bad_end(run, m)),
        (P.BAD, EOS): Step(lambda run, t: run.parser.bad_eos(run, t)),
        (P.ARGS, TEXT): Step(lambda run, t: run.parser.args_text(run, t)),
        (P.ARGS, p.args_end): Step(lambda run, m: run.parser.end_call(run, m), P.BLOCK),
        (P.ARGS, EOS): Step(nothing),
        (P.AFTER, TEXT): Step(to_content),
        (P.AFTER, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    }
    phases = [P.CONTENT, P.BLOCK, P.HEADER, P.BAD, P.ARGS, P.VERBATIM]
    if after_block:
        phases.append(P.AFTER)
        steps[(P.AFTER, ANY_MARKER)] = Step(to_content)
    else:
        del steps[(P.AFTER, TEXT)], steps[(P.AFTER, EOS)]
    markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, p.args_end)
    return Table(phases, markers, steps)


def prefix_state(text: str, expected: str) -> str | None:
    """NEED_MORE if `text` is a proper prefix of `expected`, None if it starts with it,
    NO_MATCH otherwise."""
    if text.startswith(expected):
        return None
    return NEED_MORE if expected.startswith(text) else NO_MATCH
