"""Shared DeepSeek machinery: `<｜tool▁calls▁begin｜>` blocks of `<｜tool▁call▁begin｜>` calls.

vLLM 0.33's DeepSeek-V3 and V3.1 parsers differ only in the shape of one call and in what
counts as content; everything else (the block, the call search, the phase machine) is here.
A family supplies `match_call` (the call grammar) and `content_after_block`.

Batch semantics reproduced (both versions): content is the text before the first
`<｜tool▁calls▁begin｜>` (None when empty); calls are every match of the call regex, in
order; a call that does not match is skipped (not an error); arguments are the model's raw
text (no JSON canonicalisation, as upstream).

Streaming: content streams until the block marker (holding back a possible marker start);
inside the block each call is buffered from `<｜tool▁call▁begin｜>` and emitted whole once it
matches. Where the regex could still match later text, the text is kept (bounded by
MAX_TOOL_CALL_CHARS); a call that can no longer match is skipped exactly as `findall` would
skip it (resume the search one character later).

Divergence from vLLM's batch (documented by the families' tests, case
`call_marker_in_content`): call text in the content before the block is content here, as in
vLLM's stream (vLLM's batch regex also returns it as a call, though it streamed as content;
following it would hold every call seen in content until a block begins, growing the state
with the content); see also `content_after_block`.
"""

from __future__ import annotations

from typing import ClassVar

from parsers.tools._base import Phase, Run, StreamingToolParser, find_marker, marker_prefix_len

__all__ = ["DeepSeekToolParserBase", "CallMatch", "NEED_MORE", "NO_MATCH"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"

# match_call results besides a CallMatch.
NEED_MORE = "need_more"  # the call may still match once more text arrives
NO_MATCH = "no_match"  # the regex cannot match at this call marker


class CallMatch:
    """A matched call: its length in the buffer, its name and raw arguments, and whether
    vLLM accepts it (V3: the type before the separator must be "function")."""

    __slots__ = ("end", "name", "arguments", "valid")

    def __init__(self, end: int, name: str, arguments: str, valid: bool = True):
        self.end, self.name, self.arguments, self.valid = end, name, arguments, valid


class DeepSeekToolParserBase(StreamingToolParser):
    """Phases: CONTENT -> (calls begin) BLOCK <-> CALL; BLOCK -> (calls end) AFTER."""

    content_after_block: ClassVar[bool]  # V3: text after the block end is content

    def match_call(self, buf: str, eos: bool) -> CallMatch | str:
        """Match one call at the start of `buf` (which starts with CALL_BEGIN)."""
        raise NotImplementedError

    def _content(self, run: Run) -> bool:
        return self.hold_or_content(run, (CALLS_BEGIN,), Phase.BLOCK)

    def _block(self, run: Run) -> bool:
        markers = (CALL_BEGIN, CALLS_END) if self.content_after_block else (CALL_BEGIN,)
        at, marker = find_marker(run.buf, markers)
        if marker == CALL_BEGIN:
            run.drop(run.take(at))
            run.phase = Phase.CALL
            return True
        if marker == CALLS_END:
            run.drop(run.take(at + len(marker)))
            run.phase = Phase.AFTER
            return True
        keep = 0 if run.eos else marker_prefix_len(run.buf, markers)
        run.drop(run.take(len(run.buf) - keep))
        if run.eos:  # a block without (accepted) calls: its text is dropped, as upstream
            run.pending = ""
        return False

    def _call(self, run: Run) -> bool:
        found = self.match_call(run.buf, run.eos)
        if found == NEED_MORE:
            return False
        if isinstance(found, CallMatch):
            raw = run.take(found.end)
            if found.valid:
                run.emit_call(found.name, found.arguments)
            else:
                run.reject_call(raw, resume=Phase.BLOCK)
                return True
        else:  # findall resumes one character after a failed match position
            run.drop(run.take(1))
        run.phase = Phase.BLOCK
        return True

    def _after(self, run: Run) -> bool:
        return self.verbatim(run)

    handlers: ClassVar = {
        Phase.CONTENT: _content,
        Phase.BLOCK: _block,
        Phase.CALL: _call,
        Phase.AFTER: _after,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }


def prefix_state(buf: str, expected: str) -> str | None:
    """NEED_MORE if `buf` is a proper prefix of `expected`, None if it starts with it,
    NO_MATCH otherwise."""
    if buf.startswith(expected):
        return None
    return NEED_MORE if expected.startswith(buf) else NO_MATCH
