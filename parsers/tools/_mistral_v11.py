"""Mistral tool calls on v11+ tokenizers: `[TOOL_CALLS]name[ARGS]{...}`, one marker per call.

vLLM 0.33 takes this path whenever the tokenizer has `[ARGS]` (`MistralParser`, config
`vllm/parser/mistral.py`, run on its parser engine). Batch semantics (`extract_tool_calls`,
text only) reproduced here:

* the text is lexed left to right, longest literal first, into `[TOOL_CALLS]`, `[ARGS]`, `{`,
  the reasoning markers of the tokenizer's encoding (`[THINK]`/`[/THINK]` when the vocabulary
  has `[THINK]`, `<think>`/`</think>` for grammar-capable mistral-common tokenizers, none
  otherwise) and the tokenizer's other special tokens, which are dropped wherever they are;
* content: `[TOOL_CALLS]` opens a call; `[THINK]` opens a reasoning span whose text is not
  content (closed by `[/THINK]`, or by `[TOOL_CALLS]`, which opens a call); a stray `[/THINK]`
  is dropped; `[ARGS]` and `{` are text. With `skip_reasoning_parsing` (what vLLM's serving
  layer sets when no reasoning parser is configured) the reasoning markers are plain text;
* a call's name is the text up to `[ARGS]` (dropped) or `{` (kept: it opens the arguments);
  every other literal, `[TOOL_CALLS]` included, is name text. Its arguments run to the next
  `[TOOL_CALLS]`, which opens the next call, or to the end of the output. There is no way
  back to content;
* a call with an empty name and empty arguments is dropped; any other is returned, an empty
  name included. Its name is stripped; its arguments are stripped, "{}" when empty, else the
  first JSON value in them (`raw_decode`, its exact text; trailing text is dropped) or, when
  they do not start with one, the stripped text itself; then values are coerced to the
  tool's schema types (`_engine.fix_arg_types`);
* content is the content text before the first call marker: stripped when a call is
  returned, None when only whitespace and a marker was seen, verbatim otherwise.

Streaming: content streams as it arrives, holding back a possible literal start and (as
`_engine.ContentHold`) trailing whitespace. A call's text is buffered: CALL reads the name
(`buf[:scan]` is the name so far, special tokens already removed), ARGS the arguments
(`head` holds the name; `buf[:scan]` the arguments so far, scanned for the end of a JSON
object or array with `depth` / `in_string` / `escaped`). A call is emitted whole as soon as
its arguments are a complete JSON value, then BETWEEN drops text up to the next marker;
arguments that do not start with `{` or `[`, or whose balanced text is not JSON, go to
RAW_ARGS and are decided at the next marker or the end of the output. REASONING is a
reasoning span inside the content.

Divergence from vLLM's batch (test `test_mistral_v11_divergence_leading_whitespace`): as
`_engine` documents, leading whitespace followed by other content and then a returned call is
kept (vLLM strips it; it streamed before the call could be known).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from parsers.tools._base import Phase, Run, is_json, json_raw_decode
from parsers.tools._legacy_engine import ContentHold, fix_arg_types

if TYPE_CHECKING:  # the handlers run on MistralToolParser, which imports this module
    from parsers.tools.mistral import MistralToolParser

__all__ = ["V11_HANDLERS", "ReasoningEncoding", "V11Format", "v11_arguments"]

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
OPEN_BRACE = "{"
THINK_MARKERS = {"special_token": ("[THINK]", "[/THINK]"), "text": ("<think>", "</think>")}

ReasoningEncoding = Literal["special_token", "text", "none"]


class LiteralLexer:
    """vLLM's parser-engine lexer in text mode: at each position the longest literal that
    matches wins; a tail that may still grow into a literal is held back."""

    def __init__(self, literals: Iterable[str]) -> None:
        ordered = sorted({lit for lit in literals if lit}, key=lambda lit: (-len(lit), lit))
        self._pattern = re.compile("|".join(re.escape(lit) for lit in ordered))
        self._prefixes = frozenset(lit[:i] for lit in ordered for i in range(1, len(lit)))
        self._max_len = max(len(lit) for lit in ordered)

    def next(self, buf: str, start: int, eos: bool) -> tuple[int, str | None]:
        """(offset, literal) of the next literal at or after `start`; (offset, None) when
        there is none before `offset`, where a possible literal start is held back."""
        hold = len(buf) if eos else self._hold(buf, start)
        found = self._pattern.search(buf, start)
        if found is not None and found.start() < hold:
            return found.start(), found.group()
        return hold, None

    def _hold(self, buf: str, start: int) -> int:
        for at in range(max(start, len(buf) - self._max_len + 1), len(buf)):
            if buf[at:] in self._prefixes:
                return at
        return len(buf)


@dataclass(frozen=True)
class V11Format:
    """What the v11 machine needs from its parser: literals and their meaning, and tools."""

    lexer: LiteralLexer
    think_start: str | None  # None: reasoning markers are plain text
    think_end: str | None
    drops: frozenset[str]
    tools: Sequence[Mapping[str, Any]]

    @classmethod
    def build(
        cls,
        encoding: ReasoningEncoding,
        special_tokens: Collection[str],
        tools: Sequence[Mapping[str, Any]],
        *,
        skip_reasoning_parsing: bool,
    ) -> V11Format:
        think = THINK_MARKERS.get(encoding, ())
        configured = {TOOL_CALLS, ARGS, OPEN_BRACE, *think}
        drops = frozenset(special_tokens) - configured
        start, end = (None, None) if skip_reasoning_parsing or not think else think
        return cls(LiteralLexer(configured | drops), start, end, drops, tools)


def v11_arguments(raw: str) -> str:
    """vLLM's `_extract_args_json`: "{}" when blank, else the first JSON value's text, else
    the stripped text."""
    stripped = raw.strip()
    if not stripped:
        return "{}"
    value, end = json_raw_decode(stripped)
    return stripped[:end] if is_json(value) else stripped


# -- phase handlers (`parser.v11` is the parser's V11Format) ----------------------------------


def _content(parser: MistralToolParser, run: Run) -> bool:
    fmt: V11Format = parser.v11
    while True:
        at, literal = fmt.lexer.next(run.buf, 0, run.eos)
        ContentHold.before_event(run, run.take(at))
        if literal is None:
            if run.eos:
                ContentHold.end_before_event(run)
            return False
        run.take(len(literal))
        if literal == TOOL_CALLS:
            _open_call(run)
            return True
        if literal == fmt.think_start:
            run.phase = Phase.REASONING
            return True
        if literal != fmt.think_end and literal not in fmt.drops:
            ContentHold.before_event(run, literal)


def _reasoning(parser: MistralToolParser, run: Run) -> bool:
    fmt: V11Format = parser.v11
    at, literal = fmt.lexer.next(run.buf, 0, run.eos)
    run.take(at)  # reasoning text is not content
    if literal is None:
        if run.eos:
            ContentHold.end_before_event(run)
        return False
    run.take(len(literal))
    if literal == TOOL_CALLS:
        _open_call(run)
    elif literal == fmt.think_end:
        run.phase = Phase.CONTENT
    return True


def _name(parser: MistralToolParser, run: Run) -> bool:
    fmt: V11Format = parser.v11
    while True:
        at, literal = fmt.lexer.next(run.buf, run.scan, run.eos)
        if literal is None:
            run.scan = at
            if not run.eos:
                return False
            run.head = run.take(len(run.buf))
            _close_call(parser, run, "")
            ContentHold.end_after_event(run)
            run.phase = Phase.BETWEEN
            return False
        if literal in fmt.drops:
            run.buf = run.buf[:at] + run.buf[at + len(literal) :]
            run.scan = at
        elif literal in (ARGS, OPEN_BRACE):
            run.head = run.take(at)
            if literal == ARGS:
                run.take(len(ARGS))  # the `{` stays: it is the arguments' first character
            run.phase = Phase.ARGS
            run.depth, run.in_string, run.escaped = 0, False, False
            return True
        else:  # `[TOOL_CALLS]` and reasoning markers are name text here
            run.scan = at + len(literal)


def _close_at_end(parser: MistralToolParser, run: Run) -> None:
    """End of output inside a call's arguments: the rest of the buffer closes the call."""
    _close_call(parser, run, run.take(len(run.buf)))
    ContentHold.end_after_event(run)
    run.phase = Phase.BETWEEN


def _close_before_next_call(parser: MistralToolParser, run: Run, at: int) -> None:
    """A `[TOOL_CALLS]` at `at` ends the current call's arguments and opens the next call."""
    _close_call(parser, run, run.take(at))
    run.take(len(TOOL_CALLS))
    _open_call(run)


def _args(parser: MistralToolParser, run: Run) -> bool:
    fmt: V11Format = parser.v11
    while True:
        at, literal = fmt.lexer.next(run.buf, run.scan, run.eos)
        if at > run.scan and _scan_json(parser, run, at):
            return True
        if literal is None:
            if run.eos:
                _close_at_end(parser, run)
            return False
        if literal == TOOL_CALLS:
            _close_before_next_call(parser, run, at)
            return True
        if literal in fmt.drops:
            run.buf = run.buf[:at] + run.buf[at + len(literal) :]
        elif _scan_json(parser, run, at + len(literal)):  # a literal that is argument text
            return True


def _raw_args(parser: MistralToolParser, run: Run) -> bool:
    fmt: V11Format = parser.v11
    while True:
        at, literal = fmt.lexer.next(run.buf, run.scan, run.eos)
        if literal is None:
            run.scan = at
            if run.eos:
                _close_at_end(parser, run)
            return False
        if literal == TOOL_CALLS:
            _close_before_next_call(parser, run, at)
            return True
        if literal in fmt.drops:
            run.buf = run.buf[:at] + run.buf[at + len(literal) :]
            run.scan = at
        else:
            run.scan = at + len(literal)


def _between(parser: MistralToolParser, run: Run) -> bool:
    """After a call whose JSON arguments are complete: its trailing text is dropped."""
    at, literal = parser.v11.lexer.next(run.buf, 0, run.eos)
    run.take(at)
    if literal is None:
        if run.eos:
            ContentHold.end_after_event(run)
        return False
    run.take(len(literal))
    if literal == TOOL_CALLS:
        _open_call(run)
    return True


V11_HANDLERS = {
    Phase.CONTENT: _content,
    Phase.REASONING: _reasoning,
    Phase.CALL: _name,
    Phase.ARGS: _args,
    Phase.RAW_ARGS: _raw_args,
    Phase.BETWEEN: _between,
}


# -- calls -----------------------------------------------------------------------------------


def _open_call(run: Run) -> None:
    run.phase = Phase.CALL
    run.head = ""
    run.scan = 0


def _close_call(parser: MistralToolParser, run: Run, raw_args: str) -> None:
    """The call whose name is `run.head`, with arguments `raw_args` (specials removed)."""
    raw_name, run.head = run.head, ""
    if not raw_name and not raw_args:
        return  # vLLM skips a slot with neither name nor arguments
    name = raw_name.strip()
    run.emit_call(name, fix_arg_types(v11_arguments(raw_args), name, parser.v11.tools))


def _scan_json(parser: MistralToolParser, run: Run, limit: int) -> bool:
    """Scan `buf[scan:limit]` (argument text) for the end of the leading JSON value.

    Returns True when the phase changed: the value completed (the call is emitted and the
    text up to `limit` dropped) or the arguments are not JSON-led (RAW_ARGS)."""
    buf = run.buf
    depth, in_string, escaped = run.depth, run.in_string, run.escaped
    for i in range(run.scan, limit):
        c = buf[i]
        if depth == 0:  # only whitespace so far
            if c.isspace():
                continue
            if c not in "{[":
                return _to_raw(run, limit)
            depth = 1
        elif in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return _json_end(parser, run, i + 1, limit)
    run.depth, run.in_string, run.escaped = depth, in_string, escaped
    run.scan = limit
    return False


def _json_end(parser: MistralToolParser, run: Run, end: int, limit: int) -> bool:
    value = run.buf[:end].lstrip()
    decoded, length = json_raw_decode(value)
    if not (is_json(decoded) and length == len(value)):
        return _to_raw(run, limit)  # no extension of a malformed value can decode
    run.take(limit)
    run.depth, run.in_string, run.escaped = 0, False, False
    raw_name, run.head = run.head, ""
    name = raw_name.strip()
    run.emit_call(name, fix_arg_types(value, name, parser.v11.tools))
    run.phase = Phase.BETWEEN
    return True


def _to_raw(run: Run, limit: int) -> bool:
    run.depth, run.in_string, run.escaped = 0, False, False
    run.scan = limit
    run.phase = Phase.RAW_ARGS
    return True
