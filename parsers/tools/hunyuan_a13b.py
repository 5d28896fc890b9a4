"""Hunyuan-A13B tool calls: `<tool_calls>[{"name": ..., "arguments": {...}}, ...]</tool_calls>`.

vLLM 0.33 (`HunyuanA13BToolParser`) batch semantics reproduced here:

* the first `<tool_calls>...</tool_calls>` block whose stripped body is JSON decides; blocks
  before it that are not JSON stay in the content; text after it is dropped;
* a JSON array gives one call per item that is an object with `name` and `arguments` (other
  items are skipped); `arguments` is `json.dumps`'d when an object, kept when a string; a
  name that is not a string makes the whole output content;
* the content is the text before the deciding block (None when blank); no call found: the
  output is content.

Streaming: content streams; a block's array punctuation is checked as it comes and each item
is read by Hermes' reader (`_json_calls`, ending with its value): an item showing its name
and then the start of its arguments is sent and its arguments stream. Until the first call is
sent the block's text is kept, so a block that is not JSON still becomes content.

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests):
* after a call was sent, a block that stops being JSON (or is cut by the end of the output)
  keeps the calls sent, and the call that broke keeps its text (`_json_calls`); a later item
  whose name is not a string is skipped (vLLM: all content);
* an item that is not an object makes the block "not JSON" here (vLLM skips the item);
* arguments that are neither an object nor a string: the call is kept, JSON-encoded (vLLM:
  an error, all content);
* vLLM ignores a block inside a `<think>...</think>` region of the content; ours does not.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import StateError
from parsers._state import JsonState
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
    drop,
    nothing,
    to_content,
)

__all__ = ["HunyuanA13BToolParser"]

START = "<tool_calls>"
END = "</tool_calls>"
_BLANK = " \t\n\r"


class P(enum.StrEnum):
    CONTENT = "content"
    ARRAY = "array"  # inside a block, between items (ext.stage says what may come)
    ITEM = "item"  # an item is being read
    AFTER = "after"  # after the deciding block: dropped
    VERBATIM = "verbatim"  # no call: everything is content


class Stage(enum.StrEnum):
    LEAD = "lead"  # before `[`
    FIRST = "first"  # after `[`: an item or `]`
    NEXT = "next"  # after `,`: an item
    SEP = "sep"  # after an item: `,` or `]`
    TAIL = "tail"  # after `]`: blanks only
    BAD = "bad"  # the body is not a JSON array


@dataclass(frozen=True, slots=True)
class HunyuanExt(JsonState):
    stage: Stage = Stage.LEAD


@dataclass(frozen=True, slots=True)
class HunyuanState(ToolStreamState):
    call: JsonCall | None = None
    ext: HunyuanExt = HunyuanExt()


class HunyuanA13BToolParser(TableToolParser):
    name: ClassVar[str] = "hunyuan_a13b"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = HunyuanState
    call_phases = frozenset({P.ITEM})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=True,
            decide=_decide, reject=_reject, string_verbatim=True,
        )  # fmt: skip

    def check_ext(self, state: ToolStreamState) -> None:
        if not isinstance(state.ext, HunyuanExt):
            raise StateError(f"{self.name}: bad block state")


def _reader(run: Run) -> JsonCallReader:
    parser = run.parser
    assert isinstance(parser, HunyuanA13BToolParser)
    return parser.reader


def _item_call(obj: Any) -> tuple[str, str] | bool:
    """An item: (name, arguments), False to skip it, True for an error (all content)."""
    if not isinstance(obj, dict) or "name" not in obj or "arguments" not in obj:
        return False
    name, args = obj["name"], obj["arguments"]
    if not isinstance(name, str) or not isinstance(args, dict | str):
        return True
    return name, args if isinstance(args, str) else json_dumps(args)


def _decide(run: Run, raw: str) -> bool:
    obj: Any = json_loads(raw)
    if not is_json(obj):
        return False
    found = _item_call(obj)
    if isinstance(found, tuple):
        run.emit_call(*found)
    elif found and run.n_calls == 0:
        _all_content(run, raw)
    else:
        run.keep_raw(raw)  # skipped
    return True


def _reject(run: Run, raw: str) -> None:
    """An item that is not JSON: the block is not JSON."""
    run.keep_raw(raw)
    run.ext = run.ext.replace(stage=Stage.BAD)


def _all_content(run: Run, raw: str) -> None:
    run.content(run.pending + raw)
    run.pending = ""
    run.phase = P.VERBATIM
    run.ext = HunyuanExt()


def _open(run: Run, marker: str) -> None:
    run.open_call_raw(marker)
    run.ext = HunyuanExt()


def _array(run: Run, text: str) -> str | None:
    """Array punctuation between items; an item's `{` hands over to the reader."""
    stage = run.ext.stage
    i = 0
    while i < len(text) and stage is not Stage.BAD:
        ch = text[i]
        if ch in _BLANK:
            i += 1
            continue
        if stage is Stage.LEAD and ch == "[":
            stage = Stage.FIRST
        elif stage in (Stage.FIRST, Stage.NEXT) and ch == "{":
            run.keep_raw(text[:i])
            run.ext = run.ext.replace(stage=Stage.SEP)
            _reader(run).open(run)
            run.phase = P.ITEM
            return text[i:]
        elif (stage is Stage.FIRST or stage is Stage.SEP) and ch == "]":
            stage = Stage.TAIL
        elif stage is Stage.SEP and ch == ",":
            stage = Stage.NEXT
        else:
            stage = Stage.BAD
        i += 1
    run.keep_raw(text)
    run.ext = run.ext.replace(stage=stage)
    return None


def _item(run: Run, text: str) -> str | None:
    rest = _reader(run).read(run, text)
    if rest is None:
        return None
    if run.call is not None:  # a sent call ended with its value
        run.call = None
    if run.phase == P.ITEM:
        run.phase = P.ARRAY
    return rest or None


def _item_end(run: Run, marker: str) -> None:
    """`</tool_calls>` inside an item: the block is cut."""
    _reader(run).close(run, "")
    run.call = None
    run.ext = run.ext.replace(stage=Stage.BAD)
    _block_end(run, marker)


def _block_end(run: Run, marker: str) -> None:
    if run.phase == P.VERBATIM:
        run.content(marker)
        return
    if run.n_calls:
        run.phase = P.AFTER
    elif run.ext.stage is Stage.TAIL:  # a JSON array without calls: no call at all
        _all_content(run, marker)
    else:  # not JSON: the block is content, the next one may decide
        run.content(run.pending + marker)
        run.pending = ""
        run.phase = P.CONTENT
    run.ext = HunyuanExt()


def _eos(run: Run, text: str) -> None:
    if run.call is not None:
        _reader(run).close(run, "")
        run.call = None
    if run.n_calls == 0:
        run.content(run.pending)
        run.pending = ""
    run.phase = P.AFTER
    run.ext = HunyuanExt()


HunyuanA13BToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.ARRAY),
        (P.CONTENT, EOS): Step(nothing),
        (P.ARRAY, TEXT): Step(_array),
        (P.ARRAY, END): Step(_block_end),
        (P.ARRAY, EOS): Step(_eos),
        (P.ITEM, TEXT): Step(_item),
        (P.ITEM, END): Step(_item_end, P.ARRAY),
        (P.ITEM, EOS): Step(_eos),
        (P.AFTER, TEXT): Step(drop),
        (P.AFTER, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
