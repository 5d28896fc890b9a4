"""Step3 tool calls (vLLM 0.33 `Step3ToolParser`): a block of `<｜tool_call_begin｜>` parts,

    <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="f">
    <steptml:parameter name="city">Paris</steptml:parameter></steptml:invoke><｜tool_call_end｜>
    <｜tool_calls_end｜>

Batch upstream: the output is split at the first `<｜tool_calls_begin｜>` and the first
`<｜tool_calls_end｜>` after it; the block is split at every `<｜tool_call_begin｜>` (the text
before the first one is a part too). A part counts when it holds `<｜tool_call_end｜>`, the
text before that holds `<｜tool_sep｜>`, the type before the separator is "function" (after
strip) and `<steptml:invoke name="...">` names the function; its parameters are every closed
`<steptml:parameter name="K">V</steptml:parameter>` (V stripped, a repeated key keeps its
first position and last value), cast by the tool's schema type (string, integer, number,
boolean, null, as `_cast_arguments`). With a call, content is `(before + after).strip()`
(None when empty); with no call, or no block end, the whole output is content, verbatim.

Streaming: content before the block streams, holding back trailing whitespace (and a
whitespace-only start); the block's raw text is held while no call is decided, so a block
without calls becomes content verbatim at its end; a part is held until its
`<｜tool_call_end｜>` and then sent whole (upstream's stream also sends arguments only then).

Divergences from vLLM's batch (stream == our batch instead; tests name them): a block cut by
the end of the output keeps the calls it completed (vLLM's batch: no calls, all content; its
stream sends them); leading whitespace of the content before a call had streamed (vLLM strips
it).
"""

from __future__ import annotations

import contextlib
import enum
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

from parsers._base import MAX_HELD_CHARS
from parsers._state import JsonState
from parsers.tools._machine import (
    ANY_MARKER,
    EOS,
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

__all__ = ["Step3ToolParser"]

CALLS_BEGIN = "<｜tool_calls_begin｜>"
CALLS_END = "<｜tool_calls_end｜>"
CALL_BEGIN = "<｜tool_call_begin｜>"
CALL_END = "<｜tool_call_end｜>"
SEP = "<｜tool_sep｜>"

_INVOKE = regex.compile(r'<steptml:invoke name="([^"]+)">')
_PARAM = regex.compile(r'<steptml:parameter name="([^"]+)">(.*?)</steptml:parameter>', regex.DOTALL)


class P(enum.StrEnum):
    CONTENT = "content"  # before the block
    PART = "part"  # inside a part of the block, its text held in call.raw
    DONE = "done"  # after a part's end, until the next part
    AFTER = "after"  # after the block end, calls were made: stripped content
    VERBATIM = "verbatim"  # after a block without calls: everything is content


@dataclass(frozen=True, slots=True)
class Step3Ext(JsonState):
    """ws: whitespace held at the end of the content; nonws: other content was sent."""

    ws: str = ""
    nonws: bool = False


@dataclass(frozen=True, slots=True)
class Step3State(ToolStreamState):
    call: CallState | None = None
    ext: Step3Ext = Step3Ext()


def _ext(run: Run[Any]) -> Step3Ext:
    ext = run.ext
    assert isinstance(ext, Step3Ext)
    return ext


def _content_text(run: Run[Any], text: str) -> None:
    """Content that a call may still strip: trailing whitespace is held (and, after the
    block, whitespace before any other content is dropped)."""
    ext = _ext(run)
    combined = ext.ws + text
    if run.phase == P.AFTER and not ext.nonws:
        combined = combined.lstrip()
    body = combined.rstrip()
    ws = combined[len(body) :]
    if body:
        run.content(body)
    if len(ws) > MAX_HELD_CHARS:  # documented bound: an overlong run streams
        run.content(ws)
        ws = ""
    run.ext = ext.replace(ws=ws, nonws=ext.nonws or bool(body))


def _open_block(run: Run[Any], marker: str) -> None:
    run.open_call_raw(marker)
    run.call = CallState()


def _part_text(run: Run[Any], text: str) -> None:
    run.keep_raw(text)
    run.call = run.call.replace(raw=run.call.raw + text)


def _new_part(run: Run[Any], marker: str) -> None:
    run.keep_raw(marker)
    run.call = CallState()


def _end_part(run: Run[Any], marker: str) -> None:
    raw = run.call.raw
    run.keep_raw(marker)
    run.call = None
    parser: Step3ToolParser = run.parser
    found = parser.decide(raw)
    if found is not None:
        run.emit_call(*found)


def _done_text(run: Run[Any], text: str) -> None:
    run.keep_raw(text)


def _end_block(run: Run[Any], marker: str) -> None:
    run.call = None
    if run.n_calls:
        run.phase = P.AFTER
        return
    ext = _ext(run)
    run.content(ext.ws + run.pending + marker)  # no call: the output is content verbatim
    run.pending = ""
    run.ext = ext.replace(ws="")
    run.phase = P.VERBATIM


def _content_end(run: Run[Any], text: str) -> None:
    ext = _ext(run)
    run.content(ext.ws)  # no block: the output is content verbatim
    run.ext = ext.replace(ws="")


def _block_cut(run: Run[Any], text: str) -> None:
    """The output ended inside the block: without calls it is all content (as upstream);
    calls already made are kept (documented divergence)."""
    ext = _ext(run)
    if not run.n_calls:
        run.content(ext.ws + run.pending)
    run.pending = ""
    run.call = None
    run.phase = P.DONE
    run.ext = ext.replace(ws="")


def _after_end(run: Run[Any], text: str) -> None:
    run.ext = _ext(run).replace(ws="")


class Step3ToolParser(TableToolParser):
    name: ClassVar[str] = "step3"
    state_class = Step3State
    initial_phase = P.CONTENT
    call_phases = frozenset({P.PART})

    def decide(self, part: str) -> tuple[str, str] | None:
        """A part's text up to its end -> (name, arguments JSON), or None if it is no call."""
        if SEP not in part:
            return None
        kind, invoke = part.split(SEP, 1)
        if kind.strip() != "function":
            return None
        name = _INVOKE.search(invoke)
        if name is None:
            return None
        params: dict[str, Any] = {}
        for key, value in _PARAM.findall(invoke):
            params[key] = value.strip()
        return name.group(1), json.dumps(self._cast(name.group(1), params), ensure_ascii=False)

    def _cast(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """vLLM's `_cast_arguments`: the first tool of that name gives the types."""
        for tool in self.tools:
            function = tool.get("function") or {}
            if function.get("name") != name:
                continue
            properties = (function.get("parameters") or {}).get("properties", {})
            for key, value in params.items():
                prop = properties.get(key, {})
                kind = prop.get("type") if isinstance(prop, dict) else None
                params[key] = _cast_value(value, kind)
            break
        return params


def _cast_value(value: str, kind: object) -> Any:
    if kind == "string":
        return value.strip()
    if kind in ("integer", "number"):
        with contextlib.suppress(ValueError):
            return int(value) if kind == "integer" else float(value)
        return value
    if kind == "boolean":
        lower = value.lower()
        return lower == "true" if lower in ("true", "false") else value
    if kind == "null":
        return None if value.lower() == "null" else value
    return value


Step3ToolParser.table = Table(
    tuple(P),
    (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP),
    {
        (P.CONTENT, TEXT): Step(_content_text),
        (P.CONTENT, CALLS_BEGIN): Step(_open_block, P.PART),
        (P.CONTENT, EOS): Step(_content_end),
        (P.PART, TEXT): Step(_part_text),
        (P.PART, CALL_BEGIN): Step(_new_part),
        (P.PART, CALL_END): Step(_end_part, P.DONE),
        (P.PART, CALLS_END): Step(_end_block),
        (P.PART, EOS): Step(_block_cut),
        (P.DONE, TEXT): Step(_done_text),
        (P.DONE, CALL_BEGIN): Step(_new_part, P.PART),
        (P.DONE, CALLS_END): Step(_end_block),
        (P.DONE, EOS): Step(_block_cut),
        (P.AFTER, TEXT): Step(_content_text),
        (P.AFTER, EOS): Step(_after_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, ANY_MARKER): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
