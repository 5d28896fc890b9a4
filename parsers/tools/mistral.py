"""Mistral tool calls, pre-v11 tokenizers (v1-v3): `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`.

vLLM 0.33 (`MistralToolParser` -> `MistralParser._legacy_extract_tool_calls`, tool_choice
"auto") batch semantics reproduced here:

* no `[TOOL_CALLS]`: the output is content;
* otherwise the text before the first marker is content (None when only whitespace); the
  first non-blank segment after a marker (segments split at every marker), stripped, is
  decoded with `raw_decode` (trailing text ignored), or failing that the greedy `[{...}]`
  inside it with `json.loads`;
* a dict is one call, a list is many; items must be dicts with `name` or `arguments`; a
  missing or non-string name becomes "", missing arguments "{}", string arguments are kept
  verbatim, other arguments are `json.dumps(value, ensure_ascii=False)`;
* no call found: the content is that stripped segment alone;
* ids are Mistral-shaped (9 alphanumerics); vLLM draws them at random, ours derive from the
  request id and index (`mistral_tool_call_id`).

Streaming: content streams until the marker (leading whitespace is held, bounded by
MAX_HELD_CHARS, because a whitespace-only prefix is dropped); everything after the marker is
held (bounded by MAX_TOOL_CALL_CHARS) and decided at the end of the output, since the
segment rules need the whole tail.

Divergence from vLLM's batch (test `test_mistral_divergence_prose_then_no_call`): when the
marker is preceded by prose and no call can be decoded, vLLM returns only the stripped
segment; the prose was already streamed, so ours returns prose + segment.
Not covered: v11+ tokenizers (`[TOOL_CALLS]name[ARGS]{...}`), and the "required"/named
tool_choice bare-array path (the caller's tool_choice is not an input of this parser).
"""

from __future__ import annotations

import hashlib
import re
import string
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS
from parsers.tools._base import (
    Phase,
    Run,
    StreamingToolParser,
    find_marker,
    is_json,
    json_dumps,
    json_loads,
    json_raw_decode,
    marker_prefix_len,
)

__all__ = ["MistralToolParser", "mistral_tool_call_id", "mistral_calls"]

BOT = "[TOOL_CALLS]"
_ARRAY = re.compile(r"\[{.*}\]", re.DOTALL)
_ALPHANUMERIC = string.ascii_letters + string.digits


def mistral_tool_call_id(request_id: str, index: int) -> str:
    """Deterministic Mistral-valid id: 9 alphanumerics."""
    digest = hashlib.blake2b(f"{request_id}:{index}".encode(), digest_size=9).digest()
    return "".join(_ALPHANUMERIC[b % len(_ALPHANUMERIC)] for b in digest)


def _decode(segment: str) -> Any:
    parsed, _ = json_raw_decode(segment)
    if is_json(parsed):
        return parsed
    found = _ARRAY.findall(segment)
    return json_loads(found[0]) if found else parsed


def mistral_calls(segment: str) -> list[tuple[str, str]]:
    """Calls in the stripped first segment after the marker ([] when vLLM finds none)."""
    parsed = _decode(segment)
    items = [parsed] if isinstance(parsed, dict) else parsed
    if not is_json(parsed) or not isinstance(items, list):
        return []
    calls = []
    for item in items:
        if not isinstance(item, dict) or not ("name" in item or "arguments" in item):
            continue
        name, arguments = item.get("name"), item.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            arguments = json_dumps(arguments)
        calls.append((name if isinstance(name, str) else "", arguments))
    return calls


class MistralToolParser(StreamingToolParser):
    name: ClassVar[str] = "mistral"

    def call_id(self, request_id: str, index: int) -> str:
        return mistral_tool_call_id(request_id, index)

    def _content(self, run: Run) -> bool:
        # `flag`: non-whitespace content was emitted (so a whitespace run is no longer held).
        at, marker = find_marker(run.buf, (BOT,))
        if marker is not None:
            before = run.take(at)
            if run.flag or before.strip():
                run.content(before)
            run.take(len(marker))
            run.phase = Phase.CALL
            return True
        keep = 0 if run.eos else marker_prefix_len(run.buf, (BOT,))
        text = run.buf[: len(run.buf) - keep]
        if not run.flag and not text.strip() and not run.eos and len(text) <= MAX_HELD_CHARS:
            return False  # a whitespace-only prefix is dropped if a marker follows
        run.flag = True
        run.content(run.take(len(text)))
        return False

    def _call(self, run: Run) -> bool:
        if not run.eos:
            return False
        tail = run.take(len(run.buf))
        segment = next((s.strip() for s in tail.split(BOT) if s.strip()), "")
        calls = mistral_calls(segment)
        for name, arguments in calls:
            run.emit_call(name, arguments)
        if not calls:
            run.content(segment)
        run.phase = Phase.VERBATIM
        return True

    handlers: ClassVar = {
        Phase.CONTENT: _content,
        Phase.CALL: _call,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }
