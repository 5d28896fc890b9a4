"""Mistral tool calls on pre-v11 tokenizers: `[TOOL_CALLS] [{"name": ..., "arguments": ...}, ...]`.

vLLM 0.33 takes this path when the vocabulary has no `[ARGS]` (`MistralParser.
_legacy_extract_tool_calls`, tool_choice "auto"). Batch semantics reproduced here:

* no `[TOOL_CALLS]`: the output is content;
* otherwise the text before the first marker is content (None when only whitespace); the
  first non-blank segment after a marker (segments split at every marker), stripped, is
  decoded with `raw_decode` (trailing text ignored), or failing that the greedy `[{...}]`
  inside it with `json.loads`;
* a dict is one call, a list is many; items must be dicts with `name` or `arguments`; a
  missing or non-string name becomes "", missing arguments "{}", string arguments are kept
  verbatim, other arguments are `json.dumps(value, ensure_ascii=False)`;
* no call found: the content is that stripped segment alone.

Streaming: content streams until the marker (a whitespace-only prefix is held, since it is
dropped when a marker follows). A segment that opens with `[` or `{` streams its calls: an
item whose name comes first and then non-string arguments is sent at its arguments' start and
its arguments stream (`_json_calls`); any other item is held to its end and decided there.
Until the first call is sent the segment's text is kept, so a segment that turns out not to
decode still gets vLLM's batch result exactly (the regex fallback, or the segment as
content); a segment that does not open with `[` / `{` is held to its end and decided whole.

Divergences from vLLM's batch (stream == our batch instead; tests `test_mistral_divergence_*`):
when the marker is preceded by prose and no call can be decoded, vLLM's batch returns only
the stripped segment, dropping the prose that had already streamed; ours returns prose +
segment (as vLLM's own stream does). After a call was sent, a segment that stops being JSON
keeps the calls sent; the call that broke keeps its text as `_json_calls` documents, and the
rest of the segment is dropped like trailing text.
"""

from __future__ import annotations

import enum
import hashlib
import re
import string
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS
from parsers._state import JsonState
from parsers.tools._base import is_json, json_dumps, json_loads, json_raw_decode
from parsers.tools._json_args import DONE, MORE, JsonArgs, JsonArgsState
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

__all__ = ["MistralPreV11ToolParser", "mistral_calls", "mistral_tool_call_id", "BOT"]

BOT = "[TOOL_CALLS]"
_ARRAY = re.compile(r"\[{.*}\]", re.DOTALL)
_WS = " \t\n\r"


_ALPHANUMERIC = string.ascii_letters + string.digits


def mistral_tool_call_id(request_id: str, index: int) -> str:
    """Deterministic Mistral-valid id: 9 alphanumerics (vLLM draws them at random)."""
    digest = hashlib.blake2b(f"{request_id}:{index}".encode(), digest_size=9).digest()
    return "".join(_ALPHANUMERIC[b % len(_ALPHANUMERIC)] for b in digest)


def _decode(segment: str) -> Any:
    parsed, _ = json_raw_decode(segment)
    if is_json(parsed):
        return parsed
    found = _ARRAY.findall(segment)
    return json_loads(found[0]) if found else parsed


def _item_call(item: Any) -> tuple[str, str] | None:
    if not isinstance(item, dict) or not ("name" in item or "arguments" in item):
        return None
    name, arguments = item.get("name"), item.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json_dumps(arguments)
    return (name if isinstance(name, str) else ""), arguments


def mistral_calls(segment: str) -> list[tuple[str, str]]:
    """Calls in the stripped first segment after the marker ([] when vLLM finds none)."""
    parsed = _decode(segment)
    items = [parsed] if isinstance(parsed, dict) else parsed
    if not is_json(parsed) or not isinstance(items, list):
        return []
    return [call for call in map(_item_call, items) if call is not None]


class P(enum.StrEnum):
    CONTENT = "content"
    LEAD = "lead"  # after a marker, before the segment's first non-blank character
    ITEMS = "items"  # inside `[`: between items
    ITEM = "item"  # inside an item object
    SKIP = "skip"  # inside an item that is no object (validated, skipped)
    WHOLE = "whole"  # a segment held whole, decided at the end
    AFTER = "after"  # the segment's value ended: the rest is dropped
    VERBATIM = "verbatim"  # tool_choice none with tools: everything is content


@dataclass(frozen=True, slots=True)
class PreV11Ext(JsonState):
    """ws: content whitespace held (content not yet started). started: content started.
    seg: the segment's raw text while no call was sent (the exact batch fallback).
    bare: the segment is one bare object (no `[`). skip: a skipped item's scanner."""

    ws: str = ""
    started: bool = False
    seg: str = ""
    bare: bool = False
    skip: JsonArgsState | None = None

    def held_chars(self) -> int:
        return len(self.ws) + len(self.seg)


@dataclass(frozen=True, slots=True)
class PreV11State(ToolStreamState):
    call: JsonCall | None = None
    ext: PreV11Ext = PreV11Ext()


class MistralPreV11ToolParser(TableToolParser):
    """The pre-v11 format; `parsers.tools.mistral.MistralToolParser` selects it."""

    name: ClassVar[str] = "mistral"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = PreV11State
    call_phases = frozenset({P.ITEM})

    def initial_state(self) -> ToolStreamState:
        if self.suppress_calls:  # vLLM: tool_choice="none" with tools returns the output as is
            return self.state_class(parser=self.state_tag, phase=P.VERBATIM)
        return super().initial_state()

    def call_id(self, request_id: str, index: int) -> str:
        return mistral_tool_call_id(request_id, index)

    def tool_choice_none_content(self, text: str, request_id: str) -> str | None:
        if not text:
            return ""  # the pre-v11 path returns an empty output itself, not None
        return super().tool_choice_none_content(text, request_id)

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=True,
            decide=_decide_item, reject=_skip_item, string_verbatim=True,
        )  # fmt: skip

    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        return super().held_chars(state) + (ext.held_chars() if isinstance(ext, PreV11Ext) else 0)


# -- content -------------------------------------------------------------------------------


def _content(run: Run[MistralPreV11ToolParser], text: str) -> None:
    ext: PreV11Ext = run.ext
    if ext.started:
        run.content(text)
        return
    held = ext.ws + text
    if not held.strip() and len(held) <= MAX_HELD_CHARS:
        run.ext = ext.replace(ws=held)  # dropped if a marker follows
        return
    run.content(held)
    run.ext = ext.replace(ws="", started=True)


def _content_end(run: Run[MistralPreV11ToolParser], text: str) -> None:
    run.content(run.ext.ws)


def _marker(run: Run[MistralPreV11ToolParser], marker: str) -> None:
    run.ext = run.ext.replace(ws="")


# -- the segment -----------------------------------------------------------------------------


def _lead(run: Run[MistralPreV11ToolParser], text: str) -> str | None:
    body = text.lstrip(_WS + "\v\f")
    if not body:
        return None
    if body[0] not in "[{":
        run.phase = P.WHOLE
        return body
    run.ext = run.ext.replace(seg="" if body[0] == "{" else "[", bare=body[0] == "{")
    if body[0] == "{":
        _open_item(run)
        return body  # the item's `{` is the item's text
    run.phase = P.ITEMS
    return body[1:] or None


def _items(run: Run[MistralPreV11ToolParser], text: str) -> str | None:
    body = text.lstrip(_WS)
    _keep_seg(run, text[: len(text) - len(body)])
    if not body:
        return None
    ch = body[0]
    if ch == ",":
        _keep_seg(run, ",")
        return body[1:] or None
    if ch == "]":
        _keep_seg(run, "]")
        _segment_done(run)
        return body[1:] or None
    if ch == "{":
        _open_item(run)
        return body
    run.ext = run.ext.replace(skip=JsonArgs().start())
    run.phase = P.SKIP
    return body


def _open_item(run: Run[MistralPreV11ToolParser]) -> None:
    run.open_call_raw("")
    run.parser.reader.open(run)
    run.phase = P.ITEM


def _item(run: Run[MistralPreV11ToolParser], text: str) -> str | None:
    before = run.n_calls
    rest = run.parser.reader.read(run, text)
    consumed = text if rest is None else text[: len(text) - len(rest)]
    if before == 0:
        _keep_seg(run, consumed)
    if run.n_calls and before == 0:
        run.ext = run.ext.replace(seg="")
    if rest is None:
        return None
    run.call = None
    if run.phase == P.ITEM:
        _item_done(run)
    return rest or None


def _item_done(run: Run[MistralPreV11ToolParser]) -> None:
    if run.ext.bare:
        _segment_done(run)
    else:
        run.phase = P.ITEMS


def _decide_item(run: Run[MistralPreV11ToolParser], raw: str) -> bool:
    parsed, _ = json_raw_decode(raw)
    if not is_json(parsed):
        return False
    call = _item_call(parsed)
    if call is not None:
        run.emit_call(*call)
        run.ext = run.ext.replace(seg="")
    return True  # an object that is no call is skipped, as vLLM skips it


def _skip_item(run: Run[MistralPreV11ToolParser], raw: str) -> None:
    """An item that does not decode: before any call the segment is decided whole (the kept
    text); after one, the rest of the segment is dropped (documented)."""
    run.phase = P.WHOLE if run.n_calls == 0 else P.AFTER


def _skip(run: Run[MistralPreV11ToolParser], text: str) -> str | None:
    fmt = JsonArgs()
    skip, _, rest = fmt.feed(run.ext.skip, text)
    consumed = text if rest is None else text[: len(text) - len(rest)]
    _keep_seg(run, consumed)
    run.ext = run.ext.replace(skip=skip)
    if skip.status == MORE:
        return None
    run.ext = run.ext.replace(skip=None)
    if skip.status != DONE:
        if run.n_calls == 0:
            return _to_whole(run, rest or "")
        _after(run, "")
        return None
    run.phase = P.ITEMS
    return rest or None


def _keep_seg(run: Run[MistralPreV11ToolParser], text: str) -> None:
    if run.n_calls == 0 and text:
        run.ext = run.ext.replace(seg=run.ext.seg + text)


def _to_whole(run: Run[MistralPreV11ToolParser], rest: str) -> str | None:
    """No call sent yet and the segment does not decode as streamed: hold it whole."""
    run.call = None
    run.phase = P.WHOLE
    run.ext = run.ext.replace(skip=None)
    return rest or None


def _segment_done(run: Run[MistralPreV11ToolParser]) -> None:
    """The segment's value ended. Without a call, vLLM's content is the whole stripped
    segment: it is held to the segment's end (the kept text)."""
    if run.n_calls == 0:
        run.phase = P.WHOLE
        return
    run.phase = P.AFTER
    run.ext = run.ext.replace(seg="")


def _whole(run: Run[MistralPreV11ToolParser], text: str) -> None:
    run.ext = run.ext.replace(seg=run.ext.seg + text)


def _whole_marker(run: Run[MistralPreV11ToolParser], marker: str) -> None:
    """The segment ends at the next marker: decide it (the rest of the output is dropped)."""
    _decide_whole(run)
    run.phase = P.AFTER


def _decide_whole(run: Run[MistralPreV11ToolParser]) -> None:
    segment = run.ext.seg.strip()
    run.ext = run.ext.replace(seg="")
    calls = mistral_calls(segment)
    for name, arguments in calls:
        run.emit_call(name, arguments)
    if not calls:
        run.content(segment)


def _whole_end(run: Run[MistralPreV11ToolParser], text: str) -> None:
    _decide_whole(run)


def _item_end(run: Run[MistralPreV11ToolParser], text: str) -> None:
    """The segment ends inside an item (the output, or the next marker)."""
    if run.n_calls == 0:
        _to_whole(run, "")
        _decide_whole(run)
    else:
        run.parser.reader.close(run, "")
        run.call = None
    run.phase = P.AFTER


def _skip_marker(run: Run[MistralPreV11ToolParser], text: str) -> None:
    run.ext = run.ext.replace(skip=None)
    _segment_end(run, text)
    run.phase = P.AFTER


def _segment_end(run: Run[MistralPreV11ToolParser], text: str) -> None:
    """The segment ends before its array closed."""
    if run.n_calls == 0:
        _to_whole(run, "")
        _decide_whole(run)
    run.phase = P.AFTER


def _after(run: Run[MistralPreV11ToolParser], text: str) -> None:
    run.phase = P.AFTER


def _drop(run: Run[MistralPreV11ToolParser], text: str) -> None:
    """Text the format drops."""


MistralPreV11ToolParser.table = Table(
    phases=tuple(P),
    markers=(BOT,),
    steps={
        (P.CONTENT, TEXT): Step(_content),
        (P.CONTENT, BOT): Step(_marker, P.LEAD),
        (P.CONTENT, EOS): Step(_content_end),
        (P.LEAD, TEXT): Step(_lead),
        (P.LEAD, BOT): Step(_drop),  # empty segments count as none
        (P.LEAD, EOS): Step(_whole_end, P.WHOLE),
        (P.ITEMS, TEXT): Step(_items),
        (P.ITEMS, BOT): Step(_segment_end),
        (P.ITEMS, EOS): Step(_segment_end),
        (P.ITEM, TEXT): Step(_item),
        (P.ITEM, BOT): Step(_item_end),
        (P.ITEM, EOS): Step(_item_end),
        (P.SKIP, TEXT): Step(_skip),
        (P.SKIP, BOT): Step(_skip_marker),
        (P.SKIP, EOS): Step(_skip_marker),
        (P.WHOLE, TEXT): Step(_whole),
        (P.WHOLE, BOT): Step(_whole_marker),
        (P.WHOLE, EOS): Step(_whole_end),
        (P.AFTER, TEXT): Step(_drop),
        (P.AFTER, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
