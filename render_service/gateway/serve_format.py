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
  `{"id", "object", "created", "model", "choices": [], "usage": {...}}`.
- one `id` (`chatcmpl-<id>` / `cmpl-<id>`) and one `created` for the whole stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamIdentity", "chat_role_chunk", "chat_content_chunk", "completion_chunk",
           "usage_chunk", "completion_error_event", "prune_none"]


@dataclass(frozen=True, slots=True)
class StreamIdentity:
    id: str
    created: int
    model: str
    object: str  # "chat.completion.chunk" | "text_completion"

    def head(self) -> dict[str, Any]:
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model}


def prune_none(value: Any) -> Any:
    """Drop None-valued keys at every depth (our stand-in for pydantic's exclude_unset)."""
    if isinstance(value, dict):
        return {k: prune_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_none(v) for v in value]
    return value


def chat_role_chunk(ident: StreamIdentity, index: int, prompt_token_ids: list[int] | None
                    ) -> dict[str, Any]:
    choice = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
              "finish_reason": None}
    return {**ident.head(), "choices": [choice], "prompt_token_ids": prompt_token_ids,
            "prompt_text": None}


def chat_content_chunk(ident: StreamIdentity, choice: dict[str, Any], *, index: int,
                       has_parser: bool, return_token_ids: bool, had_tokens: bool
                       ) -> dict[str, Any] | None:
    """One derendered chat choice as serve streams it, or None when serve would skip it."""
    delta = {k: v for k, v in prune_none(choice.get("delta") or {}).items() if k != "role"}
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
    return {**ident.head(), "choices": [out], "kv_transfer_params": None}


def completion_chunk(ident: StreamIdentity, choice: dict[str, Any], *, index: int,
                     prompt_token_ids: list[int] | None, return_token_ids: bool
                     ) -> dict[str, Any]:
    out = {
        "index": index,
        "text": choice.get("text") or "",
        "logprobs": choice.get("logprobs"),
        "finish_reason": choice.get("finish_reason"),
        "stop_reason": choice.get("stop_reason"),
        "prompt_token_ids": prompt_token_ids,
        "token_ids": choice.get("token_ids") if return_token_ids else None,
        "weight_versions": choice.get("weight_versions"),
    }
    return {**ident.head(), "choices": [out], "kv_transfer_params": None}


def usage_chunk(ident: StreamIdentity, prompt_tokens: int, completion_tokens: int
                ) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
             "completion_tokens": completion_tokens}
    return {**ident.head(), "choices": [], "usage": usage}


def completion_error_event(message: str, error_type: str, status: int) -> bytes:
    """/v1/completions writes mid-stream errors with json.dumps (spaces after , and :)."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": status}}
    return f"data: {json.dumps(body)}\n\n".encode()
