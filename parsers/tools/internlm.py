"""InternLM2 / Intern-S1 tool calls: `<|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|>`.

vLLM 0.33 (`Internlm2ToolParser`) batch semantics reproduced here:

* no `<|action_start|><|plugin|>`: the output is content;
* the call's text runs from the first `{` after the marker to `<|action_end|>` (or the end of
  the output) and must `json.loads` as an object with a `name`; its arguments are
  `json.dumps` of `parameters`, else `arguments`, else `{}` (`ensure_ascii=False`);
* content is the text before the marker (None when empty); text between the marker and the
  `{`, and after `<|action_end|>`, is dropped.

Streaming: content streams until the marker; a call is sent once its object has shown its
name and then the start of its arguments, and the arguments stream (`_json_calls`).

Divergences from vLLM's batch (stream == our batch instead; tests `test_internlm_*`). vLLM
raises (no response) where the call is not JSON or has no string name, and where the output
holds two or more actions; ours then gives: each action its own call (Intern-S1 renders
parallel calls this way); a call that is not a call before it commits, the whole output as
content; a call whose text breaks after it was sent, the `_json_calls` handling (its text
is kept). A `parameters` member after an `arguments` member that already streamed is not
taken (vLLM prefers `parameters`).
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
    drop,
    nothing,
    to_content,
)

__all__ = ["InternLMToolParser", "internlm_call"]

START = "<|action_start|><|plugin|>"
END = "<|action_end|>"


def internlm_call(body: str) -> tuple[str, str] | None:
    """(name, arguments) of an action's JSON text, or None where vLLM raises."""
    obj: Any = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    return obj["name"], json_dumps(obj.get("parameters", obj.get("arguments", {})))


class P(enum.StrEnum):
    CONTENT = "content"
    PRE = "pre"  # after the marker, before the call's `{`: dropped
    CALL = "call"
    BETWEEN = "between"  # after <|action_end|>: dropped
    VERBATIM = "verbatim"  # a rejected first call: everything is content


@dataclass(frozen=True, slots=True)
class InternLMState(ToolStreamState):
    call: JsonCall | None = None


class InternLMToolParser(TableToolParser):
    name: ClassVar[str] = "internlm"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = InternLMState
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("parameters", "arguments"), limit=self.call_limit,
            ends_with_value=False, decide=_decide, reject=_reject,
        )  # fmt: skip



def _decide(run: Run[InternLMToolParser], raw: str) -> bool:
    found = internlm_call(raw)
    if found is not None:
        run.emit_call(*found)
    return found is not None


def _reject(run: Run[InternLMToolParser], raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.BETWEEN)


def _open(run: Run[InternLMToolParser], marker: str) -> None:
    run.open_call_raw(marker)


def _pre(run: Run[InternLMToolParser], text: str) -> str | None:
    at = text.find("{")
    if at == -1:
        run.keep_raw(text)
        return None
    run.keep_raw(text[:at])
    run.parser.reader.open(run)
    run.phase = P.CALL
    return text[at:]


def _pre_end(run: Run[InternLMToolParser], text: str) -> None:
    """An action without an object: vLLM raises; ours is content."""
    if run.n_calls == 0:
        run.reject_call(text, P.VERBATIM, P.BETWEEN)
    else:
        run.phase = P.BETWEEN


def _pre_again(run: Run[InternLMToolParser], marker: str) -> None:
    """A marker again before any object: the first action is not a call."""
    _pre_end(run, marker)
    if run.phase == P.BETWEEN:
        _open(run, marker)
        run.phase = P.PRE


def _body(run: Run[InternLMToolParser], text: str) -> None:
    run.parser.reader.read(run, text)


def _end(run: Run[InternLMToolParser], marker: str) -> None:
    run.parser.reader.close(run, marker)


def _eos(run: Run[InternLMToolParser], text: str) -> None:
    run.parser.reader.close(run, "")
    if run.phase == P.CALL:
        run.phase = P.BETWEEN


InternLMToolParser.table = Table(
    phases=tuple(P),
    markers=(START, END),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, START): Step(_open, P.PRE),
        (P.CONTENT, EOS): Step(nothing),
        (P.PRE, TEXT): Step(_pre),
        (P.PRE, START): Step(_pre_again),
        (P.PRE, END): Step(_pre_end),
        (P.PRE, EOS): Step(_pre_end),
        (P.CALL, TEXT): Step(_body),
        (P.CALL, END): Step(_end, P.BETWEEN),
        (P.CALL, EOS): Step(_eos),
        (P.BETWEEN, TEXT): Step(drop),
        (P.BETWEEN, START): Step(_open, P.PRE),
        (P.BETWEEN, EOS): Step(nothing),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
