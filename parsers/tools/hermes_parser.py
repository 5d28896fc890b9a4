"""Hermes / Qwen JSON tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

vLLM 0.33 (`Hermes2ProToolParser`, also `qwen3_json`) batch semantics reproduced here:

* content is the text before the first `<tool_call>` (None when empty); text between and
  after calls is dropped;
* a call's body runs to the next `</tool_call>`, or to the end of the output when it never
  closes; the body must be a JSON object with a string `name` and an `arguments` key, whose
  value becomes `json.dumps(arguments, ensure_ascii=False)` (a string value stays a JSON
  string, as upstream);
* any malformed call makes the whole output content.

Streaming: content streams as it arrives, holding back only a possible `<tool_call>` start;
each call is emitted whole (name, id, canonical arguments) when `</tool_call>` arrives or at
the end of the output.

Divergence from vLLM's batch (stream == our batch instead; test
`test_hermes_later_malformed_call_divergence`): when a call after an already emitted call is
malformed, vLLM's batch returns the whole output as content; we keep the emitted calls and
return the malformed call's raw text (markers included) as content. Following vLLM would
mean taking back a call already streamed, or holding every call (and its text, in the state)
until the output ends.
"""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.tools._base import Phase, Run, StreamingToolParser, is_json, json_dumps, json_loads

__all__ = ["HermesToolParser", "hermes_call"]

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


class HermesToolParser(StreamingToolParser):
    name: ClassVar[str] = "hermes"

    def _content(self, run: Run) -> bool:
        return self.hold_or_content(run, (START,), Phase.CALL)

    def _call(self, run: Run) -> bool:
        end = run.buf.find(END, run.scan)
        if end == -1 and not run.eos:
            run.scan = max(0, len(run.buf) - len(END) + 1)
            return False
        body = run.buf if end == -1 else run.buf[:end]
        raw = run.take(len(run.buf) if end == -1 else end + len(END))
        call = hermes_call(body)
        if call is None:
            run.reject_call(raw, resume=Phase.BETWEEN)
        else:
            run.emit_call(*call)
            run.phase = Phase.BETWEEN
        return True

    def _between(self, run: Run) -> bool:
        return self.hold_or_drop(run, (START,), Phase.CALL)

    handlers: ClassVar = {
        Phase.CONTENT: _content,
        Phase.CALL: _call,
        Phase.BETWEEN: _between,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }
