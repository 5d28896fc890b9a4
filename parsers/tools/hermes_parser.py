"""Hermes / Qwen JSON tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

vLLM 0.33 (`Hermes2ProToolParser`, also `qwen3_json`) batch semantics reproduced here:

* content is the text before the first `<tool_call>` (None when empty); text between and
  after calls is dropped;
* a call's body runs to the next `</tool_call>`, or to the end of the output when it never
  closes; the body must be a JSON object with a string `name` and an `arguments` key, whose
  value becomes `json.dumps(arguments, ensure_ascii=False)`;
* any malformed call makes the whole output content.

Streaming: content streams as it arrives, holding back only a possible `<tool_call>` start.
A call is sent (id and name) once its body has shown its name and then the start of its
`arguments` value; the arguments then stream as canonical JSON (`_json_args`, ENVELOPE).
Until then the body is held (a few dozen characters), so a body that is not a call still
becomes content as vLLM's batch makes it. A body that names its arguments before its name is
held whole and decided at its end.

Divergences from vLLM's batch (stream == our batch instead; tests `test_hermes_divergence_*`),
each because a call had been sent before the rest of its text could be known:
* a call after an emitted one that is malformed before it commits: its raw text (markers
  included) becomes content and the earlier calls stay (vLLM: the whole output is content);
* a call whose arguments turn out not to be JSON after they started (a syntax error, a raw
  newline inside a string, a call cut by `</tool_call>` or by the end of the output): it
  stays, its arguments are the canonical text up to the fault followed by the body's raw text
  from there (vLLM: all output content); text after a complete `arguments` value that makes
  the body invalid becomes content;
* duplicate `name` / `arguments` members: the first ones count (json takes the last).
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

__all__ = ["HermesToolParser", "HermesState", "hermes_call", "hermes_table"]

START = "<tool_call>"
END = "</tool_call>"


def hermes_call(body: str) -> tuple[str, str] | None:
    """(name, arguments) of a `{"name", "arguments"}` JSON body, or None if vLLM rejects it."""
    obj: Any = json_loads(body)
    if not is_json(obj) or not isinstance(obj, dict) or "arguments" not in obj:
        return None
    name = obj.get("name")
    if not isinstance(name, str):
        return None
    return name, json_dumps(obj["arguments"])


class P(enum.StrEnum):
    CONTENT = "content"
    CALL = "call"  # inside <tool_call>: the body
    BETWEEN = "between"  # after a call: text is dropped
    VERBATIM = "verbatim"  # a rejected first call: everything is content


@dataclass(frozen=True, slots=True)
class HermesState(ToolStreamState):
    call: JsonCall | None = None


class HermesToolParser(TableToolParser):
    name: ClassVar[str] = "hermes"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = HermesState
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=False,
            decide=_decide, reject=_reject,
        )  # fmt: skip



def _decide(run: Run[HermesToolParser], raw: str) -> bool:
    found = hermes_call(raw)
    if found is not None:
        run.emit_call(*found)
    return found is not None


def _reject(run: Run[HermesToolParser], raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.BETWEEN)


def _open(run: Run[HermesToolParser], marker: str) -> None:
    run.open_call_raw(marker)
    run.parser.reader.open(run)


def _body(run: Run[HermesToolParser], text: str) -> None:
    run.parser.reader.read(run, text)


def _end(run: Run[HermesToolParser], marker: str) -> None:
    run.parser.reader.close(run, marker)


def _eos(run: Run[HermesToolParser], text: str) -> None:
    run.parser.reader.close(run, "")
    if run.phase == P.CALL:
        run.phase = P.BETWEEN


def hermes_table(start: str, end: str) -> Table:
    """The Hermes machine over a family's own call markers (longcat reuses it)."""
    return Table(
        phases=tuple(P),
        markers=(start, end),
        steps={
            (P.CONTENT, TEXT): Step(to_content),
            (P.CONTENT, start): Step(_open, P.CALL),
            (P.CONTENT, EOS): Step(nothing),
            (P.CALL, TEXT): Step(_body),
            (P.CALL, end): Step(_end, P.BETWEEN),
            (P.CALL, EOS): Step(_eos),
            (P.BETWEEN, TEXT): Step(drop),
            (P.BETWEEN, start): Step(_open, P.CALL),
            (P.BETWEEN, EOS): Step(nothing),
            (P.VERBATIM, TEXT): Step(to_content),
            (P.VERBATIM, EOS): Step(nothing),
        },
    )


HermesToolParser.table = hermes_table(START, END)
