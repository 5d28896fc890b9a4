"""The OpenAI Responses API over the chat pipeline, as `vllm serve`'s `/v1/responses` answers.

The request is rendered as vLLM renders it (`render_service.render.responses`: the same chat
prompt, tools and constraints), served by the chat pipeline, and its chat.completion becomes a
`response` object with vLLM's output items (`build_response_output_items`): reasoning, message,
function_call. Streams become Responses events with sequence numbers; each item is opened when
its first delta arrives and closed when the next kind starts or the stream ends, so the state is
the open item and its text so far (the `.done` events repeat it, as the API defines).

Stateless: `store` is not kept and `previous_response_id` is refused (400).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from render_service.gateway.anthropic import chat_sse_objects
from render_service.protocol import random_uuid

__all__ = ["chat_to_response", "response_events"]


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion}  # fmt: skip


def _item_status(finish: str | None) -> str:
    return "incomplete" if finish == "length" else "completed"


def _envelope(request: dict[str, Any], chat_body: dict[str, Any], model: str, status: str,
              output: list[dict[str, Any]], usage: dict[str, Any] | None, created: int) -> dict[str, Any]:
    """vLLM `ResponsesResponse.from_request` (sampling fields as the request resolved them)."""
    return {
        "id": request["request_id"], "created_at": created,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"), "metadata": request.get("metadata"), "model": model,
        "object": "response", "output": output,
        "parallel_tool_calls": True if request.get("parallel_tool_calls") is None else request["parallel_tool_calls"],
        "temperature": chat_body.get("temperature"), "tool_choice": request.get("tool_choice"),
        "tools": request.get("tools", []), "top_p": chat_body.get("top_p"),
        "background": request.get("background"), "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"), "previous_response_id": None, "prompt": None,
        "reasoning": request.get("reasoning"), "service_tier": request.get("service_tier"), "status": status,
        "text": request.get("text"), "top_logprobs": request.get("top_logprobs"),
        "truncation": request.get("truncation"), "usage": usage, "user": request.get("user"),
    }  # fmt: skip


def chat_to_response(request: dict[str, Any], chat_body: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
    choice = chat["choices"][0]
    message, finish = choice["message"], choice.get("finish_reason")
    last_status = _item_status(finish)
    calls = message.get("tool_calls") or []
    output: list[dict[str, Any]] = []
    if message.get("reasoning"):
        output.append(_reasoning_item(f"rs_{random_uuid()}", message["reasoning"]))
    if message.get("content"):
        output.append(_message_item(f"msg_{random_uuid()}", message["content"], "completed" if calls else last_status))
    for index, call in enumerate(calls):
        status = last_status if index == len(calls) - 1 else "completed"
        output.append(_call_item(f"fc_{random_uuid()}", call["id"], call["function"]["name"],
                                 call["function"]["arguments"], status))
    status = "incomplete" if finish == "length" else "completed"
    return _envelope(request, chat_body, chat["model"], status, output, _usage(chat.get("usage")), chat["created"])


def _reasoning_item(item_id: str, text: str, status: str | None = None) -> dict[str, Any]:
    return {"id": item_id, "summary": [], "type": "reasoning",
            "content": [{"text": text, "type": "reasoning_text"}], "encrypted_content": None, "status": status}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "content": [_text_part(text)], "role": "assistant", "status": status, "type": "message"}


def _text_part(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": None}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"arguments": arguments, "call_id": call_id, "name": name, "type": "function_call",
            "id": item_id, "status": status}


class _Events:
    def __init__(self) -> None:
        self.sequence = 0
        self.output_index = -1
        self.kind: str | None = None
        self.item: dict[str, Any] = {}
        self.text: list[str] = []
        self.done_items: list[dict[str, Any]] = []

    def event(self, event_type: str, **fields: Any) -> bytes:
        data = {"type": event_type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return b"event: " + event_type.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def open(self, kind: str, item: dict[str, Any]) -> list[bytes]:
        events = self.close("completed")
        self.output_index += 1
        self.kind, self.item, self.text = kind, item, []
        events.append(self.event("response.output_item.added", output_index=self.output_index, item=item))
        if kind == "message":
            events.append(self.event("response.content_part.added", item_id=item["id"],
                                     output_index=self.output_index, content_index=0, part=_text_part("")))
        elif kind == "reasoning":
            events.append(self.event("response.content_part.added", item_id=item["id"], output_index=self.output_index,
                                     content_index=0, part={"text": "", "type": "reasoning_text"}))
        return events

    def close(self, status: str) -> list[bytes]:
        if self.kind is None:
            return []
        text, item_id, index = "".join(self.text), self.item["id"], self.output_index
        events: list[bytes] = []
        if self.kind == "message":
            events.append(self.event("response.output_text.done", item_id=item_id, output_index=index,
                                     content_index=0, text=text, logprobs=[]))
            events.append(self.event("response.content_part.done", item_id=item_id, output_index=index,
                                     content_index=0, part=_text_part(text)))
            item = _message_item(item_id, text, status)
        elif self.kind == "reasoning":
            events.append(self.event("response.reasoning_text.done", item_id=item_id, output_index=index,
                                     content_index=0, text=text))
            events.append(self.event("response.content_part.done", item_id=item_id, output_index=index,
                                     content_index=0, part={"text": text, "type": "reasoning_text"}))
            item = _reasoning_item(item_id, text)
        else:
            events.append(self.event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                                     arguments=text, name=self.item["name"]))
            item = _call_item(item_id, self.item["call_id"], self.item["name"], text, status)
        events.append(self.event("response.output_item.done", output_index=index, item=item))
        self.done_items.append(item)
        self.kind = None
        return events

    def delta(self, text: str) -> bytes:
        self.text.append(text)
        event_type = {"message": "response.output_text.delta", "reasoning": "response.reasoning_text.delta",
                "function_call": "response.function_call_arguments.delta"}[self.kind or "message"]
        extra: dict[str, Any] = {"content_index": 0} if self.kind != "function_call" else {}
        if self.kind == "message":
            extra["logprobs"] = []
        return self.event(event_type, item_id=self.item["id"], output_index=self.output_index, delta=text, **extra)


async def response_events(request: dict[str, Any], chat_body: dict[str, Any],
                          body: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    """A chat completion SSE stream as Responses streaming events."""
    events = _Events()
    created = int(time.time())
    model = str(chat_body.get("model") or "")
    finish: str | None = None
    usage: dict[str, Any] | None = None
    started = False
    async for chunk in chat_sse_objects(body):
        if "error" in chunk and "choices" not in chunk:
            yield events.event("error", code=str(chunk["error"].get("code")), message=chunk["error"].get("message"),
                               param=chunk["error"].get("param"))
            return
        if not started:
            started = True
            model = chunk.get("model") or model
            shell = _envelope(request, chat_body, model, "in_progress", [], None, created)
            yield events.event("response.created", response=shell)
            yield events.event("response.in_progress", response=shell)
        if chunk.get("usage") and not chunk.get("choices"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            for piece in _choice_events(choice.get("delta") or {}, events):
                yield piece
            finish = choice.get("finish_reason") or finish
    for piece in events.close(_item_status(finish)):
        yield piece
    status = "incomplete" if finish == "length" else "completed"
    final = _envelope(request, chat_body, model, status, events.done_items, _usage(usage), created)
    yield events.event("response.completed" if status == "completed" else "response.incomplete", response=final)


def _choice_events(delta: dict[str, Any], events: _Events) -> list[bytes]:
    out: list[bytes] = []
    if delta.get("reasoning"):
        if events.kind != "reasoning":
            out += events.open("reasoning", _reasoning_item(f"rs_{random_uuid()}", "", None))
        out.append(events.delta(delta["reasoning"]))
    if delta.get("content"):
        if events.kind != "message":
            out += events.open("message", _message_item(f"msg_{random_uuid()}", "", "in_progress"))
        out.append(events.delta(delta["content"]))
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        if call.get("id") is not None and function.get("name") is not None:
            out += events.open("function_call", _call_item(f"fc_{random_uuid()}", call["id"], function["name"], "",
                                                           "in_progress"))
        if function.get("arguments") and events.kind == "function_call":
            out.append(events.delta(function["arguments"]))
    return out
