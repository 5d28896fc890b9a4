"""Apertus tool calls: `<|tools_prefix|>[{"get_weather": {"city": "Paris"}}, ...]<|tools_suffix|>`,
each call a one-member object whose key is the name and whose value is the arguments.

vLLM 0.33 (`ApertusToolParser`) batch semantics reproduced here:

* the block runs from the first `<|tools_prefix|>` to the next `<|tools_suffix|>` (or the end of
  the output); its text, left-stripped, starts with one JSON value (`raw_decode`): an array of
  calls, or one call object; each non-empty object item gives a call from its first member,
  the arguments `json.dumps`'d;
* the content is the stripped text before the block, the stripped text after the JSON value
  inside the block and the text after the block (`<|tools_suffix|>` markers removed,
  stripped), joined by newlines (None when empty); without a block the output is content.

Streaming: content streams holding its trailing blanks; the block's array punctuation is
checked as it comes; in each item the name (its key) is held until its `:`, then the call is
sent and its arguments stream as canonical JSON (`_json_args`). Until the first call is sent
the block's text is kept, so a block with no call leaves the whole output content.

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests):
* a block that yields no call: the output stays content (vLLM keeps the content pieces only);
* a block cut by the end of the output: the calls sent keep the arguments they have (vLLM
  completes the cut JSON with `partial_json_parser`); after a call was sent, JSON that breaks
  keeps the calls sent and the rest is content;
* a second member in a call object, or an item that is not an object, breaks the block (vLLM
  ignores the member, skips the item); blanks at the very start of the content, before other
  content and a block with calls, are kept.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import ClassVar

from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._json_args import DONE, MORE, JsonArgs, JsonArgsState
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    MAX_NAME_CHARS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    nothing,
    to_content,
)

__all__ = ["ApertusToolParser", "TOOLS_PREFIX", "TOOLS_SUFFIX"]

TOOLS_PREFIX = "<|tools_prefix|>"
TOOLS_SUFFIX = "<|tools_suffix|>"
_BLANK = " \t\n\r"


class P(enum.StrEnum):
    CONTENT = "content"
    BLOCK = "block"  # the block's JSON (ext.stage says where)
    TAIL = "tail"  # after the JSON value, inside the block: a content piece
    AFTER = "after"  # after the block: a content piece
    VERBATIM = "verbatim"  # no call: everything is content


class Stage(enum.StrEnum):
    LEAD = "lead"  # before the value: `[` (an array) or `{` (one call)
    FIRST = "first"  # after `[`: an item or `]`
    NEXT = "next"  # after `,`: an item
    SEP = "sep"  # after an item: `,` or `]`
    KEY = "key"  # an item's key (the name), raw in ext.key
    COLON = "colon"  # after the key: `:`
    VALUE = "value"  # the arguments (call.args)
    CLOSE = "close"  # after the arguments: `}`
    EMPTY = "empty"  # after `{`: the key or `}` (an empty object, skipped)


@dataclass(frozen=True, slots=True)
class ApertusExt(JsonState):
    """stage: where in the block. array: the value is an array (else one call object). key:
    the raw key being read. ws: blanks held at the end of the content so far. said: a
    content piece was sent. piece: the current piece has sent text."""

    stage: Stage = Stage.LEAD
    array: bool = False
    key: str = ""
    ws: str = ""
    said: bool = False
    piece: bool = False


@dataclass(frozen=True, slots=True)
class ApertusCall(CallState):
    args: JsonArgsState | None = None


@dataclass(frozen=True, slots=True)
class ApertusState(ToolStreamState):
    call: ApertusCall | None = None
    ext: ApertusExt = ApertusExt()


_ARGS = JsonArgs()


class ApertusToolParser(TableToolParser):
    name: ClassVar[str] = "apertus"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = ApertusState

    def check_ext(self, state: ToolStreamState) -> None:
        ext, call = state.ext, state.call
        if not isinstance(ext, ApertusExt) or len(ext.key) > MAX_NAME_CHARS + 2:
            raise StateError(f"{self.name}: bad block state")
        if (call is not None) != (state.phase == P.BLOCK and ext.stage is Stage.VALUE):
            raise StateError(f"{self.name}: a call outside an item's arguments")

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        held = len(ext.key) + len(ext.ws) if isinstance(ext, ApertusExt) else 0
        call = state.call
        args = call.args if isinstance(call, ApertusCall) else None
        return held + (args.held_chars() if args is not None else 0)


# -- content pieces ------------------------------------------------------------------------------


def _piece_text(run: Run[ApertusToolParser], text: str) -> None:
    """A content piece: leading blanks dropped, trailing ones held, pieces joined by "\\n"."""
    ext: ApertusExt = run.ext
    buf = ext.ws + text
    if not ext.piece:
        buf = buf.lstrip(_BLANK)
    body = buf.rstrip(_BLANK)
    if body:
        run.content(("\n" if ext.said and not ext.piece else "") + body)
        ext = ext.replace(said=True, piece=True)
    run.ext = ext.replace(ws=buf[len(body):])


def _content_text(run: Run[ApertusToolParser], text: str) -> None:
    """Before the block, blanks at the start are held too (documented divergence: once other
    text came they stay)."""
    ext: ApertusExt = run.ext
    buf = ext.ws + text
    body = buf.rstrip(_BLANK)
    if body:
        run.content(body)
        ext = ext.replace(said=True, piece=True)
    run.ext = ext.replace(ws=buf[len(body):])


def _content_end(run: Run[ApertusToolParser], text: str) -> None:
    run.content(run.ext.ws)
    run.ext = run.ext.replace(ws="")


def _new_piece(run: Run[ApertusToolParser]) -> None:
    run.ext = run.ext.replace(ws="", piece=False)


def _drop_marker(run: Run[ApertusToolParser], marker: str) -> None:
    """vLLM removes every <|tools_suffix|> after the block."""


def _piece_end(run: Run[ApertusToolParser], text: str) -> None:
    run.ext = run.ext.replace(ws="")


# -- the block -------------------------------------------------------------------------------------


def _open_block(run: Run[ApertusToolParser], marker: str) -> None:
    run.open_call_raw(run.ext.ws + marker)
    run.ext = run.ext.replace(ws="", stage=Stage.LEAD)


def _bad(run: Run[ApertusToolParser], text: str) -> None:
    """The block is no call list: before a call was sent the output is content; after, the
    rest is (documented divergence)."""
    run.content(run.pending + run.ext.key + text)
    run.pending = ""
    run.call = None
    run.ext = run.ext.replace(key="", stage=Stage.LEAD)
    run.phase = P.VERBATIM


def _block(run: Run[ApertusToolParser], text: str) -> str | None:
    ext: ApertusExt = run.ext
    stage = ext.stage
    if stage is Stage.VALUE:
        return _value(run, text)
    if stage is Stage.KEY:
        return _key(run, text)
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in _BLANK:
            i += 1
            continue
        if stage is Stage.LEAD and ch in "[{":
            run.keep_raw(text[: i + 1])
            run.ext = ext.replace(stage=Stage.FIRST if ch == "[" else Stage.EMPTY, array=ch == "[")
            return text[i + 1:] or None
        if stage in (Stage.FIRST, Stage.NEXT) and ch == "{":
            run.keep_raw(text[: i + 1])
            run.ext = ext.replace(stage=Stage.EMPTY)
            return text[i + 1:] or None
        if stage is Stage.EMPTY and ch == '"':
            run.keep_raw(text[:i])
            run.ext = ext.replace(stage=Stage.KEY, key="")
            return _key(run, text[i:])
        if stage is Stage.EMPTY and ch == "}" or stage is Stage.CLOSE and ch == "}":
            run.keep_raw(text[: i + 1])
            run.ext = ext.replace(stage=Stage.SEP)
            return _value_done(run, text[i + 1:])
        if stage is Stage.COLON and ch == ":":
            run.keep_raw(text[: i + 1])
            _start(run)
            return text[i + 1:] or None
        if stage is Stage.SEP and ext.array and ch in ",]":
            run.keep_raw(text[: i + 1])
            if ch == ",":
                run.ext = ext.replace(stage=Stage.NEXT)
                return text[i + 1:] or None
            return _value_end(run, text[i + 1:])
        if stage is Stage.FIRST and ch == "]":
            run.keep_raw(text[: i + 1])
            return _value_end(run, text[i + 1:])
        _bad(run, text)
        return None
    run.keep_raw(text)
    return None


def _key(run: Run[ApertusToolParser], text: str) -> str | None:
    """The key, raw from its opening quote, until its closing one."""
    key = run.ext.key + text
    i, escaped = 1, False
    while i < len(key):
        ch = key[i]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            break
        i += 1
    else:
        if len(key) > MAX_NAME_CHARS:  # no name is this long
            run.ext = run.ext.replace(key=key)
            _bad(run, "")
            return None
        run.ext = run.ext.replace(key=key)
        return None
    try:
        name = json.loads(key[: i + 1])
    except ValueError:
        run.ext = run.ext.replace(key="")
        _bad(run, key)
        return None
    run.keep_raw(key[: i + 1])
    run.ext = run.ext.replace(key=name, stage=Stage.COLON)
    return key[i + 1:] or None


def _start(run: Run[ApertusToolParser]) -> None:
    name = run.ext.key
    run.call = ApertusCall(name=name, args=_ARGS.start())
    run.ext = run.ext.replace(key="", stage=Stage.VALUE)
    run.start_call(name)


def _value(run: Run[ApertusToolParser], text: str) -> str | None:
    call: ApertusCall = run.call
    assert call.args is not None
    args, out, rest = _ARGS.feed(call.args, text)
    run.args(out)
    if args.status == MORE:
        run.call = call.replace(args=args)
        return None
    run.call = None
    if args.status != DONE:  # broken arguments: their text, then the rest is content
        run.args(_ARGS.held_raw(args))
        _bad(run, rest or "")
        return None
    run.ext = run.ext.replace(stage=Stage.CLOSE)
    return rest or None


def _value_done(run: Run[ApertusToolParser], rest: str) -> str | None:
    """An item closed: in an array the next separator follows, else the value ended."""
    if run.ext.array:
        return rest or None
    return _value_end(run, rest)


def _value_end(run: Run[ApertusToolParser], rest: str) -> str | None:
    if run.n_calls == 0:  # no call: the whole output is content
        _bad(run, rest)
        return None
    run.phase = P.TAIL
    _new_piece(run)
    return rest or None


def _block_cut(run: Run[ApertusToolParser], marker: str) -> None:
    """The block ends inside its JSON value."""
    if run.call is not None:
        args, out = _ARGS.end(run.call.args)
        run.args(out + ("" if args.status == DONE else _ARGS.held_raw(args)))
        run.call = None
    if run.n_calls == 0:
        _bad(run, marker)
        return
    run.ext = run.ext.replace(key="", stage=Stage.LEAD)
    run.phase = P.AFTER
    _new_piece(run)


def _block_eos(run: Run[ApertusToolParser], text: str) -> None:
    _block_cut(run, "")


def _tail_close(run: Run[ApertusToolParser], marker: str) -> None:
    run.phase = P.AFTER
    _new_piece(run)


ApertusToolParser.table = Table(
    phases=tuple(P),
    markers=(TOOLS_PREFIX, TOOLS_SUFFIX),
    steps={
        (P.CONTENT, TEXT): Step(_content_text),
        (P.CONTENT, TOOLS_PREFIX): Step(_open_block, P.BLOCK),
        (P.CONTENT, EOS): Step(_content_end),
        (P.BLOCK, TEXT): Step(_block),
        (P.BLOCK, TOOLS_SUFFIX): Step(_block_cut),
        (P.BLOCK, EOS): Step(_block_eos),
        (P.TAIL, TEXT): Step(_piece_text),
        (P.TAIL, TOOLS_SUFFIX): Step(_tail_close),
        (P.TAIL, EOS): Step(_piece_end),
        (P.AFTER, TEXT): Step(_piece_text),
        (P.AFTER, TOOLS_SUFFIX): Step(_drop_marker),
        (P.AFTER, ANY_MARKER): Step(_piece_text),
        (P.AFTER, EOS): Step(_piece_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
