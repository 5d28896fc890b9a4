"""Granite 4 tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, with the
text around and between the calls kept as content.

vLLM 0.33 (`Granite4ToolParser`) batch semantics reproduced here:

* the output is cut at every `<tool_call>` / `</tool_call>`; each call's text must
  `json.loads` as an object with a string `name` and an `arguments` key: a string is kept as
  it is, null fails, anything else becomes `json.dumps(value, ensure_ascii=False)`;
* content is all the text outside the calls, joined (None when empty);
* any fault (a start marker inside a call, an end marker outside one, an empty or unclosed
  call, a call that is not one) makes the whole output content.

Streaming: content streams (only a possible marker is held); a call is sent once its object
has shown its name and then the start of its arguments (`_json_calls`; scalar arguments are
held to the call's end, since null fails), and its arguments stream.

Divergences from vLLM's batch (stream == our batch instead; tests `test_granite4_*`): a call
that streamed stays where the output later faults (its text, cut or broken, as `_json_calls`
keeps it; a marker that faults is content; an unclosed call's text is content); after a
call was sent, a later call that is not one becomes content (vLLM: all output content).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._json_calls import JsonCall, JsonCallReader
from parsers.tools._machine import (
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    TableToolParser,
    ToolStreamState,
    nothing,
    to_content,
)

__all__ = ["Granite4ToolParser", "granite4_call"]

START, END = "<tool_call>", "</tool_call>"


def granite4_call(body: str) -> tuple[str, str] | None:
    """(name, arguments) of a call's text, or None where vLLM's batch fails."""
    obj: Any = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict) or "arguments" not in obj:
        return None
    name, args = obj.get("name"), obj["arguments"]
    if not isinstance(name, str) or args is None:
        return None
    return name, args if isinstance(args, str) else json_dumps(args)


def _admit(kind: str) -> bool | None:
    """A scalar may be null (a fault): held to the call's end; other types commit."""
    if not kind:
        return None
    return kind != "s"


class P(enum.StrEnum):
    CONTENT = "content"
    CALL = "call"
    VERBATIM = "verbatim"  # a fault before any call: everything is content


@dataclass(frozen=True, slots=True)
class Granite4State(ToolStreamState):
    call: JsonCall | None = None


class Granite4ToolParser(TableToolParser):
    name: ClassVar[str] = "granite4"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = Granite4State
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=False,
            decide=_decide, reject=_reject, string_verbatim=True, admit=_admit,
        )  # fmt: skip



def _decide(run: Run[Granite4ToolParser], raw: str) -> bool:
    found = granite4_call(raw)
    if found is not None:
        run.emit_call(*found)
    return found is not None


def _reject(run: Run[Granite4ToolParser], raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.CONTENT)


def _open(run: Run[Granite4ToolParser], marker: str) -> None:
    run.open_call_raw(marker)
    run.parser.reader.open(run)


def _stray_end(run: Run[Granite4ToolParser], marker: str) -> None:
    """An end marker outside a call: before any call the whole output is content."""
    run.content(marker)
    if run.n_calls == 0:
        run.phase = P.VERBATIM


def _body(run: Run[Granite4ToolParser], text: str) -> None:
    run.parser.reader.read(run, text)


def _end(run: Run[Granite4ToolParser], marker: str) -> None:
    run.parser.reader.close(run, marker)


def _restart(run: Run[Granite4ToolParser], marker: str) -> None:
    """A start marker inside a call: the call is not one (or, sent, is cut there)."""
    _unclosed(run, marker)


def _unclosed(run: Run[Granite4ToolParser], text: str) -> None:
    """The call ends without its end marker (at `text`, "" at the end of the output)."""
    call: JsonCall = run.call
    if not call.started:
        _reject(run, call.raw + text)
        return
    run.parser.reader.close(run, "")
    run.content(text)
    run.phase = P.CONTENT


Granite4ToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.CALL),
        (P.CONTENT, END): Step(_stray_end),
        (P.CONTENT, EOS): Step(nothing),
        (P.CALL, TEXT): Step(_body),
        (P.CALL, START): Step(_restart),
        (P.CALL, END): Step(_end, P.CONTENT),
        (P.CALL, EOS): Step(_unclosed),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
