"""GigaChat 3 tool calls: `<|message_sep|>\\n\\nfunction call<|role_sep|>\\n{"name": ..., "arguments": {...}}`
(or the JSON after `<|function_call|>`), one call that runs to the end of the output.

vLLM 0.33 (`GigaChat3ToolParser`) batch semantics reproduced here:

* the call is the text after the first `function call<|role_sep|>\\n` or `<|function_call|>`,
  read whole as JSON (`strict=False`); not JSON: the output is content;
* it is a call when it is an object with `name` and an object `arguments` (written with
  `json.dumps`); otherwise there is no call and the output is content;
* with a call, the content is the text before the first `<|message_sep|>` or
  `<|function_call|>` (None when empty).

Streaming: content streams until `<|message_sep|>`; the blanks and header after it are held
(a few characters) until `function call<|role_sep|>\\n` shows a call or other text shows
there is none; the body is read by Hermes' reader (`_json_calls`): the call is sent once its
name and then the start of its arguments showed, and the arguments stream.

Divergences from vLLM's batch (stream == our batch instead; `DIVERGENCES` in the tests):
* Hermes' for a call that breaks after it was sent (`hermes_parser`): text after the call's
  JSON is content (vLLM: the output is not JSON, all content), arguments that stop being JSON
  keep their text, a call cut by the end keeps its arguments; arguments that are not an object
  are kept as the call's (vLLM: no call);
* a header only counts right after `<|message_sep|>` and blanks (vLLM finds it anywhere),
  and only the first `<|message_sep|>` may open one;
* a trailing `</s>` is not cut off, and raw control characters inside JSON strings end the
  JSON (vLLM reads with `strict=False`).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._errors import StateError
from parsers.tools._base import json_dumps
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

__all__ = ["GigaChat3ToolParser"]

MESSAGE_SEP = "<|message_sep|>"
ROLE_SEP = "<|role_sep|>"
FUNCTION_CALL = "<|function_call|>"
HEADER = "function call"


class P(enum.StrEnum):
    CONTENT = "content"
    HEADER = "header"  # after <|message_sep|>: blanks and `function call` held
    NEWLINE = "newline"  # after `function call<|role_sep|>`: the "\n" the header ends with
    CALL = "call"  # the call's JSON, to the end of the output
    VERBATIM = "verbatim"  # no call: everything is content


@dataclass(frozen=True, slots=True)
class GigaState(ToolStreamState):
    call: JsonCall | None = None


class GigaChat3ToolParser(TableToolParser):
    name: ClassVar[str] = "gigachat3"
    initial_phase: ClassVar[str] = P.CONTENT
    state_class = GigaState
    call_phases = frozenset({P.CALL})

    @property
    def reader(self) -> JsonCallReader:
        return JsonCallReader(
            args_keys=("arguments",), limit=self.call_limit, ends_with_value=False,
            decide=_decide, reject=_reject,
        )  # fmt: skip

    def check_ext(self, state: ToolStreamState) -> None:
        if state.phase == P.HEADER and state.pending[len(MESSAGE_SEP):].strip() and not _header_prefix(state.pending):
            raise StateError(f"{self.name}: held text is no call header")


def _reader(run: Run) -> JsonCallReader:
    parser = run.parser
    assert isinstance(parser, GigaChat3ToolParser)
    return parser.reader


def gigachat_call(body: str) -> tuple[str, str] | None:
    """(name, arguments) of a call body, or None when vLLM finds no call in it."""
    try:
        obj: Any = json.loads(body, strict=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or "name" not in obj or not isinstance(obj.get("arguments"), dict):
        return None
    name = obj["name"]
    return (name, json_dumps(obj["arguments"])) if isinstance(name, str) else None


def _decide(run: Run, raw: str) -> bool:
    found = gigachat_call(raw)
    if found is not None:
        run.emit_call(*found)
    return found is not None


def _reject(run: Run, raw: str) -> None:
    run.reject_call(raw, P.VERBATIM, P.VERBATIM)


def _header_prefix(pending: str) -> bool:
    """Whether the text held after <|message_sep|> may still become the header's text."""
    held = pending[len(MESSAGE_SEP):].lstrip()
    return HEADER.startswith(held)


def _message_sep(run: Run, marker: str) -> None:
    run.open_call_raw(marker)


def _header_text(run: Run, text: str) -> None:
    run.keep_raw(text)
    if not _header_prefix(run.pending):
        _not_a_call(run)


def _not_a_call(run: Run) -> None:
    run.content(run.pending)
    run.pending = ""
    run.phase = P.VERBATIM


def _role_sep(run: Run, marker: str) -> None:
    run.keep_raw(marker)
    if run.pending[len(MESSAGE_SEP):-len(ROLE_SEP)].lstrip() == HEADER:
        run.phase = P.NEWLINE
    else:
        _not_a_call(run)


def _newline(run: Run, text: str) -> str | None:
    if not text.startswith("\n"):
        _not_a_call(run)
        return text
    run.keep_raw("\n")
    run.phase = P.CALL
    _reader(run).open(run)
    return text[1:] or None


def _open_call(run: Run, marker: str) -> None:
    run.open_call_raw(marker)
    _reader(run).open(run)


def _body(run: Run, text: str) -> None:
    _reader(run).read(run, text)


def _call_eos(run: Run, text: str) -> None:
    _reader(run).close(run, "")
    run.phase = P.VERBATIM


def _held_eos(run: Run, text: str) -> None:
    _not_a_call(run)


GigaChat3ToolParser.table = Table(
    phases=tuple(P),
    markers=(MESSAGE_SEP, ROLE_SEP, FUNCTION_CALL),
    steps={
        (P.CONTENT, TEXT): Step(to_content),
        (P.CONTENT, MESSAGE_SEP): Step(_message_sep, P.HEADER),
        (P.CONTENT, FUNCTION_CALL): Step(_open_call, P.CALL),
        (P.CONTENT, EOS): Step(nothing),
        (P.HEADER, TEXT): Step(_header_text),
        (P.HEADER, ROLE_SEP): Step(_role_sep),
        (P.HEADER, FUNCTION_CALL): Step(_open_call, P.CALL),
        (P.HEADER, EOS): Step(_held_eos),
        (P.NEWLINE, TEXT): Step(_newline),
        (P.NEWLINE, EOS): Step(_held_eos),
        (P.CALL, TEXT): Step(_body),
        (P.CALL, EOS): Step(_call_eos),
        (P.VERBATIM, TEXT): Step(to_content),
        (P.VERBATIM, EOS): Step(nothing),
    },
)
