"""ERNIE 4.5 tool calls: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`.

vLLM 0.33 (`Ernie45ToolParser`) batch semantics reproduced here:

* without `<tool_call>` anywhere the output is content, verbatim;
* a call is a `<tool_call>`, blanks, a `{...}` JSON object, blanks, `</tool_call>`; its name is
  `name` (missing: ""; not a string: an error), its arguments `json.dumps(arguments)` ("{}"
  when missing);
* a `<tool_call>` whose body is not shaped so (no braces, or cut by the end of the output) is
  skipped; a braced body that is not JSON makes the whole output content;
* content is the text before the first `<tool_call>` with its trailing newlines stripped;
  text between and after calls is dropped.

Streaming is Hermes' (`_json_calls`): a call is sent once its body shows its name and then the
start of its arguments, and its arguments stream as canonical JSON. The newlines before a
`<tool_call>` are held (a count) until other text shows they are content.

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests):
* `<tool_call>` present but no call results: the output stays content verbatim (vLLM keeps
  only the text before the first `<tool_call>`; its stream drops the rest too): a parser
  that finds no call returns its content untouched in our pipeline, so nothing is lost;
* Hermes' divergences for calls that break after they were sent (`hermes_parser`): a call cut
  by the end of the output or by its end marker keeps its arguments, a broken call after an
  emitted one is content, duplicate members count first;
* a braced body with text after its object: skipped (vLLM's lazy regex may run on into the
  next call and then fail on the joined text, making everything content).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import StateError
from parsers._state import JsonState
from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._engine import WS
from parsers.tools._json_calls import Body, JsonCall, JsonCallReader
from parsers.tools._machine import (
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    drop,
    nothing,
    to_content,
)

__all__ = ["Ernie45ToolParser"]

START = "<tool_call>"
END = "</tool_call>"
_BODY = re.compile(rf"{WS}(\{{.*\}}){WS}", re.DOTALL)


class P(enum.StrEnum):
    CONTENT = "content"
    CALL = "call"
    BETWEEN = "between"  # after a call: text is dropped
    VERBATIM = "verbatim"  # a broken first call: everything is content


@dataclass(frozen=True, slots=True)
class ErnieExt(JsonState):
    newlines: int = 0  # newlines held at the end of the content (stripped before a call)


@dataclass(frozen=True, slots=True)
class Ernie45State(ToolStreamState):
    call: JsonCall | None = None
    ext: ErnieExt = ErnieExt()


def _verdict(body: str) -> tuple[str, str] | bool:
    """A closed body: (name, arguments), False to skip it, True for an error (all content)."""
    found = _BODY.fullmatch(body)
    if found is None:
        return False
    obj: Any = json_loads(found.group(1))
    if not is_json(obj) or not isinstance(obj, dict):
        return True
    name = obj.get("name", "")
    if not isinstance(name, str):
        return True
    return name, json_dumps(obj.get("arguments", {}))


class Ernie45ToolParser(TableToolParser):
    name: ClassVar[str] = "ernie45"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = Ernie45State
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=False,
            decide=_decide, reject=_reject,
        )  # fmt: skip

    def check_ext(self, state: ToolStreamState) -> None:
        if not isinstance(state.ext, ErnieExt) or state.ext.newlines < 0:
            raise StateError(f"{self.name}: bad content state")
        if state.ext.newlines and state.phase != P.CONTENT:
            raise StateError(f"{self.name}: newlines held outside the content")

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        return super().held_chars(state) + (ext.newlines if isinstance(ext, ErnieExt) else 0)


def _reader(run: Run) -> JsonCallReader:
    parser = run.parser
    assert isinstance(parser, Ernie45ToolParser)
    return parser.reader


def _decide(run: Run, raw: str) -> bool:
    found = _verdict(raw)
    if isinstance(found, tuple):
        run.emit_call(*found)
        return True
    return False


def _reject(run: Run, text: str) -> None:
    """A body closed by `</tool_call>` that is no call (`text`: body and marker)."""
    if _verdict(text.removesuffix(END)) is True:
        run.reject_call(text, P.VERBATIM, P.BETWEEN)
    else:
        run.keep_raw(text)  # skipped: dropped, unless no call ever comes


def _content(run: Run, text: str) -> None:
    body = text.rstrip("\n")
    newlines = run.ext.newlines
    if body:
        run.content("\n" * newlines + body)
        newlines = 0
    run.ext = run.ext.replace(newlines=newlines + len(text) - len(body))


def _open(run: Run, marker: str) -> None:
    run.keep_raw("\n" * run.ext.newlines)
    run.ext = run.ext.replace(newlines=0)
    run.open_call_raw(marker)
    _reader(run).open(run)


def _reopen(run: Run, marker: str) -> None:
    """`<tool_call>` inside a body: before its commit, the body so far is skipped (the regex
    only matches from the last opener), after it, text of the body."""
    call: JsonCall = run.call
    if call.body in (Body.READ, Body.HOLD):
        run.keep_raw(call.raw)
        run.call = None
        _open(run, marker)
    else:
        run.phase = P.CALL
        _body(run, marker)


def _body(run: Run, text: str) -> None:
    _reader(run).read(run, text)


def _end(run: Run, marker: str) -> None:
    _reader(run).close(run, marker)


def _flush(run: Run, text: str) -> None:
    """End of output: with no call made, the text kept since the first `<tool_call>` is
    content (see the divergences)."""
    if run.n_calls == 0:
        run.content(run.pending)
        run.pending = ""


def _content_eos(run: Run, text: str) -> None:
    run.content("\n" * run.ext.newlines)
    run.ext = run.ext.replace(newlines=0)


def _call_eos(run: Run, text: str) -> None:
    call: JsonCall = run.call
    if call.body in (Body.READ, Body.HOLD):  # never closed: vLLM's regex skips it
        run.keep_raw(call.raw)
        run.call = None
    else:
        _reader(run).close(run, "")
    run.phase = P.BETWEEN
    _flush(run, text)


Ernie45ToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(_content),
        (P.CONTENT, START): Step(_open, P.CALL),
        (P.CONTENT, EOS): Step(_content_eos),
        (P.CALL, TEXT): Step(_body),
        (P.CALL, START): Step(_reopen, P.CALL),
        (P.CALL, END): Step(_end, P.BETWEEN),
        (P.CALL, EOS): Step(_call_eos),
        (P.BETWEEN, TEXT): Step(drop),
        (P.BETWEEN, START): Step(_open, P.CALL),
        (P.BETWEEN, EOS): Step(_flush),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
