"""Poolside Laguna tool calls (vLLM 0.33 `PoolsideV1ToolParser`, GLM-4 style):

    <tool_call>get_weather
    <arg_key>city</arg_key><arg_value>Paris</arg_value>
    </tool_call>

Batch upstream: every `<tool_call>...</tool_call>` (shortest, in order) is a candidate; its
detail (`<tool_call>\\s*NAME\\s*\\n?\\s*(<arg_key>...)?</tool_call>`, NAME without newline or
`<`, searched in the candidate) gives the name (stripped) and the pairs
`<arg_key>K</arg_key>\\s*<arg_value>V</arg_value>`; a candidate without detail is skipped. K is
stripped; V is verbatim when the tool's schema types K as "string", else `V.strip()` read as
JSON, then as a Python literal, else kept as a string; arguments are `json.dumps` of the pairs
(a repeated key: first position, last value). Any error while doing so (a value that is no
JSON, such as a set literal) makes the whole output content. With a call, content is the text
before the first `<tool_call>` (None when blank); with none, the output verbatim.

Streaming: content before the first `<tool_call>` streams, a whitespace-only start held; from
there the raw text is held while no call is decided (a call-less output is content verbatim at
its end); each candidate is held to its `</tool_call>` and then sent whole (arguments are
decided at the close, as the batch does; vLLM's stream streams string values earlier).

Divergences from vLLM's batch (stream == our batch instead): a candidate that errors after a
call was sent is skipped (vLLM: all content, taking back the sent calls).
"""

from __future__ import annotations

import ast
import enum
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import regex

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

__all__ = ["PoolsideV1ToolParser"]

CALL_START, CALL_END = "<tool_call>", "</tool_call>"
_DETAIL = regex.compile(r"<tool_call>\s*([^\n<]+?)\s*\n?\s*(<arg_key>.*?)?</tool_call>", regex.DOTALL)
_PAIR = regex.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", regex.DOTALL)


class P(enum.StrEnum):
    CONTENT = "content"  # before the first <tool_call>
    CALL = "call"  # a candidate, held in call.raw
    BETWEEN = "between"  # after a candidate: text is dropped
    VERBATIM = "verbatim"  # a candidate errored before any call: all output is content


class _Raises(Exception):
    """Where vLLM's extraction raises (its `except Exception` makes all output content)."""


@dataclass(frozen=True, slots=True)
class PoolsideExt(JsonState):
    """ws: the whitespace-only start of the content, held; nonws: other content was sent."""

    ws: str = ""
    nonws: bool = False


@dataclass(frozen=True, slots=True)
class PoolsideState(ToolStreamState):
    call: CallState | None = None
    ext: PoolsideExt = PoolsideExt()


def _ext(run: Run[Any]) -> PoolsideExt:
    ext = run.ext
    assert isinstance(ext, PoolsideExt)
    return ext


def _content_text(run: Run[Any], text: str) -> None:
    ext = _ext(run)
    if ext.nonws:
        run.content(text)
    elif text.strip():
        run.content(ext.ws + text)
        run.ext = ext.replace(ws="", nonws=True)
    else:
        run.ext = ext.replace(ws=ext.ws + text)


def _content_end(run: Run[Any], text: str) -> None:
    ext = _ext(run)
    run.content(ext.ws)
    run.ext = ext.replace(ws="")


def _open(run: Run[Any], marker: str) -> None:
    run.keep_raw(marker)
    run.call = CallState(raw=marker)


def _call_text(run: Run[Any], text: str) -> None:
    run.keep_raw(text)
    run.call = run.call.replace(raw=run.call.raw + text)


def _close(run: Run[Any], marker: str) -> None:
    raw = run.call.raw + marker
    run.keep_raw(marker)
    run.call = None
    parser: PoolsideV1ToolParser = run.parser
    try:
        found = parser.decide(raw)
    except _Raises:
        if run.n_calls == 0:  # upstream: the whole output is content
            run.content(_ext(run).ws + run.pending)
            run.pending = ""
            run.ext = _ext(run).replace(ws="")
            run.phase = P.VERBATIM
        return  # after a sent call: skipped (documented divergence)
    if found is not None:
        run.emit_call(*found)


def _between_text(run: Run[Any], text: str) -> None:
    run.keep_raw(text)


def _end(run: Run[Any], text: str) -> None:
    """End of output after the first <tool_call>: without a call it is all content."""
    ext = _ext(run)
    if run.n_calls == 0:
        run.content(ext.ws + run.pending)
    run.pending = ""
    run.call = None
    run.phase = P.BETWEEN
    run.ext = ext.replace(ws="")


class PoolsideV1ToolParser(TableToolParser):
    name: ClassVar[str] = "poolside_v1"
    state_class = PoolsideState
    initial_phase = P.CONTENT
    call_phases = frozenset({P.CALL})

    def decide(self, raw: str) -> tuple[str, str] | None:
        """One `<tool_call>...</tool_call>` -> (name, arguments JSON); None: skipped."""
        detail = _DETAIL.search(raw)
        if detail is None:
            return None
        name = detail.group(1).strip()
        pairs = _PAIR.findall(detail.group(2)) if detail.group(2) else []
        args: dict[str, Any] = {}
        for key, value in pairs:
            key = key.strip()
            args[key] = value if self._is_string(name, key) else _deserialize(value.strip())
        try:
            return name, json.dumps(args, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:  # e.g. a set or bytes literal
            raise _Raises from exc

    def _is_string(self, name: str, key: str) -> bool:
        for tool in self.tools:
            function = tool.get("function", tool)
            if not isinstance(function, Mapping) or function.get("name") != name:
                continue
            params = function.get("parameters")
            if params is None:
                return False
            properties = params.get("properties", {}) if isinstance(params, Mapping) else None
            prop = properties.get(key, {}) if isinstance(properties, Mapping) else None
            if not isinstance(prop, Mapping):
                raise _Raises(f"schema of {name!r} is not an object")
            return prop.get("type") == "string"
        return False


def _deserialize(value: str) -> Any:
    """vLLM's `_deserialize`: JSON, else a Python literal, else the text."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    except RecursionError as exc:
        raise _Raises from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    except (TypeError, RecursionError, MemoryError) as exc:  # e.g. "{[1]}": unhashable
        raise _Raises from exc


PoolsideV1ToolParser.table = Table(
    tuple(P),
    (CALL_START, CALL_END),
    {
        (P.CONTENT, TEXT): Step(_content_text),
        (P.CONTENT, CALL_START): Step(_open, P.CALL),
        (P.CONTENT, EOS): Step(_content_end),
        (P.CALL, TEXT): Step(_call_text),
        (P.CALL, CALL_END): Step(_close, P.BETWEEN),
        (P.CALL, EOS): Step(_end),
        (P.BETWEEN, TEXT): Step(_between_text),
        (P.BETWEEN, CALL_START): Step(_open, P.CALL),
        (P.BETWEEN, EOS): Step(_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, ANY_MARKER): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
