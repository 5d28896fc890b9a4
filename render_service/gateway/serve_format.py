"""Derender output -> the exact chunks `vllm serve` streams (vLLM 0.33 field sets and order).

Why a projection: derender returns full pydantic dumps (every field, nulls included) and,
like vLLM's /derender, folds the assistant role into the first content delta. `vllm serve`
instead (openai/chat_completion/serving.py, completion/serving.py, v0.33.0):
- chat: on the first engine output sends one role chunk per choice,
  `delta {"role": "assistant", "content": ""}`, with `prompt_token_ids` and `prompt_text`;
  content chunks are dumped with `exclude_unset`, so they carry `logprobs`, `finish_reason`,
  `token_ids` (and `stop_reason`, `weight_versions` on the final one) and a top-level
  `kv_transfer_params`, and the delta holds only the fields the parser set; a delta that is
  None is skipped unless the chunk finishes or carries logprobs/token ids; without a parser
  the delta is always `{"content": text}` (text may be "").
- completions: every choice field is set, so every one appears, plus `kv_transfer_params`.
- the usage chunk (`stream_options.include_usage`) is dumped with `exclude_none`:
  `{"id", "object", "created", "model", "choices": [], "usage": {...}, "system_fingerprint"}`.
- `system_fingerprint` goes on each terminal chunk (finish_reason set) when no usage chunk
  follows, else on the usage chunk only; it sits after `usage`, before `kv_transfer_params`.
- `continuous_usage_stats`: every chunk (role, echo and content chunks too) carries its
  choice's running `usage` right after `choices`; chat's includes `completion_tokens_details`
  (`{"reasoning_tokens": n}`, the choice's count so far; null without a reasoning parser),
  completions' does not. The usage chunk's chat usage has it too (the sum over choices).
- tool-call deltas of the hermes parser (`hermes`, `qwen3_json`) carry `"content": null`:
  vLLM 0.33's Hermes2ProToolParser builds them as `DeltaMessage(content=content, ...)` with
  content None, and exclude_unset keeps an explicitly set None. Other parsers leave it unset.
- chat `echo`: `{"id", "object", "created", "model", "choices": [{"index", "delta":
  {"content"}, "logprobs", "finish_reason"}]}` per choice, after the role chunks.
- one `id` (`chatcmpl-<id>` / `cmpl-<id>`) and one `created` for the whole stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamIdentity", "ChunkExtras", "chat_role_chunk", "chat_echo_chunk",
           "chat_content_chunk", "completion_chunk", "usage_chunk", "running_usage",
           "completion_error_event", "prune_none", "TOOL_PARSERS_WITH_NULL_CONTENT",
           "completion_tokens_details"]


@dataclass(frozen=True, slots=True)
class StreamIdentity:
    id: str
    created: int
    model: str
    object: str  # "chat.completion.chunk" | "text_completion"

    def head(self) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model}


@dataclass(frozen=True, slots=True)
class ChunkExtras:
    """Optional top-level fields of one chunk (absent, not null, when None)."""

    usage: dict[str, Any] | None = None
    system_fingerprint: str | None = None

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.system_fingerprint is not None:
            out["system_fingerprint"] = self.system_fingerprint
        return out


_NO_EXTRAS = ChunkExtras()


# Tool parsers whose streamed tool-call deltas set content explicitly (to None).
TOOL_PARSERS_WITH_NULL_CONTENT = frozenset({"hermes", "qwen3_json"})


def running_usage(prompt_tokens: int, completion_tokens: int, *, chat: bool,
                  reasoning_tokens: int | None = None) -> dict[str, Any]:
    """A continuous_usage_stats `usage` (vLLM sets completion_tokens_details only in chat;
    `reasoning_tokens` None: no reasoning parser, so the details are null)."""
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if chat:
        usage["completion_tokens_details"] = completion_tokens_details(reasoning_tokens)
    return usage


def completion_tokens_details(reasoning_tokens: int | None) -> dict[str, int] | None:
    """vLLM's `_make_completion_tokens_details`; None without a reasoning parser."""
    return None if reasoning_tokens is None else {"reasoning_tokens": reasoning_tokens}


def prune_none(value: Any) -> Any:
    """Drop None-valued keys at every depth (our stand-in for pydantic's exclude_unset)."""
    if isinstance(value, dict):
        return {k: prune_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_none(v) for v in value]
    return value


def chat_role_chunk(ident: StreamIdentity, index: int, prompt_token_ids: list[int] | None, *,
                    role: str = "assistant", extras: ChunkExtras = _NO_EXTRAS) -> dict[str, Any]:
    choice = {"index": index, "delta": {"role": role, "content": ""}, "logprobs": None,
              "finish_reason": None}
    return {**ident.head(), "choices": [choice], **extras.fields(),
            "prompt_token_ids": prompt_token_ids, "prompt_text": None}


def chat_echo_chunk(ident: StreamIdentity, index: int, text: str, *,
                    extras: ChunkExtras = _NO_EXTRAS) -> dict[str, Any]:
    choice = {"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    return {**ident.head(), "choices": [choice], **extras.fields()}


def chat_content_chunk(ident: StreamIdentity, choice: dict[str, Any], *, index: int,
                       has_parser: bool, return_token_ids: bool, had_tokens: bool,
                       tool_parser: str | None = None, extras: ChunkExtras = _NO_EXTRAS
                       ) -> dict[str, Any] | None:
    """One derendered chat choice as serve streams it, or None when serve would skip it."""
    delta = {k: v for k, v in prune_none(choice.get("delta") or {}).items() if k != "role"}
    if "tool_calls" in delta and "content" not in delta and \
            tool_parser in TOOL_PARSERS_WITH_NULL_CONTENT:
        delta = {"content": None, **delta}  # DeltaMessage field order: content first
    finish = choice.get("finish_reason")
    logprobs = choice.get("logprobs")
    token_ids = choice.get("token_ids") if return_token_ids else None
    if not has_parser and had_tokens:
        delta = {"content": delta.get("content", "")}
    if not delta and finish is None and logprobs is None and token_ids is None:
        return None
    out: dict[str, Any] = {"index": index, "delta": delta, "logprobs": logprobs,
                           "finish_reason": finish}
    if finish is not None:
        out["stop_reason"] = choice.get("stop_reason")
    out["token_ids"] = token_ids
    if finish is not None:
        out["weight_versions"] = choice.get("weight_versions")
    return {**ident.head(), "choices": [out], **extras.fields(), "kv_transfer_params": None}


def completion_chunk(ident: StreamIdentity, choice: dict[str, Any], *, index: int,
                     prompt_token_ids: list[int] | None, return_token_ids: bool,
                     echo: str = "", extras: ChunkExtras = _NO_EXTRAS) -> dict[str, Any]:
    """`echo`: text to put before this chunk's text (the prompt, on a choice's first chunk)."""
    out = {
        "index": index,
        "text": echo + (choice.get("text") or ""),
        "logprobs": choice.get("logprobs"),
        "finish_reason": choice.get("finish_reason"),
        "stop_reason": choice.get("stop_reason"),
        "prompt_token_ids": prompt_token_ids,
        "token_ids": choice.get("token_ids") if return_token_ids else None,
        "weight_versions": choice.get("weight_versions"),
    }
    return {**ident.head(), "choices": [out], **extras.fields(), "kv_transfer_params": None}


def usage_chunk(ident: StreamIdentity, prompt_tokens: int, completion_tokens: int,
                system_fingerprint: str | None = None, *, reasoning_tokens: int | None = None
                ) -> dict[str, Any]:
    """The include_usage chunk (exclude_none: no details key without a reasoning parser)."""
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = completion_tokens_details(reasoning_tokens)
    return {**ident.head(), "choices": [], **ChunkExtras(usage, system_fingerprint).fields()}


def completion_error_event(message: str, error_type: str, status: int) -> bytes:
    """/v1/completions writes mid-stream errors with json.dumps (spaces after , and :)."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": status}}
    return f"data: {json.dumps(body)}\n\n".encode()
