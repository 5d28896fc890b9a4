"""The Anthropic Messages API over the chat pipeline, as `vllm serve`'s `/v1/messages` does it.

vLLM converts the Messages request to a chat request (`render_service.render.anthropic`), runs
chat completion, and converts the result: a chat.completion becomes one message
(`messages_full_converter`), a chat stream becomes Anthropic events
(`message_stream_converter`): message_start, then per block content_block_start / _delta /
_stop (thinking, text, tool_use), message_delta with stop_reason and usage, message_stop.
The stream converter keeps O(1) state per stream besides the arguments of the current tool
call (vLLM's `_is_json` check decides whether a stop string cut the call short).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from render_service.errors import RenderServiceError
from render_service.gateway.serve_format import prune_none

__all__ = ["anthropic_error_body", "anthropic_usage", "chat_sse_objects", "chat_to_message", "message_events"]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                503: "overloaded_error"}  # fmt: skip


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(exc: RenderServiceError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _error_type(exc.status), "message": exc.message}}


def anthropic_usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM `_build_anthropic_usage`: input excludes cached tokens, which are listed apart."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    out: dict[str, Any] = {}
    input_tokens = usage.get("prompt_tokens") or 0
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        input_tokens -= details["cached_tokens"]
        out["cache_read_input_tokens"] = details["cached_tokens"]
    return {"input_tokens": max(0, input_tokens), "output_tokens": usage.get("completion_tokens") or 0, **out}


def _stop_reason(finish: str | None, stop: Any, tool_used: bool, tool_complete: bool) -> tuple[str | None, str | None]:
    if finish == "length":
        return "max_tokens", None
    if finish not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(stop, str):
        return "stop_sequence", stop
    if finish == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def chat_to_message(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion as an Anthropic message (vLLM `messages_full_converter`)."""
    choice = chat["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or []
    stop_reason, stop_sequence = _stop_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                                              bool(calls), bool(calls))
    content: list[dict[str, Any]] = []
    if message.get("reasoning"):
        content.append({"type": "thinking", "thinking": message["reasoning"], "signature": uuid.uuid4().hex})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in calls:
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"])})
    message_body = {
        "id": chat["id"], "type": "message", "role": "assistant",
        "content": content or [{"type": "text", "text": ""}],
        "model": chat["model"], "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        "usage": anthropic_usage(chat.get("usage")),
    }  # fmt: skip
    pruned: dict[str, Any] = prune_none(message_body)  # vLLM: model_dump(exclude_none=True)
    return pruned


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


async def chat_sse_objects(body: AsyncIterator[bytes]) -> AsyncGenerator[dict[str, Any], None]:
    """The JSON objects of a chat SSE stream (`data: ...` lines, `[DONE]` ends it)."""
    buffer = b""
    async for piece in body:
        buffer += piece
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            for line in frame.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    return
                yield orjson.loads(payload)


class _Blocks:
    """The open content block and the stream's finish facts."""

    def __init__(self) -> None:
        self.next_index = 0
        self.kind: str | None = None
        self.signature: str | None = None
        self.tool_id: str | None = None
        self.pending_text: list[str] = []  # content that arrives inside a tool_use block
        self.tool_args: list[str] = []  # the current call's arguments (the stop-string check)
        self.tool_used = False
        self.ids_by_index: dict[int, str] = {}

    def start(self, block: dict[str, Any]) -> bytes:
        event = _event("content_block_start", {"type": "content_block_start", "index": self.next_index,
                                               "content_block": block})  # fmt: skip
        self.kind = block["type"]
        self.signature = uuid.uuid4().hex if self.kind == "thinking" else None
        self.tool_id = block.get("id") if self.kind == "tool_use" else None
        return event

    def delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self.next_index, "delta": delta})

    def stop(self) -> list[bytes]:
        if self.kind is None:
            return []
        events = []
        if self.signature is not None:
            events.append(self.delta({"type": "signature_delta", "signature": self.signature}))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": self.next_index}))
        self.kind, self.signature, self.tool_id = None, None, None
        self.next_index += 1
        return events

    def stop_and_flush(self) -> list[bytes]:
        text = "".join(self.pending_text)
        self.pending_text.clear()
        events = self.stop()
        if text:
            events.append(self.start({"type": "text", "text": ""}))
            events.append(self.delta({"type": "text_delta", "text": text}))
            events.extend(self.stop())
        return events

    def switch_to(self, block: dict[str, Any]) -> list[bytes]:
        return [*self.stop_and_flush(), self.start(block)]


async def message_events(body: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """A chat completion SSE stream as Anthropic Messages events (vLLM's converter)."""
    blocks = _Blocks()
    finish: str | None = None
    stop_reason: Any = None
    first = True
    try:
        async for chunk in chat_sse_objects(body):
            if "error" in chunk and "choices" not in chunk:
                error = chunk["error"]
                for event in blocks.stop():
                    yield event
                yield _event("error", {"type": "error", "error": {
                    "type": _error_type(int(error.get("code") or 500)), "message": error.get("message", "")}})
                return
            if first:
                first = False
                yield _event("message_start", {"type": "message_start", "message": {
                    "id": chunk["id"], "type": "message", "role": "assistant", "content": [],
                    "model": chunk["model"], "stop_reason": None, "stop_sequence": None,
                    "usage": anthropic_usage(chunk.get("usage"))}})  # fmt: skip
                continue
            if not chunk.get("choices"):
                for event in blocks.stop_and_flush():
                    yield event
                reason, sequence = _stop_reason(finish or "stop", stop_reason, blocks.tool_used,
                                                blocks.tool_used and _is_json("".join(blocks.tool_args)))
                yield _event("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                               "usage": anthropic_usage(chunk.get("usage"))})  # fmt: skip
                continue
            for event in _choice_events(chunk["choices"][0], blocks):
                yield event
            choice = chunk["choices"][0]
            if choice.get("finish_reason") is not None:
                finish, stop_reason = choice["finish_reason"], choice.get("stop_reason")
        for event in blocks.stop_and_flush():
            yield event
        yield _event("message_stop", {"type": "message_stop"})
    except (ValueError, KeyError, TypeError) as exc:  # a malformed chunk: end with an error event
        for event in blocks.stop():
            yield event
        yield _event("error", {"type": "error", "error": {"type": "api_error", "message": str(exc)}})


def _choice_events(choice: dict[str, Any], blocks: _Blocks) -> list[bytes]:
    delta = choice.get("delta") or {}
    events: list[bytes] = []
    reasoning = delta.get("reasoning")
    if reasoning:
        if blocks.kind != "thinking":
            events += blocks.switch_to({"type": "thinking", "thinking": ""})
        events.append(blocks.delta({"type": "thinking_delta", "thinking": reasoning}))
    content = delta.get("content")
    if content:
        if blocks.kind == "tool_use":
            blocks.pending_text.append(content)
        else:
            if blocks.kind != "text":
                events += blocks.switch_to({"type": "text", "text": ""})
            events.append(blocks.delta({"type": "text_delta", "text": content}))
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        call_id = call.get("id")
        if call_id is not None:
            blocks.ids_by_index[call.get("index", 0)] = call_id
            if blocks.tool_id != call_id and function.get("name") is not None:
                events += blocks.switch_to({"type": "tool_use", "id": call_id, "name": function["name"], "input": {}})
                blocks.tool_used = True
                blocks.tool_args = []
        else:
            call_id = blocks.ids_by_index.get(call.get("index", 0))
        arguments = function.get("arguments")
        if arguments and call_id is not None and blocks.tool_id == call_id:
            blocks.tool_args.append(arguments)
            events.append(blocks.delta({"type": "input_json_delta", "partial_json": arguments}))
    return events
