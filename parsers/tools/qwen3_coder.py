"""Qwen3-Coder XML tool calls (vLLM names `qwen3_coder` and `qwen3_xml`):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

vLLM 0.33 runs this format on its parser engine (`Qwen3EngineToolParser`, config
`vllm/parser/qwen3.py`). Batch semantics reproduced here (`extract_tool_calls`):

* the text is lexed left to right into the literals `<tool_call>`, `</tool_call>`,
  `<function=`, `</function>`, `<parameter=`, `</parameter>`, `<think>`, `</think>`, `>`;
  the lexer state decides what text means:
  - content: `<tool_call>` opens a call slot (preamble), `<function=` opens one directly
    (function name), `</think>` is dropped (kept with `think_end_is_content`, as vLLM's
    serving layer does without a reasoning parser), anything else is content;
  - preamble: `<function=` starts the name, `</tool_call>` closes the empty slot; text dropped;
  - name: text (and any other literal) up to `>`; `</function>`, `</tool_call>`,
    `<tool_call>`, `<function=` end the call without arguments;
  - arguments: everything up to `</function>` or the next `<function=` (so `</tool_call>`
    inside an unclosed function is argument text), or the end of the output;
  - between calls: `</tool_call>` returns to content, `<tool_call>` / `<function=` open
    another slot; text dropped;
* parameters are every `<parameter=NAME>VALUE` ended by `</parameter>` or the next
  `<parameter=` (an unterminated last value is dropped); NAME is kept verbatim, VALUE loses one
  leading and one trailing newline; a repeated NAME keeps its first position and last value;
  values are strings, then coerced to the tool's schema types (`_engine.fix_arg_types`:
  integer/number/boolean/object/array/null, falling back to any finite JSON the text decodes
  to, else the string); arguments are `json.dumps(..., ensure_ascii=False)`;
* a call's name is stripped; an empty name falls back to a `"name": "..."` in the body, then
  to the body as a `{"name", "arguments"}` JSON object; a call without a name is dropped;
* content follows the engine rules of `parsers.tools._engine`.

Streaming: content streams as it arrives (a possible literal start and trailing whitespace are
held back); each call is buffered from `<function=` and emitted whole (name, id, arguments)
when its end literal arrives or at the end of the output. State: `depth` is the offset in
`buf` where the call's arguments start (0 while the function name is still open); `scan`
resumes the literal search; `flag` / `pending` as documented in `_engine`.

A call whose name is only whitespace (and whose body yields no name) is dropped, but like
vLLM's engine, which announced it, the content after the first call slot is dropped too.

Divergence from vLLM's batch (stream == our batch instead; test
`test_qwen3_coder_divergence_leading_whitespace`): leading whitespace followed by other
content and then a returned call is kept (vLLM strips it; it streamed before the call could
be known); whitespace runs held back over MAX_HELD_CHARS are streamed likewise.
Not covered: special tokens vLLM's engine removes from text when it has the tokenizer's
`all_special_tokens` (our ToolParser has no such list; vLLM's parser keeps them without it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import Vocab
from parsers.tools._base import (
    Phase,
    Run,
    StreamingToolParser,
    find_marker,
    json_dumps,
    marker_prefix_len,
)
from parsers.tools._engine import (
    WS,
    ContentHold,
    fix_arg_types,
    name_and_args_from_json,
    name_in_args,
)

__all__ = ["Qwen3CoderToolParser", "qwen3_xml_arguments"]

TOOL_START = "<tool_call>"
TOOL_END = "</tool_call>"
FUNC_PREFIX = "<function="
FUNC_END = "</function>"
CLOSE = ">"
THINK_END = "</think>"
# Every literal the engine's lexer knows: a literal consumed whole hides the `>` inside it.
LITERALS = (
    TOOL_START, TOOL_END, FUNC_PREFIX, FUNC_END, "<parameter=", "</parameter>",
    "<think>", THINK_END, CLOSE,
)  # fmt: skip
ARGS_END = (FUNC_END, FUNC_PREFIX)
# What follows a call ended by each literal (FUNC_PREFIX opens the next call at once).
AFTER_CALL = {FUNC_END: Phase.BETWEEN, TOOL_END: Phase.AFTER, TOOL_START: Phase.BLOCK,
              FUNC_PREFIX: Phase.CALL}  # fmt: skip

_PARAMETER = re.compile(
    rf"<{WS}parameter{WS}={WS}([^>]*)>(.*?)(?:<{WS}/{WS}parameter{WS}>|(?=<{WS}parameter{WS}=))",
    re.DOTALL,
)


def _trim_newline(value: str) -> str:
    value = value.removeprefix("\n")
    return value.removesuffix("\n")


def qwen3_xml_arguments(body: str) -> str:
    """The JSON object of string parameters in a function body (before schema coercion)."""
    params: dict[str, str] = {}
    for found in _PARAMETER.finditer(body):
        params[found.group(1)] = _trim_newline(found.group(2))
    return json_dumps(params)


class Qwen3CoderToolParser(StreamingToolParser):
    """Phases: CONTENT (before any call slot) -> BLOCK (preamble) / CALL -> BETWEEN / AFTER."""

    name: ClassVar[str] = "qwen3_coder"

    def __init__(
        self,
        vocab: Vocab | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        think_end_is_content: bool = False,
        max_call_chars: int | None = None,
        special_tokens: Iterable[str] = (),
    ):
        """`think_end_is_content`: keep `</think>` in content verbatim, as vLLM's serving
        layer does when no reasoning parser is configured (it sets the engine's
        `skip_reasoning_parsing`); by default it is dropped, as `extract_tool_calls` does.
        `special_tokens` (the tokenizer's `all_special_tokens`): dropped from content, as
        vLLM's parser engine does with special tokens that are not the format's markers."""
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        self._content_targets: dict[str, Phase | None] = {
            TOOL_START: Phase.BLOCK, FUNC_PREFIX: Phase.CALL,
        }  # fmt: skip
        if not think_end_is_content:
            self._content_targets[THINK_END] = None
        for token in special_tokens:
            if token and token not in LITERALS and token != THINK_END:
                self._content_targets.setdefault(token, None)

    def _text_phase(
        self,
        run: Run,
        targets: Mapping[str, Phase | None],
        sink: Callable[[Run, str], None],
        at_end: Callable[[Run], None],
    ) -> bool:
        """Text to `sink` up to the first of `targets` (None: drop the literal and stay)."""
        markers = tuple(targets)
        at, marker = find_marker(run.buf, markers)
        if marker is None:
            keep = 0 if run.eos else marker_prefix_len(run.buf, markers)
            sink(run, run.take(len(run.buf) - keep))
            if run.eos:
                at_end(run)
            return False
        sink(run, run.take(at))
        run.take(len(marker))
        if targets[marker] is not None:
            run.phase = targets[marker]
            run.depth = 0
        return True

    def _content(self, run: Run) -> bool:
        return self._text_phase(
            run, self._content_targets, ContentHold.before_event, ContentHold.end_before_event
        )

    def _after(self, run: Run) -> bool:
        return self._text_phase(
            run, self._content_targets, ContentHold.after_event, ContentHold.end_after_event
        )

    def _block(self, run: Run) -> bool:
        targets = {TOOL_END: Phase.AFTER, FUNC_PREFIX: Phase.CALL}
        return self._text_phase(run, targets, _discard, ContentHold.end_after_event)

    def _between(self, run: Run) -> bool:
        targets = {TOOL_END: Phase.AFTER, TOOL_START: Phase.BLOCK, FUNC_PREFIX: Phase.CALL}
        return self._text_phase(run, targets, _discard, ContentHold.end_after_event)

    def _call(self, run: Run) -> bool:
        while True:
            literals = ARGS_END if run.depth else LITERALS
            at, marker = find_marker(run.buf, literals, run.scan)
            if marker is None:
                break
            if not run.depth and marker == CLOSE:
                run.depth = run.scan = at + 1
            elif marker in AFTER_CALL:
                self._end_call(run, at, marker)
                return True
            else:  # another literal inside the function name: name text
                run.scan = at + len(marker)
        if run.eos:
            self._end_call(run, len(run.buf), "")
            return True
        run.scan = max(run.scan, len(run.buf) - marker_prefix_len(run.buf, literals))
        return False

    def _end_call(self, run: Run, at: int, marker: str) -> None:
        args_at = run.depth
        raw = run.take(at + len(marker))
        name = raw[: args_at - 1] if args_at else raw[:at]
        body = raw[args_at:at] if args_at else ""
        call = self._call_of(name, body)
        if call is not None:
            run.emit_call(*call)
        elif name or name_in_args(body):  # vLLM sent this (blank) name, then dropped the call
            ContentHold.announce(run)
        run.depth = 0
        run.phase = AFTER_CALL.get(marker, Phase.AFTER)

    def _call_of(self, raw_name: str, body: str) -> tuple[str, str] | None:
        """(name, arguments) as vLLM's engine builds them, or None for a dropped slot."""
        name: object = (raw_name or name_in_args(body)).strip()
        if not name and body.strip():
            name, arguments = name_and_args_from_json(body)
        elif body.strip():
            arguments = qwen3_xml_arguments(body)
        else:
            arguments = "{}"
        if not isinstance(name, str) or not name:
            return None
        return name, fix_arg_types(arguments, name, self.tools)

    handlers: ClassVar = {
        Phase.CONTENT: _content,
        Phase.BLOCK: _block,
        Phase.CALL: _call,
        Phase.BETWEEN: _between,
        Phase.AFTER: _after,
    }


def _discard(run: Run, text: str) -> None:
    """Text inside the tool-call markup that the format drops."""
