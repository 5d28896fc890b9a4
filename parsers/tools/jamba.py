"""Jamba tool calls: `<tool_calls>[{"name": ..., "arguments": {...}}, ...]</tool_calls>`.

vLLM 0.33 (`JambaToolParser`) batch semantics reproduced here:

* no `<tool_calls>`: the output is content;
* the text from the first `<tool_calls>` to the next `</tool_calls>` must `json.loads` as a
  list of objects with `name` (a string) and `arguments`, whose value becomes
  `json.dumps(value, ensure_ascii=False)`; anything else (no end marker, not JSON, not a
  list, an item without them) makes the whole output content;
* with calls the content is the text before `<tool_calls>` (None when blank); text after
  `</tool_calls>` is dropped.

Streaming: content streams until `<tool_calls>`; the array's calls stream item by item
(`_json_array`: a call is sent at its arguments' start, its arguments stream); text after
`</tool_calls>` is dropped.

Divergences from vLLM's batch (stream == our batch instead; tests `test_jamba_*`): a call
that streamed stays where the region later breaks or never closes (the rest is content); an
empty array gives the whole output as content (vLLM: the text before it, dropping the rest).
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

__all__ = ["JambaToolParser", "jamba_item"]

START, END = "<tool_calls>", "</tool_calls>"
_WS = " \t\n\r"


def jamba_item(item: dict[str, Any]) -> Decided:
    """vLLM's rule for one object of the call array."""
    if not isinstance(item.get("name"), str) or "arguments" not in item:
        return FATAL
    return item["name"], json_dumps(item["arguments"])


class P(enum.StrEnum):
    CONTENT = "content"
    LEAD = "lead"  # after <tool_calls>, before the array's `[`
    ITEMS = arr.ITEMS
    ITEM = arr.ITEM
    CLOSE = "close"  # after the array's `]`, before </tool_calls>
    AFTER = "after"  # after </tool_calls>: dropped
    VERBATIM = arr.VERBATIM


@dataclass(frozen=True, slots=True)
class JambaState(ToolStreamState):
    call: JsonCall | None = None
    ext: ArrayExt = ArrayExt()


def _array_done(run: Run) -> None:
    run.phase = P.CLOSE


class JambaToolParser(arr.ArrayToolParser):
    name: ClassVar[str] = "jamba"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = JambaState
    call_phases = frozenset({P.ITEM})
    rules: ClassVar[ArrayRules] = ArrayRules(item=jamba_item, done=_array_done)



def _open(run: Run, marker: str) -> None:
    run.keep_raw(marker)


def _lead(run: Run, text: str) -> str | None:
    body = text.lstrip(_WS)
    run.keep_raw(text[: len(text) - len(body)])
    if not body:
        return None
    if body[0] != "[":  # not a list: vLLM's batch raises
        arr.fault(run, "")
        return body
    run.keep_raw("[")
    run.ext = run.ext.replace(sep="[")
    run.phase = P.ITEMS
    return body[1:] or None


def _fault(run: Run, marker: str) -> None:
    arr.fault(run, marker)


def _cut(run: Run[arr.ArrayToolParser], marker: str) -> None:
    arr.cut(run, marker)


def _close(run: Run, text: str) -> str | None:
    body = text.lstrip(_WS)
    run.keep_raw(text[: len(text) - len(body)])
    if not body:
        return None
    arr.fault(run, "")  # text after the array inside the region: not JSON
    return body


def _keep(run: Run, text: str) -> None:
    run.keep_raw(text)


def _unclosed(run: Run, text: str) -> None:
    """No `</tool_calls>`: without a call the whole output is content."""
    if run.n_calls == 0:
        run.content(run.pending)
        run.pending = ""


JambaToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.LEAD),
        (P.CONTENT, EOS): Step(nothing),
        (P.LEAD, TEXT): Step(_lead),
        (P.LEAD, END): Step(_fault),
        (P.LEAD, EOS): Step(_fault),
        (P.ITEMS, TEXT): Step(arr.items),
        (P.ITEMS, END): Step(_cut),
        (P.ITEMS, EOS): Step(_cut),
        (P.ITEM, TEXT): Step(arr.item),
        (P.ITEM, END): Step(_cut),
        (P.ITEM, EOS): Step(_cut),
        (P.CLOSE, TEXT): Step(_close),
        (P.CLOSE, END): Step(_keep, P.AFTER),
        (P.CLOSE, EOS): Step(_unclosed),
        (P.AFTER, TEXT): Step(_keep),
        (P.AFTER, EOS): Step(_unclosed),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
