"""Llama 3.x / 4 JSON tool calls: `<|python_tag|>{"name": ..., "parameters": {...}}; {...}`.

vLLM 0.33 (`Llama3JsonToolParser`, also `llama4_json`) batch semantics reproduced here:

* every `{` in the output starts a JSON object (`raw_decode`); each must have a string
  `name` and an `arguments` (else `parameters`) key, whose value becomes
  `json.dumps(value, ensure_ascii=False)`; text between objects is ignored;
* with at least one call the content is None; any malformed object (or none at all) makes
  the whole output content;
* quirk kept: a `{` directly after an object's closing `}` is skipped (vLLM's "inside the
  previous object" test is off by one), so the next `{` inside it is tried instead.

Streaming: whether this is a tool-call output is decided at its first non-whitespace text
(`{`, `<|python_tag|>`, or `[` followed by blanks and `{`: a list of calls, whose brackets
vLLM's batch ignores); that leading text is held (bounded by MAX_HELD_CHARS). In a tool-call
output a call is sent once its object has shown its name and the start of its arguments
(`_json_calls`), and its arguments stream; the text kept before the first call (`pending`)
turns the whole output into content if that call is malformed.

Divergences from vLLM's batch (stream == our batch instead; tests `test_llama3_divergence_*`),
each where vLLM's batch would take back text or calls already streamed: prose before the
first object is content and the objects after it stay content (vLLM's own stream does the
same); a malformed object after an emitted call, including the inner object vLLM's off-by-one
skip picks in `{..}{..}`, becomes content (its text up to the fault) and the earlier calls
stay; a call whose arguments break after they started keeps its text: the canonical
arguments so far, then the raw text to the end of the output (nothing ends such a call); an
`arguments` member after a `parameters` member that already streamed is not taken.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS
from parsers._state import JsonState
from parsers.tools._base import is_json, json_dumps, json_raw_decode
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

__all__ = ["Llama3JsonToolParser", "llama_call"]

PYTHON_TAG = "<|python_tag|>"


def llama_call(raw: str) -> tuple[str, str] | None:
    """(name, arguments) of one JSON object as vLLM accepts it, or None."""
    obj: Any
    obj, end = json_raw_decode(raw)
    if not is_json(obj) or not isinstance(obj, dict) or "name" not in obj:
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        return None
    if not isinstance(obj["name"], str):
        return None
    return obj["name"], json_dumps(args)


class P(enum.StrEnum):
    LEAD = "lead"  # deciding whether this output is a tool-call output (text held in `ext`)
    BETWEEN = "between"  # outside objects: text is dropped
    CALL = "call"  # inside an object
    VERBATIM = "verbatim"  # not a tool-call output, or a rejected first call


@dataclass(frozen=True, slots=True)
class LlamaExt(JsonState):
    lead: str = ""  # LEAD: the output's leading whitespace / `[` / python-tag prefix
    closed: bool = False  # BETWEEN: the previous character closed an object (the skip quirk)


@dataclass(frozen=True, slots=True)
class LlamaState(ToolStreamState):
    call: JsonCall | None = None
    ext: LlamaExt = LlamaExt()


class Llama3JsonToolParser(TableToolParser):
    name: ClassVar[str] = "llama3_json"
    initial_phase: ClassVar[str] = P.LEAD
    state_class = LlamaState
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments", "parameters"), limit=self.call_limit,
            ends_with_value=True, decide=_decide, reject=_reject,
        )  # fmt: skip


def _decide(run: Run[Llama3JsonToolParser], raw: str) -> bool:
    found = llama_call(raw)
    if found is not None:
        run.emit_call(*found)
        run.ext = run.ext.replace(closed=True)
    return found is not None


def _reject(run: Run[Llama3JsonToolParser], raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.BETWEEN)


# -- the lead -----------------------------------------------------------------------------


def _lead(run: Run[Llama3JsonToolParser], text: str) -> str | None:
    lead = run.ext.lead + text
    body = lead.lstrip()
    if body.startswith("["):  # a list of calls: `[` and blanks are held like blanks
        body = body[1:].lstrip()
    held = len(lead) - len(body)
    if body.startswith("{") or body.startswith(PYTHON_TAG):
        run.keep_raw(lead[:held])
        run.ext = run.ext.replace(lead="")
        run.phase = P.BETWEEN
        rest: str = body
        return rest
    if (body and not PYTHON_TAG.startswith(body)) or held > MAX_HELD_CHARS:
        _verbatim(run, lead)
        return None
    run.ext = run.ext.replace(lead=lead)
    return None


def _lead_tag(run: Run[Llama3JsonToolParser], marker: str) -> str | None:
    if not run.ext.lead.strip(" \t\r\n["):
        return _lead(run, marker)
    _verbatim(run, run.ext.lead + marker)
    return None


def _verbatim(run: Run[Llama3JsonToolParser], text: str) -> None:
    run.ext = run.ext.replace(lead="")
    run.phase = P.VERBATIM
    run.content(text)


def _lead_end(run: Run[Llama3JsonToolParser], text: str) -> None:
    _verbatim(run, run.ext.lead)


# -- between and inside objects ----------------------------------------------------------------


def _between(run: Run[Llama3JsonToolParser], text: str) -> str | None:
    start = 1 if run.ext.closed and text.startswith("{") else 0
    if text:
        run.ext = run.ext.replace(closed=False)
    at = text.find("{", start)
    if at == -1:
        run.keep_raw(text)
        return None
    run.keep_raw(text[:at])
    run.open_call_raw("")
    run.parser.reader.open(run)
    run.phase = P.CALL
    return text[at:]


def _between_end(run: Run[Llama3JsonToolParser], text: str) -> None:
    if run.n_calls == 0:  # no call at all: the whole output is content
        run.content(run.pending)
        run.pending = ""


def _call(run: Run[Llama3JsonToolParser], text: str) -> str | None:
    rest = run.parser.reader.read(run, text)
    if rest is None:
        return None
    if run.call is not None:  # a committed call ended with its value
        run.call = None
        run.ext = run.ext.replace(closed=True)
    if run.phase == P.CALL:
        run.phase = P.BETWEEN
    return rest or None


def _call_end(run: Run[Llama3JsonToolParser], text: str) -> None:
    run.parser.reader.close(run, "")
    if run.phase == P.CALL:
        run.phase = P.BETWEEN
    _between_end(run, "")


Llama3JsonToolParser.table = Table(
    phases=tuple(P),
    markers=(PYTHON_TAG,),
    steps={
        (P.LEAD, TEXT): Step(_lead),
        (P.LEAD, PYTHON_TAG): Step(_lead_tag),
        (P.LEAD, EOS): Step(_lead_end),
        (P.BETWEEN, TEXT): Step(_between),
        (P.BETWEEN, EOS): Step(_between_end),
        (P.CALL, TEXT): Step(_call),
        (P.CALL, EOS): Step(_call_end),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
