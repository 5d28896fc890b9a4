"""FunctionGemma tool calls (vLLM name `functiongemma`, `FunctionGemmaToolParser`):

    <start_function_call>call:get_weather{city:<escape>Tokyo<escape>}<end_function_call>

vLLM 0.33's batch (regexes over the whole output), reproduced here:

* no `<start_function_call>` followed by `call:NAME{` (NAME a `\\w+` run) anywhere: the
  output is content, verbatim;
* otherwise the content is the text before the first `<start_function_call>`, stripped (None
  when empty), and text outside the calls is dropped;
* a call's arguments run from its `{` to the first `}<end_function_call>`, or to the end of
  the output; its members are every `KEY:<escape>VALUE<escape>` in them (KEY the `\\w+` run
  before the colon, VALUE up to the next `<escape>`); a VALUE that is JSON (`json.loads`)
  is that value, else the string; the object is `json.dumps`ed (no schema coercion).

Streaming: the content streams holding back trailing whitespace, and everything from the
first `<start_function_call>` is held until a call header is complete (then the call is sent,
id and name). A value streams as a string once it cannot be JSON (its first non-blank
character starts no JSON value, nor a prefix of true/false/null/NaN/Infinity); other values
are held to their end. State: the open header, key or held value, and a held `}`.

Divergences from vLLM's batch (stream == our batch; tests `test_functiongemma_*`): a streamed
value that never ends (the call or the output stops first) is kept, where vLLM drops the
member; a repeated key is written twice (JSON-equal to vLLM's object); whitespace at the very
start of the content, followed by other content and then calls, is kept (vLLM strips it; it
had streamed).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._args import json_string_body
from parsers.tools._base import json_dumps
from parsers.tools._machine import (
    EOS,
    TEXT,
    CallState,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
)

__all__ = ["FunctionGemmaToolParser"]

START, END, ESCAPE = "<start_function_call>", "<end_function_call>", "<escape>"
CALL_PREFIX = "call:"
_WORD = regex.compile(r"\w")
_JSON_STARTS = '{["-0123456789'
_LITERALS = ("true", "false", "null", "NaN", "Infinity")


class P(enum.StrEnum):
    CONTENT = "content"  # before the first START
    HEADER = "header"  # after a START: `call:NAME{` being read (ext.header)
    ARGS = "args"  # a call's arguments
    BETWEEN = "between"  # outside a call after the first START: dropped (held before a call)


class Mode(enum.StrEnum):
    KEY = "key"  # looking for `KEY:<escape>` (tail: a trailing word run, maybe a colon)
    VALUE = "value"  # inside a value, up to the next <escape>


@dataclass(frozen=True, slots=True)
class FgCall(CallState):
    """mode/tail: see Mode. key: the open value's key. decided: the value streams (stream)
    or is held (in value). brace: a `}` ending the text so far, not yet known not to close
    the arguments. members: a member was written."""

    mode: Mode = Mode.KEY
    tail: str = ""
    key: str = ""
    decided: bool = False
    stream: bool = False
    value: str = ""
    brace: bool = False
    members: bool = False


@dataclass(frozen=True, slots=True)
class FgExt(JsonState):
    """ws: trailing whitespace of the content. header: text after a START."""

    ws: str = ""
    header: str = ""


@dataclass(frozen=True, slots=True)
class FgState(ToolStreamState):
    call: FgCall | None = None
    ext: FgExt = FgExt()


def _is_word(ch: str) -> bool:
    return _WORD.match(ch) is not None


def _word_run_end(text: str, start: int) -> int:
    i = start
    while i < len(text) and _is_word(text[i]):
        i += 1
    return i


def _may_be_json(head: str) -> bool:
    """Whether a value starting `head` (blanks stripped) may still decode as JSON."""
    if not head or head[0] in _JSON_STARTS:
        return True
    return any(lit.startswith(head) or (head.startswith(lit) and not head[len(lit):].strip())
               for lit in _LITERALS)  # fmt: skip


class FunctionGemmaToolParser(TableToolParser):
    name: ClassVar[str] = "functiongemma"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = FgState
    call_phases = frozenset({P.ARGS})

    def check_ext(self, state: ToolStreamState) -> None:
        if not isinstance(state.ext, FgExt):
            raise StateError(f"{self.name}: bad state extension")
        if state.ext.header and state.phase != P.HEADER:
            raise StateError(f"{self.name}: a header outside a header")

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        call = state.call
        extra = len(call.tail) + len(call.key) + len(call.value) if isinstance(call, FgCall) else 0
        return super().held_chars(state) + extra + (len(ext.ws) + len(ext.header) if isinstance(ext, FgExt) else 0)


# -- content and headers -------------------------------------------------------------------


def _content(run: Run, text: str) -> None:
    body = text.rstrip()
    if not body:
        run.ext = run.ext.replace(ws=run.ext.ws + text)
        return
    run.content(run.ext.ws + body)
    run.ext = run.ext.replace(ws=text[len(body):])


def _open_header(run: Run, marker: str) -> None:
    run.keep_raw(marker)  # held while no call was sent (then the output may be content)
    run.ext = run.ext.replace(header="")


def _restart_header(run: Run, marker: str) -> None:
    run.keep_raw(run.ext.header + marker)
    run.ext = run.ext.replace(header="")


def _header_text(run: Run, text: str) -> str | None:
    header = run.ext.header + text
    if len(header) < len(CALL_PREFIX) or not header.startswith(CALL_PREFIX):
        if CALL_PREFIX.startswith(header):
            run.ext = run.ext.replace(header=header)
        else:
            _header_fails(run, header)
        return None
    end = _word_run_end(header, len(CALL_PREFIX))
    if end == len(header):
        run.ext = run.ext.replace(header=header)
        return None
    if header[end] != "{" or end == len(CALL_PREFIX):
        _header_fails(run, header)
        return None
    run.ext = run.ext.replace(header="", ws="")  # a call: the content is stripped
    run.call = FgCall()
    run.start_call(header[len(CALL_PREFIX) : end])
    run.phase = P.ARGS
    return header[end + 1 :] or None


def _header_fails(run: Run, header: str) -> None:
    run.keep_raw(header)
    run.ext = run.ext.replace(header="")
    run.phase = P.BETWEEN


def _header_marker(run: Run, marker: str) -> None:
    """END or ESCAPE where a header was expected: no call here."""
    _header_fails(run, run.ext.header + marker)


def _between(run: Run, text: str) -> None:
    run.keep_raw(text)  # dropped once a call was sent


def _end_of_output(run: Run, text: str) -> None:
    if run.phase == P.ARGS:
        _flush_brace(run)
        _close_call(run)
    elif run.n_calls == 0:  # no call: the whole output is content, verbatim
        run.content(run.ext.ws + run.pending + run.ext.header)
        run.pending = ""
    run.ext = FgExt()
    if run.phase != P.CONTENT:
        run.phase = P.BETWEEN


# -- arguments ------------------------------------------------------------------------------


def _args_text(run: Run, text: str) -> None:
    call: FgCall = run.call
    if call.brace:
        text = "}" + text
    brace = text.endswith("}")
    run.call = call.replace(brace=brace)
    _feed(run, text[:-1] if brace else text)


def _flush_brace(run: Run) -> None:
    call: FgCall = run.call
    if call.brace:
        run.call = call.replace(brace=False)
        _feed(run, "}")


def _args_marker(run: Run, marker: str) -> None:
    """START, or END without a `}` before it: argument text."""
    _flush_brace(run)
    _feed(run, marker)


def _args_end(run: Run, marker: str) -> None:
    if run.call.brace:  # `}<end_function_call>`: the arguments end
        _close_call(run)
        run.phase = P.BETWEEN
    else:
        _args_marker(run, marker)


def _escape(run: Run, marker: str) -> None:
    _flush_brace(run)
    call: FgCall = run.call
    if call.mode is Mode.VALUE:
        _close_value(run, call)
    elif len(call.tail) > 1 and call.tail.endswith(":"):
        run.call = call.replace(mode=Mode.VALUE, key=call.tail[:-1], tail="", decided=False,
                                stream=False, value="")  # fmt: skip
    else:
        run.call = call.replace(tail="")


def _feed(run: Run, text: str) -> None:
    if not text:
        return
    call: FgCall = run.call
    if call.mode is Mode.KEY:
        s = call.tail + text
        colon = s.endswith(":")
        body = s[:-1] if colon else s
        i = len(body)
        while i > 0 and _is_word(body[i - 1]):
            i -= 1
        run.call = call.replace(tail=body[i:] + (":" if colon else ""))
    elif call.decided and call.stream:
        run.args(json_string_body(text))
    elif call.decided:
        run.call = call.replace(value=call.value + text)
    else:
        value = call.value + text
        head = value.lstrip()
        if head and head[0] in _JSON_STARTS:
            run.call = call.replace(value=value, decided=True)
        elif _may_be_json(head):
            run.call = call.replace(value=value)
        else:
            run.args(_prefix(call) + '"' + json_string_body(value))
            run.call = call.replace(decided=True, stream=True, value="", members=True)


def _prefix(call: FgCall) -> str:
    return ("{" if not call.members else ", ") + json_dumps(call.key) + ": "


def _close_value(run: Run, call: FgCall) -> None:
    if call.stream:
        run.args('"')
    else:
        try:
            value: Any = json.loads(call.value)
        except (json.JSONDecodeError, RecursionError):
            value = call.value
        run.args(_prefix(call) + json_dumps(value))
    run.call = call.replace(mode=Mode.KEY, key="", tail="", decided=False, stream=False, value="",
                            members=True)  # fmt: skip


def _close_call(run: Run) -> None:
    call: FgCall = run.call
    if call.mode is Mode.VALUE and call.stream:  # documented: an open streamed value is kept
        run.args('"')
    run.args("}" if call.members else "{}")
    run.call = None


FunctionGemmaToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END, ESCAPE),
    steps={
        (P.CONTENT, TEXT): Step(_content),
        (P.CONTENT, START): Step(_open_header, P.HEADER),
        (P.CONTENT, EOS): Step(_end_of_output),
        (P.HEADER, TEXT): Step(_header_text),
        (P.HEADER, START): Step(_restart_header),
        (P.HEADER, END): Step(_header_marker),
        (P.HEADER, ESCAPE): Step(_header_marker),
        (P.HEADER, EOS): Step(_end_of_output),
        (P.ARGS, TEXT): Step(_args_text),
        (P.ARGS, START): Step(_args_marker),
        (P.ARGS, END): Step(_args_end),
        (P.ARGS, ESCAPE): Step(_escape),
        (P.ARGS, EOS): Step(_end_of_output),
        (P.BETWEEN, TEXT): Step(_between),
        (P.BETWEEN, START): Step(_open_header, P.HEADER),
        (P.BETWEEN, EOS): Step(_end_of_output),
    },
)
