"""Mistral tool calls (vLLM name `mistral`), in the format the tokenizer selects.

vLLM 0.33 (`MistralToolParser` over `vllm/parser/mistral.py`) picks the format from the
vocabulary, and so does this parser: with `[ARGS]` (v11+ tokenizers) calls are
`[TOOL_CALLS]name[ARGS]{...}`, handled by `parsers.tools._mistral_v11` (see its docstring);
without it (v1-v3) they are `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`, handled here.
Both need `[TOOL_CALLS]` in the vocabulary, as upstream. Ids are Mistral-shaped
(9 alphanumerics); vLLM draws them at random, ours derive from the request id and index
(`mistral_tool_call_id`).

Pre-v11 batch semantics (`MistralParser._legacy_extract_tool_calls`, tool_choice "auto"):

* no `[TOOL_CALLS]`: the output is content;
* otherwise the text before the first marker is content (None when only whitespace); the
  first non-blank segment after a marker (segments split at every marker), stripped, is
  decoded with `raw_decode` (trailing text ignored), or failing that the greedy `[{...}]`
  inside it with `json.loads`;
* a dict is one call, a list is many; items must be dicts with `name` or `arguments`; a
  missing or non-string name becomes "", missing arguments "{}", string arguments are kept
  verbatim, other arguments are `json.dumps(value, ensure_ascii=False)`;
* no call found: the content is that stripped segment alone.

Pre-v11 streaming: content streams until the marker (leading whitespace is held, bounded by
MAX_HELD_CHARS, because a whitespace-only prefix is dropped); everything after the marker is
held (bounded by MAX_TOOL_CALL_CHARS) and decided at the end of the output, since the
segment rules need the whole tail.

Divergence from vLLM's batch (test `test_mistral_divergence_prose_then_no_call`): when a
pre-v11 marker is preceded by prose and no call can be decoded, vLLM's batch returns only
the stripped segment, dropping the prose the model wrote before the marker; that prose was
already streamed, so ours returns prose + segment (as vLLM's own stream does).
tool_choice "none" (with tools, `with_calls_suppressed()`): pre-v11 the whole output is
content, as is; v11+ the engine rule of `parsers.tools._legacy_engine` (markup dropped, the rest
verbatim). Not covered: the pre-v11 "required"/named tool_choice bare-array path.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsers._base import MAX_HELD_CHARS, Vocab
from parsers._errors import ParserConfigError
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
from parsers.tools._mistral_v11 import V11_HANDLERS, ReasoningEncoding, V11Format

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


def _has_token(vocab: Any, token: str) -> bool:
    """`token` is in the vocabulary (a `Vocab`, or a plain token -> id mapping)."""
    if isinstance(vocab, Mapping):
        return token in vocab
    return vocab.token_to_id(token) is not None


class MistralToolParser(StreamingToolParser):
    name: ClassVar[str] = "mistral"

    def __init__(
        self,
        vocab: Vocab | Mapping[str, int] | None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        max_call_chars: int | None = None,
        special_tokens: Iterable[str] = (),
        supports_grammar: bool = False,
        skip_reasoning_parsing: bool = False,
    ):
        """The format is chosen from `vocab` as vLLM does (`[ARGS]` present: v11+; no
        vocabulary: pre-v11). v11+ only: `special_tokens` (the tokenizer's
        `all_special_tokens`) are dropped from the text like vLLM's parser engine does;
        `supports_grammar` (a mistral-common tokenizer that supports grammars) selects the
        `<think>` reasoning markers when the vocabulary has no `[THINK]`;
        `skip_reasoning_parsing` keeps reasoning markers as text, as vLLM's serving layer
        does when no reasoning parser is configured (`extract_tool_calls` alone does not)."""
        super().__init__(vocab, tools, max_call_chars=max_call_chars)
        if vocab is not None and not _has_token(vocab, BOT):
            raise ParserConfigError(
                "mistral tool parser could not locate the tool call token in the tokenizer"
            )
        self.v11: V11Format | None = None
        self.handlers = self._PRE_V11_HANDLERS
        if vocab is not None and _has_token(vocab, "[ARGS]"):
            encoding: ReasoningEncoding = (
                "special_token" if _has_token(vocab, "[THINK]")
                else "text" if supports_grammar
                else "none"
            )  # fmt: skip
            self.v11 = V11Format.build(
                encoding, tuple(special_tokens), self.tools,
                skip_reasoning_parsing=skip_reasoning_parsing,
            )  # fmt: skip
            self.handlers = V11_HANDLERS

    @property
    def state_tag(self) -> str:
        return "mistral/v11" if self.v11 is not None else "mistral"

    def call_id(self, request_id: str, index: int) -> str:
        return mistral_tool_call_id(request_id, index)

    def tool_choice_none_content(self, text: str, request_id: str) -> str | None:
        if self.v11 is None and not text:
            return ""  # the pre-v11 path returns an empty output itself, not None
        return super().tool_choice_none_content(text, request_id)

    def _content(self, run: Run) -> bool:
        if self.suppress_calls:  # vLLM: tool_choice="none" with tools returns the output as is
            run.phase = Phase.VERBATIM
            return True
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

    _PRE_V11_HANDLERS: ClassVar = {
        Phase.CONTENT: _content,
        Phase.CALL: _call,
        Phase.VERBATIM: StreamingToolParser.verbatim,
    }
    handlers = _PRE_V11_HANDLERS  # per instance: the v11 table when the vocabulary says so
