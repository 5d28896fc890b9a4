"""xLAM tool calls: the output is a JSON array `[{"name": ..., "arguments": {...}}, ...]`, or
such an array in a fenced code block, after `[TOOL_CALLS]` (to the line's end), inside
`<tool_call>...</tool_call>`, or after `</think>`.

vLLM 0.33 (`xLAMToolParser`) batch semantics reproduced here:

* a whole output (stripped) starting with `[`, or the whole text after the first `</think>`,
  that `json.loads` as a list is the call list; content is None (after `</think>`: the text
  up to it, stripped);
* otherwise a block (```` ``` ````-fenced with an optional `json` tag, `[TOOL_CALLS]` to the
  end of its line, `<tool_call>...</tool_call>`) whose text `json.loads` as a list is; it is
  cut from the content, which is then stripped;
* items that are not objects with `name` and `arguments` are skipped; `arguments` that are an
  object become `json.dumps(value, ensure_ascii=False)`, a string is kept as it is; any other
  type, or a name that is no string, makes the whole output content;
* no call at all (nothing matched, not JSON, every item skipped): the whole output is content.

Streaming: content streams, holding back trailing whitespace (dropped if a call follows) and a
possible marker. A leading array streams its calls (`_json_array`: a call is sent at its
arguments' first token, when that is `{` or a string, and its arguments stream); a block is
held to its end (bounded by the tool-call limit) and decided there.

Divergences from vLLM's batch (stream == our batch instead; tests `test_xlam_divergence_*`):
* text after a leading array that already sent calls is content, and the calls stay (vLLM:
  all output content, as the array plus text is no JSON); after a call was sent, an item
  that breaks the array makes the rest of the output content;
* every block that holds calls is taken, in text order (vLLM takes the first matching block
  of the first pattern that has one, and cuts every match of that pattern from the content);
  a block that holds no call stays content;
* a block whose content strips to nothing gives content None (vLLM: ""; a stream cannot
  tell them apart);
* text after `</think>` around a block is kept, and whitespace at the very start of the
  output before prose is kept (it had streamed before the call was known).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers.tools import _json_array as arr
from parsers.tools._base import is_json, json_dumps, json_loads
from parsers.tools._json_array import FATAL, SKIPPED, ArrayExt, ArrayRules, Decided
from parsers.tools._json_calls import JsonCall
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
    TEXT,
    Run,
    Step,
    Table,
    ToolStreamState,
    nothing,
    to_content,
)

__all__ = ["XlamToolParser", "xlam_item"]

FENCE = "```"
TOOL_CALLS = "[TOOL_CALLS]"
TAG, TAG_END = "<tool_call>", "</tool_call>"
THINK_END = "</think>"
_WS = " \t\n\r"


def xlam_item(item: dict[str, Any]) -> Decided:
    """vLLM's rule for one object of the call list."""
    if "name" not in item or "arguments" not in item:
        return SKIPPED
    name, args = item["name"], item["arguments"]
    if not isinstance(name, str):
        return FATAL
    if isinstance(args, dict):
        return name, json_dumps(args)
    return (name, args) if isinstance(args, str) else FATAL


def xlam_calls(text: str) -> list[tuple[str, str]]:
    """The calls of a block's JSON text ([] when vLLM finds none there)."""
    parsed: Any = json_loads(text)
    if not is_json(parsed) or not isinstance(parsed, list):
        return []
    calls: list[tuple[str, str]] = []
    for value in parsed:
        found = xlam_item(value) if isinstance(value, dict) else SKIPPED
        if found == FATAL:
            return []
        if isinstance(found, tuple):
            calls.append(found)
    return calls


def _admit(kind: str) -> bool | None:
    """Objects and strings are calls; other argument types make the output content."""
    if not kind:
        return None
    return kind in ('{', '"')


class P(enum.StrEnum):
    LEAD = "lead"  # the output's (or the text after `</think>`'s) leading whitespace
    CONTENT = "content"
    FENCE = "fence"  # inside ``` ... ```
    TOOL_CALLS = "tool_calls"  # after [TOOL_CALLS], to the line's end
    TAG = "tag"  # inside <tool_call> ... </tool_call>
    ITEMS = arr.ITEMS
    ITEM = arr.ITEM
    SKIP = arr.SKIP
    AFTER = "after"  # after a leading array's `]`: only whitespace may follow
    VERBATIM = arr.VERBATIM


@dataclass(frozen=True, slots=True)
class XlamExt(ArrayExt):
    """ws: trailing whitespace of the content (or the lead) held back. block: a block's text.
    thought: the first `</think>` was read."""

    ws: str = ""
    block: str = ""
    thought: bool = False

    def held_chars(self) -> int:
        return len(self.ws) + len(self.block)


@dataclass(frozen=True, slots=True)
class XlamState(ToolStreamState):
    call: JsonCall | None = None
    ext: XlamExt = XlamExt()


def _array_done(run: Run) -> None:
    run.phase = P.AFTER


class XlamToolParser(arr.ArrayToolParser):
    name: ClassVar[str] = "xlam"
    initial_phase: ClassVar[str] = P.LEAD
    state_class = XlamState
    call_phases = frozenset({P.ITEM})
    rules: ClassVar[ArrayRules] = ArrayRules(
        item=xlam_item, done=_array_done, skip_non_objects=True, admit=_admit,
        string_verbatim=True,
    )


    def held_chars(self, state: ToolStreamState) -> int:
        ext = state.ext
        return super().held_chars(state) + (ext.held_chars() if isinstance(ext, XlamExt) else 0)


# -- content ---------------------------------------------------------------------------------


def _content(run: Run, text: str) -> None:
    full = run.ext.ws + text
    kept = full.rstrip(_WS)
    run.content(kept)
    run.ext = run.ext.replace(ws=full[len(kept) :])


def _content_end(run: Run, text: str) -> None:
    if run.n_calls == 0:
        run.content(run.ext.ws)


def _lead(run: Run, text: str) -> str | None:
    body = text.lstrip(_WS)
    run.ext = run.ext.replace(ws=run.ext.ws + text[: len(text) - len(body)])
    if not body:
        return None
    if body[0] == "[":
        run.keep_raw(run.ext.ws + "[")
        run.ext = run.ext.replace(ws="", sep="[")
        run.phase = P.ITEMS
        return body[1:] or None
    run.phase = P.CONTENT
    return body


def _think(run: Run, marker: str) -> None:
    if run.ext.thought:
        _content(run, marker)
        return
    _content(run, marker)
    run.ext = run.ext.replace(thought=True)
    run.phase = P.LEAD


# -- blocks ----------------------------------------------------------------------------------


def _open(phase: P) -> Step:
    def action(run: Run, marker: str) -> None:
        run.ext = run.ext.replace(block="")

    return Step(action, phase)


def _block(run: Run, text: str) -> None:
    run.ext = run.ext.replace(block=run.ext.block + text)


def _decide(run: Run, opener: str, closer: str) -> None:
    body = run.ext.block
    run.ext = run.ext.replace(block="")
    json_text = body[4:] if opener == FENCE and body.startswith("json") else body
    calls = xlam_calls(json_text)
    for name, arguments in calls:
        run.emit_call(name, arguments)
    if not calls:
        _content(run, opener + body + closer)


def _fence_end(run: Run, marker: str) -> None:
    _decide(run, FENCE, FENCE)


def _tag_end(run: Run, marker: str) -> None:
    _decide(run, TAG, TAG_END)


def _tool_calls(run: Run, text: str) -> str | None:
    line_end = text.find("\n")
    if line_end == -1:
        _block(run, text)
        return None
    _block(run, text[:line_end])
    _decide(run, TOOL_CALLS, "")
    run.phase = P.CONTENT
    return text[line_end:]


def _tool_calls_end(run: Run, text: str) -> None:
    _decide(run, TOOL_CALLS, "")
    _content_end(run, "")


def _unclosed(opener: str) -> Step:
    def action(run: Run, text: str) -> None:
        _content(run, opener + run.ext.block)
        run.ext = run.ext.replace(block="")
        _content_end(run, "")

    return Step(action)


# -- after a leading array -------------------------------------------------------------------


def _after(run: Run, text: str) -> None:
    full = run.ext.ws + text
    if not full.strip(_WS):
        run.ext = run.ext.replace(ws=full)
        return
    run.ext = run.ext.replace(ws="")
    run.reject_call(full, P.VERBATIM, P.VERBATIM)


def _after_end(run: Run, text: str) -> None:
    if run.n_calls == 0:  # every item was skipped: the whole output is content
        run.content(run.pending + run.ext.ws)
        run.pending = ""


def _cut(run: Run[arr.ArrayToolParser], text: str) -> None:
    arr.cut(run, "")


_BLOCKS = {FENCE: P.FENCE, TOOL_CALLS: P.TOOL_CALLS, TAG: P.TAG}
_steps: dict[tuple[str, str], Step] = {
    (P.LEAD, TEXT): Step(_lead),
    (P.LEAD, THINK_END): Step(_think),
    (P.LEAD, EOS): Step(_content_end),
    (P.CONTENT, TEXT): Step(_content),
    (P.CONTENT, THINK_END): Step(_think),
    (P.CONTENT, EOS): Step(_content_end),
    (P.FENCE, TEXT): Step(_block),
    (P.FENCE, FENCE): Step(_fence_end, P.CONTENT),
    (P.FENCE, EOS): _unclosed(FENCE),
    (P.TOOL_CALLS, TEXT): Step(_tool_calls),
    (P.TOOL_CALLS, ANY_MARKER): Step(_block),
    (P.TOOL_CALLS, EOS): Step(_tool_calls_end),
    (P.TAG, TEXT): Step(_block),
    (P.TAG, TAG_END): Step(_tag_end, P.CONTENT),
    (P.TAG, EOS): _unclosed(TAG),
    (P.ITEMS, TEXT): Step(arr.items),
    (P.ITEMS, EOS): Step(_cut),
    (P.ITEM, TEXT): Step(arr.item),
    (P.ITEM, EOS): Step(_cut),
    (P.SKIP, TEXT): Step(arr.skip),
    (P.SKIP, EOS): Step(_cut),
    (P.AFTER, TEXT): Step(_after),
    (P.AFTER, EOS): Step(_after_end),
    (P.VERBATIM, TEXT): Step(to_content),
    (P.VERBATIM, EOS): Step(nothing),
}
for _marker, _phase in _BLOCKS.items():
    _steps[(P.LEAD, _marker)] = _open(_phase)
    _steps[(P.CONTENT, _marker)] = _open(_phase)
XlamToolParser.table = Table(
    phases=tuple(P),
    markers=(FENCE, TOOL_CALLS, TAG, TAG_END, THINK_END),
    steps=_steps,
)
