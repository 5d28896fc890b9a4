"""granite-20b-functioncalling tool calls: `<function_call> {"name": ..., "arguments": {...}}`,
one JSON object after each marker.

vLLM 0.33 (`Granite20bFCToolParser`) batch semantics reproduced here:

* no `<function_call>`: the output is content;
* after each marker (and its whitespace) one JSON value is decoded (`raw_decode`, up to the
  next marker; the text after the value is ignored); it must be an object with a string
  `name` and `arguments`, which become `json.dumps(value, ensure_ascii=False)`; any value
  that fails makes the whole output content;
* content is the text before the first marker (None when empty).

Streaming: content streams until the marker; a call is sent once its object has shown its
name and then the start of its arguments (`_json_calls`), and its arguments stream; the
text after each object is dropped.

Divergences from vLLM's batch (stream == our batch instead; tests `test_granite_20b_fc_*`):
a call that streamed stays where a later part of the output faults (a cut or broken call
keeps its text as `_json_calls` does; the first faulting part and everything after it are
content); a marker inside a call that had streamed ends it there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers.tools._base import is_json, json_dumps, json_raw_decode
from parsers.tools._json_calls import JsonCall, JsonCallReader
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

__all__ = ["Granite20bFCToolParser", "granite_20b_fc_call"]

START = "<function_call>"


def granite_20b_fc_call(raw: str) -> tuple[str, str] | None:
    """(name, arguments) of the JSON value at the start of `raw`, or None where vLLM fails."""
    obj: Any
    obj, _ = json_raw_decode(raw)
    if not is_json(obj) or not isinstance(obj, dict) or "arguments" not in obj:
        return None
    if not isinstance(obj.get("name"), str):
        return None
    return obj["name"], json_dumps(obj["arguments"])


class P(enum.StrEnum):
    CONTENT = "content"
    LEAD = "lead"  # after a marker: its whitespace
    CALL = "call"
    BETWEEN = "between"  # after a call's object: dropped
    VERBATIM = "verbatim"  # after a fault: everything is content


@dataclass(frozen=True, slots=True)
class Granite20bFCState(ToolStreamState):
    call: JsonCall | None = None


class Granite20bFCToolParser(TableToolParser):
    name: ClassVar[str] = "granite-20b-fc"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = Granite20bFCState
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=True,
            decide=_decide, reject=_fault,
        )  # fmt: skip



def _decide(run: Run[Granite20bFCToolParser], raw: str) -> bool:
    found = granite_20b_fc_call(raw)
    if found is not None:
        run.emit_call(*found)
    return found is not None


def _fault(run: Run[Granite20bFCToolParser], raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.VERBATIM)


def _open(run: Run[Granite20bFCToolParser], marker: str) -> None:
    run.open_call_raw(marker)


def _lead(run: Run[Granite20bFCToolParser], text: str) -> str | None:
    body = text.lstrip()
    run.pending += text[: len(text) - len(body)]  # the fault's text, should one come
    if not body:
        return None
    if body[0] != "{":  # not an object: vLLM fails on it
        _fault(run, "")
        return body
    run.parser.reader.open(run)
    run.phase = P.CALL
    return body


def _lead_fault(run: Run[Granite20bFCToolParser], marker: str) -> None:
    _fault(run, marker)


def _call(run: Run[Granite20bFCToolParser], text: str) -> str | None:
    rest = run.parser.reader.read(run, text)
    if rest is None:
        return None
    run.call = None
    if run.phase == P.CALL:
        run.phase = P.BETWEEN
    return rest or None


def _call_marker(run: Run[Granite20bFCToolParser], marker: str) -> None:
    """The next marker inside an object: vLLM decodes the object cut there."""
    call: JsonCall = run.call
    if not call.started:
        run.parser.reader.close(run, marker)  # cut: never decodes, a fault
        return
    run.parser.reader.close(run, "")
    run.open_call_raw(marker)
    run.phase = P.LEAD


def _call_end(run: Run[Granite20bFCToolParser], text: str) -> None:
    run.parser.reader.close(run, "")
    if run.phase == P.CALL:
        run.phase = P.BETWEEN


Granite20bFCToolParser.table = Table(
    phases=tuple(P),
    markers=(START,),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.LEAD),
        (P.CONTENT, EOS): Step(nothing),
        (P.LEAD, TEXT): Step(_lead),
        (P.LEAD, START): Step(_lead_fault),
        (P.LEAD, EOS): Step(_lead_fault),
        (P.CALL, TEXT): Step(_call),
        (P.CALL, START): Step(_call_marker),
        (P.CALL, EOS): Step(_call_end),
        (P.BETWEEN, TEXT): Step(drop),
        (P.BETWEEN, START): Step(_open, P.LEAD),
        (P.BETWEEN, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
