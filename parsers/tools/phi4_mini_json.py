"""Phi-4-mini JSON tool calls: `functools[{"name": ..., "arguments": {...}}, ...]`.

vLLM 0.33 (`Phi4MiniJsonToolParser`) batch semantics reproduced here:

* no `functools[` in the output: it is content;
* otherwise the text from the first `functools[` to the next `]` is wrapped in brackets and
  `json.loads`-ed; each item must be an object with `name` and `arguments` (else
  `parameters`), whose value becomes `json.dumps(value, ensure_ascii=False)`; an item that is
  no object, has no name or neither key, or a name that is no string, makes the whole output
  content; with calls the content is None (text before and after the array is dropped).

Streaming: content streams until `functools[` (only a possible marker is held); the array's
calls stream item by item (`_json_array`: a call is sent at its arguments' start and its
arguments stream); the text after the array is dropped.

Divergences from vLLM's batch (stream == our batch instead; tests `test_phi4_*`):
* vLLM's region ends at the first `]`, even inside a string or a nested list, and a region
  that is not JSON gives no content and no call at all; ours reads the array as JSON: its
  calls stay, or with none the whole output is content (nothing is dropped);
* prose before `functools[` is content (it had streamed; vLLM drops it);
* a call that streamed stays where its array later breaks (the rest is content), and an
  `arguments` member after a `parameters` member that already streamed is not taken.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers.tools import _json_array as arr
from parsers.tools._base import json_dumps
from parsers.tools._json_array import FATAL, ArrayExt, ArrayRules, Decided
from parsers.tools._json_calls import JsonCall
from parsers.tools._machine import (
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    ToolStreamState,
    nothing,
    to_content,
)

__all__ = ["Phi4MiniJsonToolParser", "phi4_item"]

START = "functools["


def phi4_item(item: dict[str, Any]) -> Decided:
    """vLLM's rule for one object of the call array."""
    if "name" not in item or not isinstance(item["name"], str):
        return FATAL
    if "arguments" in item:
        return item["name"], json_dumps(item["arguments"])
    if "parameters" in item:
        return item["name"], json_dumps(item["parameters"])
    return FATAL


class P(enum.StrEnum):
    CONTENT = "content"
    ITEMS = arr.ITEMS
    ITEM = arr.ITEM
    AFTER = "after"  # after the array: dropped
    VERBATIM = arr.VERBATIM


@dataclass(frozen=True, slots=True)
class Phi4State(ToolStreamState):
    call: JsonCall | None = None
    ext: ArrayExt = ArrayExt()


def _array_done(run: Run) -> None:
    run.phase = P.AFTER


class Phi4MiniJsonToolParser(arr.ArrayToolParser):
    name: ClassVar[str] = "phi4_mini_json"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = Phi4State
    call_phases = frozenset({P.ITEM})
    rules: ClassVar[ArrayRules] = ArrayRules(
        item=phi4_item, done=_array_done, args_keys=("arguments", "parameters")
    )



def _open(run: Run, marker: str) -> None:
    run.keep_raw(marker)
    run.ext = run.ext.replace(sep="[")


def _cut(run: Run[arr.ArrayToolParser], text: str) -> None:
    arr.cut(run, "")


def _after(run: Run, text: str) -> None:
    run.keep_raw(text)


def _after_end(run: Run, text: str) -> None:
    if run.n_calls == 0:  # an empty array: the whole output is content
        run.content(run.pending)
        run.pending = ""


Phi4MiniJsonToolParser.table = Table(
    phases=tuple(P),
    markers=(START,),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.ITEMS),
        (P.CONTENT, EOS): Step(nothing),
        (P.ITEMS, TEXT): Step(arr.items),
        (P.ITEMS, EOS): Step(_cut),
        (P.ITEM, TEXT): Step(arr.item),
        (P.ITEM, EOS): Step(_cut),
        (P.AFTER, TEXT): Step(_after),
        (P.AFTER, EOS): Step(_after_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
