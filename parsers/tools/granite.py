"""Granite 3.0 / 3.1 tool calls (vLLM name `granite`): a marker, then a JSON array of calls:

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]    (3.0)
    <tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]      (3.1)

vLLM 0.33 runs this format on its parser engine (`GraniteEngineToolParser`, config
`vllm/parser/granite.py`, the engine's `tool_call_body_array` mode). Batch semantics
reproduced here (`extract_tool_calls`):

* content: either marker opens a tool region; anything else is content;
* in the region, blanks (space, tab, CR, LF) are skipped; the region must start with `[`;
  after it `,` is skipped, `{` opens one call, `]` ends the region; any other character
  ends the region and is content (with the rest of the literal it starts, if any), so the
  marker and the skipped text are dropped;
* a call is the text from `{` to the `}` that brings the bracket depth (`{[` up, `}]` down,
  never below 0, outside strings) back to 0, or to the end of the output;
* its name is the first `"name": "..."` in that text (stripped), else the `name` of the text
  decoded as a JSON object; a call without a (string) name is dropped;
* its arguments are the raw text of the top-level `"arguments"` object member (verbatim, an
  unterminated object included; "{}" without the member); a member that is not an object
  falls back to the decoded object's `arguments` (else `parameters`, else the object without
  `name`; a string verbatim), or the raw text when it is not JSON; then values are coerced to
  the tool's schema types (`_engine.fix_arg_types`);
* content follows the engine rules of `parsers.tools._legacy_engine` (the first tool event is a
  call's `{`, not the marker).

Streaming: content streams as it arrives (a possible marker start and trailing whitespace
held back); each call is buffered from `{` and emitted whole when it closes or at the end of
the output. Phases: CONTENT -> (marker) LEAD, the region before its first call (`buf` keeps
"[" once seen, so the region costs no memory) -> CALL -> BETWEEN (inside the array) -> AFTER
(content after the first call; a marker there leads to BLOCK, the region before its `[`).
`depth` / `in_string` / `escaped` resume the call's bracket scan; `flag` / `pending` as in
`_engine`.

Divergences from vLLM's batch (tests `test_granite_divergence_*`): as `_engine` documents,
leading whitespace followed by other content and then a returned call is kept. Granite has no
tokenizer package installed here; the tests tokenize with the Qwen3 tokenizer (both markers
are plain text to it, as `<tool_call>` is to Granite 3.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from parsers.tools._base import (
    Phase,
    Run,
    StreamingToolParser,
    find_marker,
    marker_prefix_len,
)
from parsers.tools._legacy_engine import (
    ContentHold,
    fix_arg_types,
    name_and_args_from_json,
    name_in_args,
)

__all__ = ["GraniteToolParser", "arguments_member"]

MARKERS = ("<|tool_call|>", "<tool_call>")
BLANKS = " \t\r\n"
_JSON_BLANKS = " \t\r\n"


def _object_end(raw: str, start: int) -> int | None:
    """End (exclusive) of the `{...}` object at `raw[start]`, counting braces only."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(raw)):
        c = raw[i]
        if escaped:
            escaped = False
        elif in_string:
            escaped, in_string = c == "\\", c != '"'
        elif c == '"':
            in_string = True
        elif c in "{}":
            depth += 1 if c == "{" else -1
            if depth == 0:
                return i + 1
    return None


def arguments_member(raw: str, key: str = "arguments") -> str | None:
    """Raw text of the top-level object member `key` of a (maybe unterminated) object.

    None when the member has no value yet; ValueError when its value is not an object."""
    depth, in_string, escaped = 0, False, False
    start, last_string = -1, None
    for i, c in enumerate(raw):
        if escaped:
            escaped = False
        elif in_string:
            if c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 1:
                    last_string = raw[start + 1 : i]
        elif c == '"':
            in_string, start = True, i
        elif c == ":" and depth == 1 and last_string == key:
            at = i + 1
            while at < len(raw) and raw[at] in _JSON_BLANKS:
                at += 1
            if at >= len(raw):
                return None
            if raw[at] != "{":
                raise ValueError(f"member {key!r} is not an object")
            end = _object_end(raw, at)
            return raw[at:] if end is None else raw[at:end]
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
    return None


class GraniteToolParser(StreamingToolParser):
    """See the module docstring for the phases."""

    name: ClassVar[str] = "granite"

    # -- content ---------------------------------------------------------------------------

    def _content(self, run: Run) -> bool:
        at, marker = find_marker(run.buf, MARKERS)
        if marker is None:
            keep = 0 if run.eos else marker_prefix_len(run.buf, MARKERS)
            ContentHold.before_event(run, run.take(len(run.buf) - keep))
            if run.eos:
                ContentHold.end_before_event(run)
            return False
        ContentHold.before_event(run, run.take(at))
        run.take(len(marker))
        run.phase = Phase.LEAD
        return True

    def _after(self, run: Run) -> bool:
        at, marker = find_marker(run.buf, MARKERS)
        if marker is None:
            keep = 0 if run.eos else marker_prefix_len(run.buf, MARKERS)
            ContentHold.after_event(run, run.take(len(run.buf) - keep))
            if run.eos:
                ContentHold.end_after_event(run)
            return False
        ContentHold.after_event(run, run.take(at))
        run.take(len(marker))
        run.phase = Phase.BLOCK
        return True

    # -- the array region ------------------------------------------------------------------

    def _lead(self, run: Run) -> bool:
        """Region before its first call: `buf` is "[" (once seen) + unread text."""
        opened = run.buf.startswith("[") and run.scan == 1
        i = run.scan
        while i < len(run.buf):
            c = run.buf[i]
            if c in BLANKS or (opened and c == ","):
                i += 1
            elif not opened and c == "[":
                opened, i = True, i + 1
            elif opened and c == "{":  # the first call: the first tool event
                run.take(i)
                JsonScan.reset(run)
                run.phase = Phase.CALL
                return True
            elif opened and c == "]":
                run.take(i + 1)
                run.phase = Phase.CONTENT
                return True
            else:
                bailed = self._bail(run, i, ContentHold.before_event, Phase.CONTENT)
                if bailed is not None:
                    return bailed
                break
        if run.eos:  # an unfinished region is dropped
            run.take(len(run.buf))
            run.phase = Phase.CONTENT
            return True
        kept = "[" if opened else ""
        run.buf, run.scan = kept + run.buf[i:], len(kept)
        return False

    def _block(self, run: Run) -> bool:
        """Region after a marker, before its `[`, once a call slot exists."""
        skip = len(run.buf) - len(run.buf.lstrip(BLANKS))
        run.take(skip)
        if not run.buf:
            if run.eos:
                run.phase = Phase.AFTER
                return True
            return False
        if run.buf[0] == "[":
            run.take(1)
            run.phase = Phase.BETWEEN
            return True
        return bool(self._bail(run, 0, ContentHold.after_event, Phase.AFTER))

    def _between(self, run: Run) -> bool:
        """Inside the array, between calls."""
        skip = len(run.buf) - len(run.buf.lstrip(BLANKS + ","))
        run.take(skip)
        if not run.buf:
            if run.eos:
                run.phase = Phase.AFTER
                return True
            return False
        c = run.buf[0]
        if c == "{":
            JsonScan.reset(run)
            run.phase = Phase.CALL
            return True
        if c == "]":
            run.take(1)
            run.phase = Phase.AFTER
            return True
        return bool(self._bail(run, 0, ContentHold.after_event, Phase.AFTER))

    def _bail(
        self, run: Run, at: int, sink: Callable[[Run, str], None], resume: Phase
    ) -> bool | None:
        """A character the array grammar does not allow at `at`: the region ends there, and
        that character (with the rest of the marker literal it starts) is content. None: the
        text from `at` may still become a marker literal (content whole), wait for more."""
        rest = run.buf[at:]
        literal = next((m for m in MARKERS if rest.startswith(m)), None)
        if literal is None and not run.eos and marker_prefix_len(rest, MARKERS) == len(rest):
            return None
        run.take(at)
        sink(run, run.take(len(literal) if literal else 1))
        run.phase = resume
        return True

    # -- calls -----------------------------------------------------------------------------

    def _call(self, run: Run) -> bool:
        end = JsonScan.element_end(run)
        truncated = end is None
        if truncated:
            if not run.eos:
                return False
            end = len(run.buf)
            JsonScan.reset(run)
        call = self._call_of(run.take(end))
        if call is not None:
            run.emit_call(*call)
        run.phase = Phase.AFTER if truncated else Phase.BETWEEN
        return True

    def _call_of(self, raw: str) -> tuple[str, str] | None:
        """(name, arguments) as vLLM's engine builds them, or None for a dropped call."""
        name: object = name_in_args(raw).strip()
        if not name:
            name, arguments = name_and_args_from_json(raw)
        else:
            try:
                member = arguments_member(raw)
            except ValueError:
                member = name_and_args_from_json(raw)[1]
            arguments = "{}" if member is None else member
        if not isinstance(name, str) or not name:
            return None
        return name, fix_arg_types(arguments, name, self.tools)

    handlers: ClassVar = {
        Phase.CONTENT: _content,
        Phase.LEAD: _lead,
        Phase.CALL: _call,
        Phase.BETWEEN: _between,
        Phase.BLOCK: _block,
        Phase.AFTER: _after,
    }


class JsonScan:
    """Resumable scan for the end of a call object starting at `run.buf[0]` (`{`), as the
    engine counts it: `{[` up, `}]` down (never below 0) outside strings; the call ends at a
    `}` that leaves depth 0."""

    @staticmethod
    def element_end(run: Run) -> int | None:
        buf = run.buf
        i, depth, in_string, escaped = run.scan, run.depth, run.in_string, run.escaped
        while i < len(buf):
            c = buf[i]
            i += 1
            if escaped:
                escaped = False
            elif in_string:
                if c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth = max(depth - 1, 0)
                if c == "}" and depth == 0:
                    JsonScan.reset(run)
                    return i
        run.scan, run.depth, run.in_string, run.escaped = i, depth, in_string, escaped
        return None

    @staticmethod
    def reset(run: Run) -> None:
        run.scan, run.depth, run.in_string, run.escaped = 0, 0, False, False
