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

__all__ = ["chat_to_response", "response_events", "sampling_echo"]


# vLLM 0.33 dumps the response with `model_dump(mode="json", by_alias=True)`: every field of
# the openai SDK types it echoes is written, null when unset, in the types' field order.
_FUNCTION_TOOL_FIELDS = ("name", "parameters", "strict", "type", "allowed_callers", "async",
                         "defer_loading", "description", "output_schema")
_REASONING_FIELDS = ("context", "effort", "generate_summary", "mode", "summary")
_TEXT_FIELDS = ("format", "verbosity")
_TEXT_FORMAT_FIELDS = {"json_schema": ("name", "schema", "type", "description", "strict")}
_TOOL_CHOICE_FIELDS = {"function": ("name", "type")}
# SamplingParams JSON omits a value equal to its dataclass default.
_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 16, "presence_penalty": 0.0,
                      "frequency_penalty": 0.0, "logprobs": None}


def _shaped(value: dict[str, Any] | None, fields: tuple[str, ...]) -> dict[str, Any] | None:
    return None if value is None else {name: value.get(name) for name in fields}


def _tool_echo(tool: dict[str, Any]) -> dict[str, Any]:
    return _shaped(tool, _FUNCTION_TOOL_FIELDS) if tool.get("type") == "function" else tool  # type: ignore[return-value]


def _text_echo(text: dict[str, Any] | None) -> dict[str, Any] | None:
    shaped = _shaped(text, _TEXT_FIELDS)
    fmt = shaped and shaped["format"]
    if isinstance(fmt, dict) and fmt.get("type") in _TEXT_FORMAT_FIELDS:
        shaped["format"] = _shaped(fmt, _TEXT_FORMAT_FIELDS[fmt["type"]])  # type: ignore[index]
    return shaped


def _cache_options_echo(options: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if options is None else {k: v for k, v in options.items() if k != "prewarm"}


def _choice_echo(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") in _TOOL_CHOICE_FIELDS:
        return _shaped(choice, _TOOL_CHOICE_FIELDS[choice["type"]])
    return choice


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """vLLM's ResponseUsage. The engine's generate answer carries no cached-prompt count, so
    `cached_tokens` is what the chat usage reports (README "Known differences")."""
    if usage is None:
        return None
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [], "tool_output_tokens_per_turn": []},
            "total_tokens": prompt + completion}  # fmt: skip


def _item_status(finish: str | None) -> str:
    return "incomplete" if finish == "length" else "completed"


def sampling_echo(rendered: dict[str, Any]) -> dict[str, Any]:
    """The resolved sampling values `ResponsesResponse.from_request` echoes, from the render."""
    sampling = rendered.get("sampling_params") or {}
    return {key: sampling.get(key, default) for key, default in _SAMPLING_DEFAULTS.items()}


def _envelope(request: dict[str, Any], sampling: dict[str, Any], model: str, status: str,
              output: list[dict[str, Any]], usage: dict[str, Any] | None, created: int) -> dict[str, Any]:
    """vLLM 0.33 `ResponsesResponse.from_request`, in its field order."""
    return {
        "id": request["request_id"], "created_at": created,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"), "metadata": request.get("metadata"), "model": model,
        "object": "response", "output": output,
        "parallel_tool_calls": True if request.get("parallel_tool_calls") is None else request["parallel_tool_calls"],
        "temperature": sampling["temperature"], "tool_choice": _choice_echo(request.get("tool_choice")),
        "tools": [_tool_echo(tool) for tool in request.get("tools", [])], "top_p": sampling["top_p"],
        "background": request.get("background"), "max_output_tokens": sampling["max_tokens"],
        "max_tool_calls": request.get("max_tool_calls"), "previous_response_id": None, "prompt": None,
        "prompt_cache_options": _cache_options_echo(request.get("prompt_cache_options")),
        "prompt_cache_key": request.get("prompt_cache_key"),
        "prompt_cache_retention": request.get("prompt_cache_retention"),
        "reasoning": _shaped(request.get("reasoning"), _REASONING_FIELDS),
        "safety_identifier": request.get("safety_identifier"),
        "service_tier": request.get("service_tier"), "status": status,
        "text": _text_echo(request.get("text")), "top_logprobs": sampling["logprobs"],
        "truncation": request.get("truncation"), "usage": usage, "user": request.get("user"),
        "presence_penalty": sampling["presence_penalty"], "frequency_penalty": sampling["frequency_penalty"],
        "kv_transfer_params": None, "ec_transfer_params": None, "input_messages": None, "output_messages": None,
    }  # fmt: skip


def chat_to_response(request: dict[str, Any], sampling: dict[str, Any], chat: dict[str, Any]) -> dict[str, Any]:
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
    return _envelope(request, sampling, chat["model"], last_status, output, _usage(chat.get("usage")), chat["created"])


def _reasoning_item(item_id: str, text: str, status: str | None = None) -> dict[str, Any]:
    return {"id": item_id, "summary": [], "type": "reasoning",
            "content": [{"text": text, "type": "reasoning_text"}], "encrypted_content": None, "status": status}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "content": [_text_part(text)], "role": "assistant", "status": status, "type": "message",
            "phase": None}


def _text_part(text: str, logprobs: list[Any] | None = None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"arguments": arguments, "call_id": call_id, "name": name, "type": "function_call",
            "id": item_id, "async": None, "caller": None, "namespace": None, "status": status}


class _Events:
    """vLLM 0.33's `SimpleStreamingEventProcessor`: one open item (reasoning, message or
    function call); a delta of another kind, or another call index, closes it and opens the
    next. Events are the openai SDK types' dumps, every field written."""

    def __init__(self) -> None:
        self.sequence = 0
        self.output_index = 0
        self.kind: str | None = None
        self.item_id = ""
        self.call: dict[str, Any] = {}
        self.text: list[str] = []
        self.done_items: list[dict[str, Any]] = []

    def event(self, event_type: str, **fields: Any) -> bytes:
        data = {**fields, "sequence_number": self.sequence, "type": event_type}
        self.sequence += 1
        return b"event: " + event_type.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _added(self, item: dict[str, Any]) -> bytes:
        return self.event("response.output_item.added", item=item, output_index=self.output_index)

    def _part(self, event_type: str, part: dict[str, Any]) -> bytes:
        return self.event(event_type, content_index=0, item_id=self.item_id, output_index=self.output_index,
                          part=part)

    def open(self, kind: str, call: dict[str, Any] | None = None) -> list[bytes]:
        self.kind, self.text = kind, []
        if kind == "reasoning":
            self.item_id = f"rs_{random_uuid()}"
            return [self._added({"id": self.item_id, "summary": [], "type": "reasoning", "content": None,
                                 "encrypted_content": None, "status": "in_progress"}),
                    self._part("response.content_part.added", {"text": "", "type": "reasoning_text"})]
        if kind == "message":
            self.item_id = f"msg_{random_uuid()}"
            return [self._added({"id": self.item_id, "content": [], "role": "assistant", "status": "in_progress",
                                 "type": "message", "phase": None}),
                    self._part("response.content_part.added", _text_part("", []))]
        assert call is not None
        self.item_id, self.call = f"fc_{random_uuid()}", call
        # vLLM builds a ResponseFunctionToolCallItem, but the event's `item` field is typed as
        # the output-item union, which pydantic dumps as ResponseFunctionToolCall (no created_by).
        return [self._added(_call_item(self.item_id, call["id"], call["name"], "", "in_progress"))]

    def close(self, status: str) -> list[bytes]:
        if self.kind is None:
            return []
        text = "".join(self.text)
        closer = {"reasoning": self._close_reasoning, "message": self._close_message,
                  "function_call": self._close_function_call}[self.kind]
        events, item = closer(text, status)
        events.append(self.event("response.output_item.done", item=item, output_index=self.output_index))
        self.done_items.append(item)
        self.kind = None
        self.output_index += 1
        return events

    def _close_reasoning(self, text: str, status: str) -> tuple[list[bytes], dict[str, Any]]:
        item = _reasoning_item(self.item_id, text, status)
        return [self.event("response.reasoning_text.done", content_index=0, item_id=self.item_id,
                           output_index=self.output_index, text=text),
                self._part("response.content_part.done", item["content"][0])], item

    def _close_message(self, text: str, status: str) -> tuple[list[bytes], dict[str, Any]]:
        item = _message_item(self.item_id, text, status)
        events = [self.event("response.output_text.done", content_index=0, item_id=self.item_id, logprobs=[],
                             output_index=self.output_index, text=text),
                  self._part("response.content_part.done", item["content"][0])]
        if not text:  # vLLM: an empty message item has no content part
            item["content"] = []
        return events, item

    def _close_function_call(self, text: str, status: str) -> tuple[list[bytes], dict[str, Any]]:
        item = _call_item(self.item_id, self.call["id"], self.call["name"], text, status)
        return [self.event("response.function_call_arguments.done", arguments=text, item_id=self.item_id,
                           output_index=self.output_index, name=self.call["name"])], item

    def delta(self, text: str) -> bytes:
        self.text.append(text)
        common = {"item_id": self.item_id, "output_index": self.output_index}
        if self.kind == "message":
            return self.event("response.output_text.delta", content_index=0, delta=text, logprobs=[], **common)
        if self.kind == "reasoning":
            return self.event("response.reasoning_text.delta", content_index=0, delta=text, **common)
        return self.event("response.function_call_arguments.delta", delta=text, **common)


async def response_events(request: dict[str, Any], chat_body: dict[str, Any], sampling: dict[str, Any],
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
            shell = _envelope(request, sampling, model, "in_progress", [], None, created)
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
    status = _item_status(finish)
    final = _envelope(request, sampling, model, status, events.done_items, _usage(usage), created)
    yield events.event("response.completed" if status == "completed" else "response.incomplete", response=final)


def _choice_events(delta: dict[str, Any], events: _Events) -> list[bytes]:
    """vLLM's `split_delta` (reasoning, content, then calls by index) and its transitions."""
    out: list[bytes] = []
    if delta.get("reasoning") is not None:
        out += _switch(events, "reasoning")
        out.append(events.delta(delta["reasoning"]))
    if delta.get("content"):
        out += _switch(events, "message")
        out.append(events.delta(delta["content"]))
    for call in delta.get("tool_calls") or []:
        function = call.get("function")
        if function is None:
            continue
        index = call.get("index", 0)
        if events.kind != "function_call" or events.call.get("index") != index:
            out += events.close("completed")
            out += events.open("function_call", {"index": index, "id": call.get("id"), "name": function.get("name")})
        if function.get("arguments"):
            out.append(events.delta(function["arguments"]))
    return out


def _switch(events: _Events, kind: str) -> list[bytes]:
    if events.kind == kind:
        return []
    return [*events.close("completed"), *events.open(kind)]
