"""Llama 3.x / 4 JSON tool calls: `<|python_tag|>{"name": ..., "parameters": {...}}; {...}`.

vLLM 0.33 (`Llama3JsonToolParser`, also `llama4_json`) batch semantics reproduced here:

* every top-level `{` starts a JSON object (decoded with Python's json); each must have a
  string `name` and an `arguments` (else `parameters`) key, whose value becomes
  `json.dumps(value, ensure_ascii=False)`; text between objects is ignored;
* with at least one call the content is None; any malformed object (or none at all) makes
  the whole output content;
* quirk kept: a `{` directly after an object's closing `}` is skipped (vLLM's "inside the
  previous object" test is off by one), so the next `{` inside it is tried instead.
  `flag` in the state remembers "the previous char closed an object".

Streaming: whether this is a tool-call output is decided at its first non-whitespace text
(`{`, `<|python_tag|>`, or `[` followed by blanks and `{`: a list of calls, whose brackets
vLLM's batch ignores); that leading text is held (bounded by MAX_HELD_CHARS). In a
tool-call output, text before the first accepted call is kept in `pending` (bounded by
MAX_TOOL_CALL_CHARS) so that a malformed first call, or no call at all, still returns the
whole output as content. Each call is emitted whole when its object closes.

Divergences from vLLM's batch (stream == our batch instead; tests
`test_llama3_divergence_*`), each a case where vLLM's batch would take back text or calls
already streamed: prose before the first object is content and the objects after it stay
content (vLLM's batch would extract them and drop the prose, which streamed before any
object was seen; its stream does as we do); a malformed object after an emitted call,
including the inner object vLLM's off-by-one skip picks in `{..}{..}`, becomes content (its
raw text) and the earlier calls stay (vLLM's batch would make all output content).
"""

from __future__ import annotations

from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS
from parsers.tools._base import (
    JsonEndScanner,
    Phase,
    Run,
    StreamingToolParser,
    is_json,
    json_dumps,
    json_loads,
)

__all__ = ["Llama3JsonToolParser", "llama_call"]

PYTHON_TAG = "<|python_tag|>"


def llama_call(raw: str) -> tuple[str, str] | None:
    """(name, arguments) of one JSON object as vLLM accepts it, or None."""
    obj: Any = json_loads(raw)
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


class Llama3JsonToolParser(StreamingToolParser):
    name: ClassVar[str] = "llama3_json"
    initial_phase: ClassVar[Phase] = Phase.LEAD

    def _lead(self, run: Run) -> bool:
        body = run.buf.lstrip()
        if body.startswith("["):  # a list of calls: `[` and blanks are held like blanks
            body = body[1:].lstrip()
        lead = len(run.buf) - len(body)
        if body.startswith("{") or body.startswith(PYTHON_TAG):
            run.drop(run.take(lead))
            run.phase = Phase.BETWEEN
            return True
        if run.eos or (body and not PYTHON_TAG.startswith(body)) or lead > MAX_HELD_CHARS:
            run.phase = Phase.VERBATIM
            return True
        return False

    def _between(self, run: Run) -> bool:
        start = 1 if run.flag and run.buf.startswith("{") else 0
        if run.buf:
            run.flag = False
        at = run.buf.find("{", start)
        if at != -1:
            run.drop(run.take(at))
            run.phase = Phase.CALL
            return True
        run.drop(run.take(len(run.buf)))
        if run.eos and run.n_calls == 0:  # no call at all: the whole output is content
            run.content(run.pending)
            run.pending = ""
        return False

    def _call(self, run: Run) -> bool:
        end = JsonEndScanner.maybe_end(run)
        if end is None:
            if not run.eos:
                return False
            JsonEndScanner.reset(run)
            end = len(run.buf)
        raw = run.take(end)
        call = llama_call(raw)
        if call is None:
            run.reject_call(raw, resume=Phase.BETWEEN)
        else:
            run.emit_call(*call)
            run.phase = Phase.BETWEEN
            run.flag = True
        return True

    handlers: ClassVar = {
        Phase.LEAD: _lead,
        Phase.BETWEEN: _between,
        Phase.CALL: _call,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }
