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
without calls becomes content verbatim at its end. A part's type text is held to its
`<｜tool_sep｜>`, then its text to the first complete `<steptml:invoke name="...">`: the call
commits there (its name is sent) and its parameters stream through `StepParams`, from the
start of the text after the separator (findall reads parameters anywhere in it). A value
stripped to a string (the schema types it "string", something else than integer / number /
boolean / null, or not at all) streams as fragments: its leading whitespace is dropped, a
trailing whitespace run and a possible `</steptml:parameter>` are held back. An integer,
number, boolean or null value is held until its closing tag, since its cast needs the whole
text. State: a part's head, a parameter's name, a typed value or a held tail, never text
already sent.

Divergences from vLLM's batch (stream == our batch instead; "a call that streamed stays a
call", tests name them): a call that streamed is kept where vLLM skips its part or drops the
block: the part ends at a `<｜tool_call_begin｜>` or `<｜tool_calls_end｜>` before its
`<｜tool_call_end｜>`, or the output ends inside the block (vLLM's batch: with no other call,
all content; a block cut after completed calls keeps them too); a streamed value that never
closes is kept (vLLM drops the parameter); a repeated parameter is written twice (`json.loads`
gives vLLM's object); leading whitespace of the content before a call had streamed (vLLM
strips it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import regex

from parsers._base import MAX_HELD_CHARS
from parsers._errors import StateError
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
    drop,
    end_call_args,
    feed_call_args,
    nothing,
    to_content,
)
from parsers.tools._steptml import StepParams, StepParamsState

__all__ = ["Step3ToolParser"]

CALLS_BEGIN = "<｜tool_calls_begin｜>"
CALLS_END = "<｜tool_calls_end｜>"
CALL_BEGIN = "<｜tool_call_begin｜>"
CALL_END = "<｜tool_call_end｜>"
SEP = "<｜tool_sep｜>"
FUNCTION = "function"

_INVOKE = regex.compile(r'<steptml:invoke name="([^"]+)">')


class P(enum.StrEnum):
    CONTENT = "content"  # before the block
    TYPE = "type"  # a part's text before its separator, held in call.raw
    HEAD = "head"  # after the separator, before the invoke name: held in call.raw
    ARGS = "args"  # a committed call's parameters
    DONE = "done"  # a part that ended or is no call, until the next part
    AFTER = "after"  # after the block end, calls were made: stripped content
    VERBATIM = "verbatim"  # after a block without calls: everything is content


# -- the machine -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step3Call(CallState):
    args: StepParamsState | None = None


@dataclass(frozen=True, slots=True)
class Step3Ext(JsonState):
    """ws: whitespace held at the end of the content; nonws: other content was sent."""

    ws: str = ""
    nonws: bool = False


@dataclass(frozen=True, slots=True)
class Step3State(ToolStreamState):
    call: Step3Call | None = None
    ext: Step3Ext = Step3Ext()


SRun = Run["Step3ToolParser"]


def _ext(run: SRun) -> Step3Ext:
    ext = run.ext
    assert isinstance(ext, Step3Ext)
    return ext


def _content_text(run: SRun, text: str) -> None:
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


def _open_block(run: SRun, marker: str) -> None:
    run.open_call_raw(marker)
    run.call = Step3Call()


def _new_part(run: SRun, marker: str) -> None:
    """A `<｜tool_call_begin｜>`: a call still open ends without its end (kept, documented)."""
    if run.phase == P.ARGS:
        end_call_args(run)
    run.keep_raw(marker)
    run.call = Step3Call()
    run.phase = P.TYPE


def _type_text(run: SRun, text: str) -> None:
    run.keep_raw(text)
    raw = run.call.raw + text
    if FUNCTION.startswith(raw.strip()):
        run.call = run.call.replace(raw=raw)
    else:  # the type can no longer strip to "function": no call
        run.call = None
        run.phase = P.DONE


def _separator(run: SRun, marker: str) -> None:
    run.keep_raw(marker)
    if run.call.raw.strip() == FUNCTION:
        run.call = run.call.replace(raw="")
        run.phase = P.HEAD
    else:
        run.call = None
        run.phase = P.DONE


def _head_text(run: SRun, text: str) -> None:
    """The invoke text before its name: `search` of the held text is final once it matches
    (an earlier start would be decided by the quote that ends this one's prefix)."""
    run.keep_raw(text)
    call: Step3Call = run.call
    raw = call.raw + text
    found = _INVOKE.search(raw) if ">" in text else None
    if found is None:
        run.call = call.replace(raw=raw)
        return
    name = found.group(1)
    fmt = run.parser.arg_format(name)
    run.call = call.replace(name=name, raw="", args=fmt.start(name))
    run.start_call(name)
    run.phase = P.ARGS
    feed_call_args(run, raw)  # parameters are read from the start of the invoke text


def _end_part(run: SRun, marker: str) -> None:
    if run.phase == P.ARGS:
        end_call_args(run)
    run.keep_raw(marker)
    run.call = None
    run.phase = P.DONE


def _end_block(run: SRun, marker: str) -> None:
    if run.phase == P.ARGS:
        end_call_args(run)
    run.call = None
    if run.n_calls:
        run.phase = P.AFTER
        return
    ext = _ext(run)
    run.content(ext.ws + run.pending + marker)  # no call: the output is content verbatim
    run.pending = ""
    run.ext = ext.replace(ws="")
    run.phase = P.VERBATIM


def _content_end(run: SRun, text: str) -> None:
    ext = _ext(run)
    run.content(ext.ws)  # no block: the output is content verbatim
    run.ext = ext.replace(ws="")


def _block_cut(run: SRun, text: str) -> None:
    """The output ended inside the block: without calls it is all content (as upstream);
    calls already made are kept (documented divergence)."""
    if run.phase == P.ARGS:
        end_call_args(run)
    ext = _ext(run)
    if not run.n_calls:
        run.content(ext.ws + run.pending)
    run.pending = ""
    run.call = None
    run.phase = P.DONE
    run.ext = ext.replace(ws="")


def _after_end(run: SRun, text: str) -> None:
    run.ext = _ext(run).replace(ws="")


class Step3ToolParser(TableToolParser):
    name: ClassVar[str] = "step3"
    state_class = Step3State
    initial_phase = P.CONTENT
    call_phases = frozenset({P.TYPE, P.HEAD, P.ARGS})

    def check_ext(self, state: ToolStreamState) -> None:
        call = state.call
        if call is not None and (call.args is None) == (state.phase == P.ARGS):
            raise StateError(f"{self.name}: argument state outside a call's parameters")

    def arg_format(self, name: str) -> StepParams:
        return StepParams(self._kinds(name))

    def _kinds(self, name: str) -> dict[str, object]:
        """vLLM's `_cast_arguments` types: the first tool of that name, key -> its "type"."""
        for tool in self.tools:
            function = tool.get("function") or {}
            if function.get("name") != name:
                continue
            properties = (function.get("parameters") or {}).get("properties", {})
            if not isinstance(properties, Mapping):
                return {}
            return {key: prop.get("type") for key, prop in properties.items() if isinstance(prop, Mapping)}
        return {}


_PART_ENDS = {
    CALL_END: Step(_end_part),
    CALL_BEGIN: Step(_new_part),
    CALLS_END: Step(_end_block),
    EOS: Step(_block_cut),
}

Step3ToolParser.table = Table(
    tuple(P),
    (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP),
    {
        (P.CONTENT, TEXT): Step(_content_text),
        (P.CONTENT, CALLS_BEGIN): Step(_open_block, P.TYPE),
        (P.CONTENT, EOS): Step(_content_end),
        (P.TYPE, TEXT): Step(_type_text),
        (P.TYPE, SEP): Step(_separator),
        (P.HEAD, TEXT): Step(_head_text),
        (P.ARGS, TEXT): Step(feed_call_args),  # other markers are parameter text
        (P.DONE, TEXT): Step(drop),
        **{(phase, kind): step for phase in (P.TYPE, P.HEAD, P.ARGS, P.DONE)
           for kind, step in _PART_ENDS.items()},
        (P.AFTER, TEXT): Step(_content_text),
        (P.AFTER, EOS): Step(_after_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, ANY_MARKER): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)  # fmt: skip
