"""OpenAI response objects as plain dicts, in vLLM 0.33's field order and with its nulls.

Key order matters to byte-comparing clients and to our differential tests, so every builder
writes every field explicitly, in the order vLLM's pydantic models dump them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from parsers._events import ToolCall

__all__ = [
    "usage",
    "usage_from_chunk",
    "chat_message",
    "chat_choice",
    "chat_response",
    "delta_message",
    "chat_stream_choice",
    "chat_chunk",
    "completion_choice",
    "completion_response",
    "completion_stream_choice",
    "completion_chunk",
    "now",
]


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def usage_from_chunk(chunk_usage: dict[str, Any] | None, prompt_tokens: int | None) -> dict[str, Any] | None:
    """Usage of a stream chunk: the caller's prompt count wins over the engine's."""
    if chunk_usage is None:
        return None
    prompt = prompt_tokens if prompt_tokens is not None else (chunk_usage.get("prompt_tokens") or 0)
    return usage(prompt, chunk_usage.get("completion_tokens") or 0)


def chat_message(
    content: str | None, reasoning: str | None = None, tool_calls: Sequence[ToolCall] = ()
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
    }
    if tool_calls:  # vLLM omits an empty tool_calls list
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    message["reasoning"] = reasoning
    return message


def chat_choice(
    index: int,
    message: dict[str, Any],
    logprobs: dict[str, Any] | None,
    finish_reason: str | None,
    stop_reason: int | str | None,
    token_ids: list[int] | None,
) -> dict[str, Any]:
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": token_ids,
        "routed_experts": None,
        "weight_versions": None,
    }


def chat_response(
    request_id: str,
    model: str,
    choices: list[dict[str, Any]],
    usage_info: dict[str, Any],
    *,
    prompt_logprobs: Any,
    prompt_token_ids: list[int] | None,
    kv_transfer_params: Any,
    metrics: Any,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage_info,
        "prompt_logprobs": prompt_logprobs,
        "prompt_token_ids": prompt_token_ids,
        "prompt_text": None,
        "kv_transfer_params": kv_transfer_params,
        "ec_transfer_params": None,
        "metrics": metrics,
    }


def delta_message(
    role: str | None,
    content: str | None,
    reasoning: str | None,
    tool_calls: list[dict[str, Any]],
) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": role, "content": content, "reasoning": reasoning}
    if tool_calls:
        delta["tool_calls"] = tool_calls
    return delta


def chat_stream_choice(
    index: int,
    delta: dict[str, Any],
    logprobs: dict[str, Any] | None,
    finish_reason: str | None,
    stop_reason: int | str | None,
    token_ids: list[int] | None,
) -> dict[str, Any]:
    return {
        "index": index,
        "delta": delta,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": token_ids,
        "weight_versions": None,
    }


def chat_chunk(
    request_id: str,
    model: str,
    choices: list[dict[str, Any]],
    usage_info: dict[str, Any] | None,
    *,
    prompt_token_ids: list[int] | None,
    metrics: Any,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": now(),
        "model": model,
        "choices": choices,
        "usage": usage_info,
        "system_fingerprint": None,
        "prompt_token_ids": prompt_token_ids,
        "prompt_text": None,
        "metrics": metrics,
        "kv_transfer_params": None,
    }


def completion_choice(
    index: int,
    text: str,
    logprobs: dict[str, Any] | None,
    finish_reason: str | None,
    stop_reason: int | str | None,
    token_ids: list[int] | None,
    prompt_token_ids: list[int] | None,
) -> dict[str, Any]:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": token_ids,
        "prompt_logprobs": None,
        "prompt_token_ids": prompt_token_ids,
        "routed_experts": None,
        "weight_versions": None,
    }


def completion_response(
    request_id: str,
    model: str,
    choices: list[dict[str, Any]],
    usage_info: dict[str, Any],
    *,
    kv_transfer_params: Any,
    metrics: Any,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage_info,
        "kv_transfer_params": kv_transfer_params,
        "ec_transfer_params": None,
        "metrics": metrics,
    }


def completion_stream_choice(
    index: int,
    text: str,
    logprobs: dict[str, Any] | None,
    finish_reason: str | None,
    stop_reason: int | str | None,
    token_ids: list[int] | None,
    prompt_token_ids: list[int] | None,
) -> dict[str, Any]:
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "prompt_token_ids": prompt_token_ids,
        "token_ids": token_ids,
        "weight_versions": None,
    }


def completion_chunk(
    request_id: str,
    model: str,
    choices: list[dict[str, Any]],
    usage_info: dict[str, Any] | None,
    *,
    metrics: Any,
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": choices,
        "usage": usage_info,
        "system_fingerprint": None,
        "metrics": metrics,
        "kv_transfer_params": None,
    }
